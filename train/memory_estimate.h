// How much memory fine-tuning a Hugging Face folder will take, known before it loads: the weights
// from the safetensors headers (bytes by dtype, converted to the dtype they load in, 4-bit where
// quantised), what training adds (LoRA weights, their gradients and AdamW's two moments, or all of
// those for every weight in full fine-tuning) and the activations kept for backward, a per-token
// figure from config.json's sizes: every layer's without gradient checkpointing, else one hidden
// state a layer (in host memory with offload_activations) and the recomputed layer's, whose MLP
// intermediates the tiled MLP bounds to its chunk. A plan, to refuse a run that cannot fit
// (tg::available_memory) before minutes of loading and say what would fit, not a measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace tg::train {

struct MemoryEstimateOptions {
  DType dtype = kFloat32;        // what the weights load in
  bool load_in_4bit = false;     // the Linear weights but the head, and the experts', in NF4
  bool load_in_fp8 = false;      // ... or in FP8 (a byte a value)
  bool full = false;             // every weight trains (else LoRA on lora_targets)
  int64_t lora_r = 8;
  std::vector<std::string> lora_targets;  // peft's matching; {"all-linear"}: every Linear but the head
  int64_t batch = 1, seq = 1;    // tokens of a micro-batch: batch x seq
  bool gradient_checkpointing = false;
  bool offload_activations = false;  // with checkpointing: the layers' inputs in host memory
  int64_t mlp_chunk_tokens = 0;      // the tiled MLP's chunk (nn::tile_mlps); 0: untiled
};

// The sizes of a decoder the activations depend on (config.json's).
struct ModelSizes {
  int64_t hidden = 0, layers = 0, intermediate = 0, vocab = 0;
  int64_t q_width = 0, kv_width = 0;  // heads x head_dim, key-value heads x head_dim
};
// From config.json under either family's names (Llama-like, GPT-2); a size it lacks is 0 (GPT-2's
// n_inner null: 4 x n_embd). tg::Error naming `where` when it is no JSON object.
ModelSizes model_sizes(const std::string& config_json, const std::string& where);

struct MemoryEstimate {
  int64_t weights = 0, training = 0, activations = 0;  // bytes on the device
  int64_t host = 0;           // offloaded activations, in host memory
  int64_t largest = 0;        // the largest single intermediate, bytes
  std::string largest_what;   // what it is, e.g. "the MLP's [8192, 14336] intermediates"
  int64_t total() const { return weights + training + activations; }
  // "~5.3 GiB (weights 4.6, trained weights + gradients + AdamW 0.1, activations 0.6; ...)".
  std::string str() const;
};

struct WeightShape {
  std::string name;
  Shape shape;
};

MemoryEstimate estimate_training_memory(const std::vector<WeightShape>& weights, const ModelSizes& sizes,
                                        const MemoryEstimateOptions& options);
// tg::Error naming the folder when its headers or config.json cannot be read.
MemoryEstimate estimate_training_memory(const std::string& folder, const MemoryEstimateOptions& options);

// The longest seq (options' batch) whose estimate fits in `budget` bytes, 0 when none does.
int64_t longest_fitting_seq(const std::vector<WeightShape>& weights, const ModelSizes& sizes,
                            MemoryEstimateOptions options, int64_t budget);

}  // namespace tg::train
