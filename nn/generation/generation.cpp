#include "nn/generation/generation.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/detail/philox.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "nn/generation/kv_cache.h"
#include "nn/generation/logits_process.h"
#include "nn/models/architecture.h"
#include "nn/models/causal_lm.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/sample.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

constexpr const char* kOp = "generate";

CausalLM& causal_lm(Module& model) {
  auto* lm = dynamic_cast<CausalLM*>(&model);
  TG_CHECK(lm, kOp, "wants a causal LM (", architecture_names(), "), got ", model.type_name());
  return *lm;
}

// Eval mode for the call, the caller's mode afterwards (also when generation throws).
class EvalScope {
 public:
  explicit EvalScope(Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

// The next-token logits [B, V] from the hidden states of the last column.
Tensor last_logits(CausalLM& lm, const Tensor& hidden) {
  const int64_t T = hidden.shape()[1];
  Tensor logits = lm.logits(slice(hidden, 1, T - 1, T));
  return reshape(logits, {logits.shape()[0], logits.shape()[2]});
}

// Each running sequence's next token. Greedy or plain sampling (no top-k, top-p or penalty): on
// the model's device (B ids come back); otherwise every running row's scores go to the host for
// the processors.
std::vector<int32_t> choose(const Tensor& logits, const std::vector<std::vector<int32_t>>& seqs,
                            const std::vector<bool>& done, const GenerationConfig& c, uint64_t draw) {
  const int64_t B = logits.shape()[0], V = logits.shape()[1];
  std::vector<int32_t> next(static_cast<size_t>(B), 0);
  if (c.greedy() && c.repetition_penalty == 1.0) {
    const std::vector<int64_t> ids = argmax(logits, -1).to_vector<int64_t>();
    std::copy(ids.begin(), ids.end(), next.begin());
    return next;
  }
  if (c.top_k == 0 && c.top_p >= 1.0 && c.repetition_penalty == 1.0) {
    const std::vector<int64_t> ids = sample_categorical(logits, c.temperature, c.seed, draw).to_vector<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      TG_CHECK(ids[b] != kSampleNan, kOp, "the model's scores of sequence ", b, " hold a NaN");
      TG_CHECK(ids[b] >= 0, kOp, "no token of sequence ", b, " has a finite score");
      next[b] = static_cast<int32_t>(ids[b]);
    }
    return next;
  }
  std::vector<float> all = to(logits, kFloat32).to_vector<float>();
  for (int64_t b = 0; b < B; ++b) {
    if (done[b]) continue;
    std::span<float> row(all.data() + b * V, static_cast<size_t>(V));
    apply_repetition_penalty(row, seqs[b], c.repetition_penalty);
    if (c.greedy()) {
      next[b] = argmax_token(row, kOp);
      continue;
    }
    apply_temperature(row, c.temperature);
    apply_top_k(row, c.top_k);
    apply_top_p(row, c.top_p);
    // One uniform per sequence and step: Philox block (seed, draw + b).
    next[b] = sample_token(row, uniform01(philox(c.seed, draw + static_cast<uint64_t>(b)).v[0]), kOp);
  }
  return next;
}

// The decode steps against a static cache: the fed ids, the positions, the mask and the column in
// fixed device tensors, so each step runs the same work on the same addresses. With a graph the
// first step runs eagerly (the warm-up a capture needs), the second is captured, and every step
// replays it; the logits are then the graph's tensor, overwritten by the next step.
class StaticDecoder {
 public:
  StaticDecoder(CausalLM& lm, KVCache& cache, bool graphed) : lm_(lm), cache_(cache) {
    cache.enable_static_decode();
    ids_ = Tensor::empty({cache.batch(), 1}, {kInt64, cache.device()});
    if (graphed) graph_ = std::make_unique<cuda::CUDAGraph>(cache.device());
  }

  Tensor operator()(const std::vector<int64_t>& fed) {
    cache_.upload_decode_step();
    copy_(ids_, from_vector(fed, {cache_.batch(), 1}));
    if (!graph_ || !warmed_up_) {
      warmed_up_ = true;
      return last_logits(lm_, lm_.hidden_states(ids_, cache_));
    }
    if (!graph_->captured()) graph_->capture([&] { logits_ = last_logits(lm_, lm_.hidden_states(ids_, cache_)); });
    else cache_.advance(1);  // the capture's forward advanced the cache once; each replay fills a column too
    graph_->replay();
    return logits_;
  }

