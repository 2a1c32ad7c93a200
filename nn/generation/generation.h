// Text generation from a causal LM, as transformers' model.generate: greedy or sampled
// (temperature, top-k, top-p), a repetition penalty, a batch of prompts of different lengths
// (left-padded, the padding masked out), each sequence stopping at its EOS, a KV cache allocated
// once (nn/generation/kv_cache.h); any registered family, with LoRA layers (merged or not), float32
// or bfloat16, on the CPU or a GPU. docs/generation.md has the script.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"

namespace tg::nn {

// transformers' GenerationConfig fields (and defaults) that tapegrad implements.
struct GenerationConfig {
  int64_t max_new_tokens = 20;
  // false: greedy (the most likely token). Sampling with temperature 0 is greedy too.
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;               // 0: no top-k
  double top_p = 1.0;               // 1: no top-p
  double repetition_penalty = 1.0;  // 1: none; > 1 discourages tokens already in the sequence
  std::vector<int32_t> eos_token_id;  // a sequence ends after generating any of these
  // The sampling draws (Philox): the same seed, the same samples. Without top_k, top_p and a
  // penalty a step samples on the model's device (ops/sample.h: Gumbel-max), else on the host.
  uint64_t seed = 0;
  // "dynamic": a decode step attends to the cache's filled columns. "static" (transformers'
  // StaticCache): to all of them, masked, with its inputs in fixed device tensors, so that every
  // step runs the same kernels on the same addresses (nn/generation/kv_cache.h: enable_static_decode).
  std::string cache_implementation = "dynamic";
  // With the static cache on a GPU: the decode step is captured as a CUDA graph at the second
  // token and replayed for the others (the tokens and logits bitwise those of "static" alone).
  bool cuda_graph = false;

  bool greedy() const { return !do_sample || temperature == 0.0; }
  // tg::Error naming the field: a value out of range, or a sampling field (temperature other than
  // 0 and 1, top_k, top_p) set while do_sample is false, where it would be silently unused.
  void validate() const;
  // A model folder's generation_config.json (or, without one, config.json's eos_token_id), as
  // transformers' GenerationConfig.from_pretrained. max_length is not read (max_new_tokens
  // decides); temperature, top_k and top_p only when the file sets do_sample (transformers
  // ignores them otherwise); a field that would change generation in a way tapegrad does not
  // implement (num_beams > 1, min_new_tokens, no_repeat_ngram_size, ...) is a tg::Error naming it.
  static GenerationConfig from_pretrained(const std::string& dir);
};

// Called for each new token as it is chosen: (index of the prompt, token id), in step order.
using TokenStreamer = std::function<void(int64_t sequence, int32_t token)>;

// Continues every prompt of input_ids (token ids, any lengths >= 1) by up to max_new_tokens ids;
// returns each prompt followed by its new ids, through the EOS where one came (no padding). The
// model runs in eval mode under NoGradGuard (its mode is restored). tg::Error for another kind
// of model, an empty prompt, an id outside the vocabulary, a bad config, or a prompt plus
// max_new_tokens longer than the model's context.
std::vector<std::vector<int32_t>> generate(Module& model, const std::vector<std::vector<int32_t>>& input_ids,
                                           const GenerationConfig& config, const TokenStreamer& streamer = {});

}  // namespace tg::nn
