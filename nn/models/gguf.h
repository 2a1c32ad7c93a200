// A model as a GGUF file for llama.cpp, Ollama and LM Studio, written as llama.cpp's
// convert_hf_to_gguf.py writes the same Hugging Face folder (docs/gguf.md): its architecture name,
// tensor names and layouts, hyperparameter keys. Each family says how (its registry entry's
// `gguf`, nn/models/architecture.h); the tokenizer's keys come from data::gguf_tokenizer_metadata.
//
//   tg::nn::save_gguf(*model, "model.gguf",
//                     {.dtype = tg::gguf::TensorType::kQ8_0,
//                      .metadata = tg::data::gguf_tokenizer_metadata(tok, model->dims().vocab_size)});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/gguf.h"
#include "nn/models/causal_lm.h"

namespace tg::nn {

// One tensor of the file, read from the model while the file is written.
struct GgufTensor {
  std::string name;  // llama.cpp's: "token_embd.weight", "blk.0.attn_q.weight", ...
  Tensor source;     // 1-D, 2-D [out, in] as a Linear holds it, or 3-D [experts, out, in]; any dtype and device
  // > 0: each head's rows (this many) reordered from the halves transformers rotates to the
  // adjacent pairs llama.cpp's LLaMA RoPE rotates (q and k of the "llama" architecture).
  int64_t rope_head_dim = 0;
  float add = 0;          // added to every value (Gemma's norms: transformers computes 1 + w)
  bool keep_f32 = false;  // F32 whatever the file's type (norms, biases, position embeddings)
};

// A model as a llama.cpp architecture takes it.
struct GgufModel {
  std::string architecture;  // general.architecture: "llama", "qwen2", "gemma2", "phi3", "gpt2", ...
  gguf::Metadata hparams;    // "<architecture>.context_length", ...
  std::vector<GgufTensor> tensors;
};

struct GgufOptions {
  // F32, F16, BF16 or Q8_0. As the converter: 1-D tensors and norms stay F32, and a Q8_0 matrix
  // whose rows are not whole blocks of 32 is F16.
  gguf::TensorType dtype = gguf::TensorType::kF16;
  // More keys (the tokenizer's; general.name), replacing any of the same name.
  gguf::Metadata metadata = {};
};

// The family's layout (its registry entry's `gguf`). tg::Error naming the family when llama.cpp
// has no architecture for it, or the option of its config that llama.cpp cannot run.
GgufModel gguf_model(const CausalLM& model);

// Writes `path` (atomically): general.*, the family's hyperparameters, options.metadata, the
// tensors. Everything is checked before a byte is written: the family, the dtype, LoRA layers
// (merge_and_unload first, or peft::save_adapter_gguf), and that options.metadata holds a
// tokenizer (llama.cpp loads no model without one). Each tensor streams from the model a few MB at
// a time, so a model whose parameters map their safetensors files needs no more memory.
void save_gguf(const CausalLM& model, const std::string& path, const GgufOptions& options = {});

// general.file_type of a file of `dtype` (llama.cpp's llama_ftype: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q8_0 7, MOSTLY_BF16 32); tg::Error for other types.
uint32_t gguf_file_type(gguf::TensorType dtype);

// Writes `tensors` after `metadata`, each as `dtype` or F32 as GgufTensor says (save_gguf and
// peft's adapters).
void write_gguf_tensors(const std::string& path, const gguf::Metadata& metadata, const std::vector<GgufTensor>& tensors,
                        gguf::TensorType dtype);

}  // namespace tg::nn