 private:
  CausalLM& lm_;
  KVCache& cache_;
  Tensor ids_, logits_;
  std::unique_ptr<cuda::CUDAGraph> graph_;
  bool warmed_up_ = false;
};

}  // namespace

std::vector<std::vector<int32_t>> generate(Module& model, const std::vector<std::vector<int32_t>>& input_ids,
                                           const GenerationConfig& config, const TokenStreamer& streamer) {
  config.validate();
  CausalLM& lm = causal_lm(model);
  const ModelDims dims = lm.dims();
  const Tensor& embedding = lm.input_embeddings().weight;  // its dtype and device are the hidden states'
  const int64_t B = static_cast<int64_t>(input_ids.size()), vocab = embedding.shape()[0],
                V = lm.lm_head->out_features;
  TG_CHECK(B >= 1, kOp, "input_ids holds no prompt");
  int64_t P = 0;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& p = input_ids[b];
    TG_CHECK(!p.empty(), kOp, "prompt ", b, " is empty (it needs at least one token, e.g. the BOS)");
    for (size_t i = 0; i < p.size(); ++i)
      TG_CHECK(p[i] >= 0 && p[i] < vocab, kOp, "prompt ", b, " holds token ", p[i], " at ", i,
               ", outside the vocabulary [0, ", vocab, ")");
    P = std::max<int64_t>(P, static_cast<int64_t>(p.size()));
  }
  for (int32_t id : config.eos_token_id)
    TG_CHECK(id < V, kOp, "eos_token_id ", id, " is outside the model's ", V, " logits");
  TG_CHECK(config.max_new_tokens <= dims.context - P, kOp, "the longest prompt (", P, " tokens) + max_new_tokens ",
           config.max_new_tokens, " exceeds the model's context (", dims.context_field, " ", dims.context,
           ")");  // no sum: it may overflow

  NoGradGuard no_grad;
  EvalScope eval(model);
  const Device device = embedding.device();
  // Left padding: every prompt ends in column P - 1, so each step appends one column for all.
  std::vector<int64_t> padding(static_cast<size_t>(B)), flat;
  flat.reserve(static_cast<size_t>(B * P));
  for (int64_t b = 0; b < B; ++b) {
    padding[b] = P - static_cast<int64_t>(input_ids[b].size());
    flat.insert(flat.end(), static_cast<size_t>(padding[b]), 0);  // any id: masked out
    flat.insert(flat.end(), input_ids[b].begin(), input_ids[b].end());
  }
  // The last new token is never fed back: P + max_new_tokens - 1 columns.
  KVCache cache(dims.num_layers, B, dims.kv_heads, dims.head_dim, P + config.max_new_tokens - 1,
                {embedding.dtype(), device}, padding);
  TG_CHECK(!config.cuda_graph || device.is_cuda(), kOp, "cuda_graph wants the model on a GPU, it is on ", device);
  std::optional<StaticDecoder> static_decode;
  TG_CHECK(config.cache_implementation != "static" || !dims.sliding_window || cache.max_length() <= dims.sliding_window,
           kOp, "the static cache (and cuda_graph) decodes within sliding_window ", dims.sliding_window,
           " only, this generation spans ", cache.max_length(), " positions: use the dynamic cache");
  if (config.cache_implementation == "static") static_decode.emplace(lm, cache, config.cuda_graph);
  Tensor logits = last_logits(lm, lm.hidden_states(from_vector(flat, {B, P}, device), cache));

  std::vector<std::vector<int32_t>> seqs = input_ids;
  std::vector<bool> done(static_cast<size_t>(B), false);
  int64_t running = B;
  for (int64_t step = 0; step < config.max_new_tokens; ++step) {
    const std::vector<int32_t> next = choose(logits, seqs, done, config, static_cast<uint64_t>(step * B));
    std::vector<int64_t> fed(static_cast<size_t>(B), 0);  // a finished sequence is fed any id
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      seqs[b].push_back(next[b]);
      fed[b] = next[b];
      if (streamer) streamer(b, next[b]);
      if (std::find(config.eos_token_id.begin(), config.eos_token_id.end(), next[b]) != config.eos_token_id.end()) {
        done[b] = true;
        --running;
      }
    }
    if (running == 0 || step + 1 == config.max_new_tokens) break;
    logits = static_decode ? (*static_decode)(fed)
                           : last_logits(lm, lm.hidden_states(from_vector(fed, {B, 1}, device), cache));
  }
  return seqs;
}

}  // namespace tg::nn
