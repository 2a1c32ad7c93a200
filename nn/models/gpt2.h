// The GPT-2 family (transformers' GPT2LMHeadModel names): learned positions, LayerNorm with
// bias, tanh-GELU MLP, fused q/k/v projection, lm_head tied to the token embedding.
//   transformer.wte.weight, transformer.wpe.weight,
//   transformer.h.{i}.ln_1.{weight,bias}, .attn.c_attn.{weight,bias}, .attn.c_proj.{weight,bias},
//   .ln_2.{weight,bias}, .mlp.c_fc.{weight,bias}, .mlp.c_proj.{weight,bias},
//   transformer.ln_f.{weight,bias}, lm_head.weight (= transformer.wte.weight)
// transformers stores c_attn, c_proj and c_fc as Conv1D with weights [in, out]; tapegrad keeps
// them as Linear [out, in], and nn/models/pretrained.h transposes those four weights per block when it
// reads or writes a transformers folder.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/models/causal_lm.h"
#include "nn/norm.h"

namespace tg::nn {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  double embd_pdrop = 0.1, attn_pdrop = 0.1, resid_pdrop = 0.1;

  int64_t inner() const { return n_inner ? n_inner : 4 * n_embd; }
  void validate() const;
  static GPT2Config gpt2();  // the 124M model (transformers' defaults)
  // The byte-level CPU toy: vocab 256, 128 positions, d 128, 4 layers, 4 heads, no dropout.
  static GPT2Config tiny();
};

class GPT2Block : public Module {
 public:
  explicit GPT2Block(const GPT2Config& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  // x + attn(ln_1(x)), then + mlp(ln_2(.)); cache: generation (nn/generation/kv_cache.h); position_ids:
  // packed rows (GPT2Attention::forward).
  Tensor forward(const Tensor& x, const LayerCache* cache, const Tensor& position_ids = Tensor());

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GELUMLP> mlp;
};

class GPT2Model : public Module {
 public:
  explicit GPT2Model(const GPT2Config& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }  // [B, T] -> [B, T, n_embd]
  // Packed rows: position_ids [B, T] index wpe, and each token attends only to its document.
  Tensor forward(const Tensor& ids, const Tensor& position_ids);
  // Generation: as DecoderModel's (positions continue the cache's sequences).
  Tensor forward(const Tensor& ids, KVCache& cache);
  // With gradient_checkpointing_enable(), each block runs under tg::checkpoint while training.
  bool supports_gradient_checkpointing() const override { return true; }

  GPT2Config config;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList<GPT2Block>> h;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  // Positions 0 .. T-1 on `device`: a view of one table made once a device (so a training step
  // uploads nothing and can be captured as a CUDA graph).
  Tensor positions(int64_t T, Device device);
  Tensor positions_;
};

// forward(ids [B, T]) -> logits [B, T, vocab]; loss: nn/models/causal_lm.h. lm_head's weight is
// transformer->wte->weight.
class GPT2LMHeadModel : public CausalLM {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& c, Generator& gen = default_generator());
  Tensor hidden_states(const Tensor& ids) override { return transformer->forward(ids); }
  Tensor hidden_states(const Tensor& ids, const Tensor& position_ids) override {
    return transformer->forward(ids, position_ids);
  }
  Tensor hidden_states(const Tensor& ids, KVCache& cache) override { return transformer->forward(ids, cache); }
  Embedding& input_embeddings() override { return *transformer->wte; }
  ModelDims dims() const override;
  const Architecture& architecture() const override;
  json::Value config_json() const override;

  GPT2Config config;
  std::shared_ptr<GPT2Model> transformer;
};

}  // namespace tg::nn
