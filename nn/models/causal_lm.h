// nn::CausalLM: what every causal language-model family gives the rest of tapegrad (transformers'
// PreTrainedModel with its generation hooks). from_pretrained, save_pretrained, generate, peft
// and the examples use only this and the family's registry entry (nn/models/architecture.h), so adding a
// family is its model file, its config file and one line in the registry.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/generator.h"
#include "io/json.h"
#include "nn/embedding.h"
#include "nn/generation/kv_cache.h"
#include "nn/linear.h"

namespace tg::nn {

struct Architecture;

// The sizes generation and the examples need.
struct ModelDims {
  int64_t vocab_size = 0;
  int64_t context = 0;  // the longest sequence the model takes
  const char* context_field = "max_position_embeddings";  // config.json's name for it
  int64_t num_layers = 0, kv_heads = 0, head_dim = 0;   // a KVCache's shape
  int64_t sliding_window = 0;  // the keys a query sees in the layers that have a window; 0: none
};

class CausalLM : public Module {
 public:
  using Module::Module;
  // ids [B, T] int32/int64 -> logits [B, T, vocab]
  Tensor forward(const Tensor& ids) override { return logits(hidden_states(ids)); }
  // ids [B, T] -> the final norm's output [B, T, hidden]
  virtual Tensor hidden_states(const Tensor& ids) = 0;
  // Packed rows (data::Layout::PackSeparate): position_ids [B, T] count each document's tokens
  // from 0, as transformers' position_ids (DataCollatorWithFlattening); the positions (RoPE, a
  // position embedding) are those, and each token attends only to its own document
  // (banded_causal_attention). Undefined: hidden_states(ids). The default refuses defined ones:
  // a family of one's own that does not take them says so.
  virtual Tensor hidden_states(const Tensor& ids, const Tensor& position_ids);
  // Generation: ids continue the sequences of `cache`, their keys and values join it (nn/generation/kv_cache.h).
  virtual Tensor hidden_states(const Tensor& ids, KVCache& cache) = 0;
  // The head on hidden states (and whatever the family does after it).
  virtual Tensor logits(const Tensor& hidden) { return lm_head->forward(hidden); }
  // Next-token loss of forward(ids) (with position_ids, as hidden_states') against labels (see
  // causal_lm_loss): a plain bias-free head takes the fused head + cross-entropy (no [B, T, V]
  // logits), an adapted one its logits.
  virtual Tensor loss(const Tensor& ids, const Tensor& labels, const Tensor& position_ids = Tensor());
  // Log-probabilities of the next tokens, as TRL's selective_log_softmax over the shifted logits
  // divided by `temperature`: [B, T] float32 (float64 for a float64 model), out[b, t] = log
  // p(labels[b, t + 1] | ids[b, ..t]), 0 where that label is -100 and at t = T - 1. The fused
  // head where loss() takes it (no [B, T, V] logits, no dW for a frozen head), else the logits.
  Tensor token_log_probs(const Tensor& ids, const Tensor& labels, const Tensor& position_ids = Tensor(),
                         double temperature = 1.0);

  virtual Embedding& input_embeddings() = 0;
  virtual ModelDims dims() const = 0;
  // The registry entry: Hugging Face names, peft's LoRA targets, the on-disk layout.
  virtual const Architecture& architecture() const = 0;
  // config.json as transformers writes it for this model.
  virtual json::Value config_json() const = 0;

  std::shared_ptr<Linear> lm_head;
  // The folder from_pretrained read it from (transformers' name_or_path; "" otherwise): what peft
  // records as an adapter's base_model_name_or_path, and checks an adapter against.
  std::string name_or_path;

 protected:
  // Whether the logits are hidden states times lm_head's weight, so the losses may take the fused
  // head (ops/linear_cross_entropy.h): a plain bias-free head here.
  virtual bool logits_are_head_product() const;
  // transformers' _init_weights, drawn from `gen` in module order: every Linear weight ~ N(0, std)
  // (linear_std(its name) where given), biases zero, embeddings, experts' weights and attention
  // sinks ~ N(0, std), experts' biases zero; with tie_head,
  // lm_head only advances gen past its draw and then shares input_embeddings()' weight.
  void init_weights(double std, bool tie_head, Generator& gen,
                    const std::function<double(const std::string& name)>& linear_std = nullptr);
};

// What a family's forward checks of ids (`who` names it in errors): [B, T] int32 or int64; for a
// cached forward also B = cache.batch() and a cache of num_layers layers.
void check_ids(const char* who, const Tensor& ids);
void check_ids(const char* who, const Tensor& ids, const KVCache& cache, int64_t num_layers);

// What a family's forward checks of position_ids (`who` names it in errors): [B, T] as ids, int32
// or int64, on ids' device, every position in [0, context) (read on the host for CPU tensors; on
// a GPU the position lookup's index checks report one outside).
void check_position_ids(const char* who, const Tensor& ids, const Tensor& position_ids, int64_t context);

}  // namespace tg::nn
