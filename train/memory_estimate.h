// How much memory fine-tuning a Hugging Face folder will take, known before it loads: the weights
// from the safetensors headers (bytes by dtype, converted to the dtype they load in, 4-bit where
// quantised), what training adds (LoRA weights, their gradients and AdamW's two moments, or all of
// those for every weight in full fine-tuning) and the activations kept for backward, a rough
// per-token figure from config.json's sizes (one hidden state a layer with gradient checkpointing).
// A rough figure, to refuse a run that cannot fit (tg::available_memory) before minutes of loading,
// not a measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tg::train {

struct MemoryEstimateOptions {
  DType dtype = kFloat32;        // what the weights load in
  bool load_in_4bit = false;     // the Linear weights but the head in NF4
  bool load_in_fp8 = false;      // ... or in FP8 (a byte a value)
  bool full = false;             // every weight trains (else LoRA on lora_targets)
  int64_t lora_r = 8;
  std::vector<std::string> lora_targets;  // peft's matching; {"all-linear"}: every Linear but the head
  int64_t batch = 1, seq = 1;    // tokens of a micro-batch: batch x seq
  bool gradient_checkpointing = false;
};

struct MemoryEstimate {
  int64_t weights = 0, training = 0, activations = 0;  // bytes
  int64_t total() const { return weights + training + activations; }
  // "~5.3 GiB (weights 4.6, trained weights + gradients + AdamW 0.1, activations 0.6)" (MiB below 1 GiB).
  std::string str() const;
};

// tg::Error naming the folder when its headers or config.json cannot be read.
MemoryEstimate estimate_training_memory(const std::string& folder, const MemoryEstimateOptions& options);

}  // namespace tg::train
