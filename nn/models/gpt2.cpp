#include "nn/models/gpt2.h"

#include <cmath>

#include "core/activation_checkpoint.h"
#include "core/factory.h"
#include "core/limits.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "nn/models/architecture.h"
#include "ops/binary.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

// The block under tg::checkpoint: its activations are recomputed at backward.
Tensor checkpointed(const std::shared_ptr<GPT2Block>& block, const Tensor& x, const Tensor& position_ids) {
  auto fn = [block, position_ids](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{block->forward(in[0], nullptr, position_ids)};
  };
  CheckpointOptions options;
  if (block->gradient_checkpointing_kwargs().offload_activations) options.offload = {0};
  return checkpoint(fn, {x}, options)[0];
}

}  // namespace

void GPT2Config::validate() const {
  TG_CHECK(vocab_size > 0 && n_positions > 0 && n_embd > 0 && n_layer > 0 && n_head > 0, "GPT2Config",
           "sizes must be positive");
  TG_CHECK(n_embd % n_head == 0, "GPT2Config", "n_embd ", n_embd, " is not divisible by n_head ", n_head);
  TG_CHECK(n_layer <= kMaxLayers, "GPT2Config", "n_layer ", n_layer, " is above ", kMaxLayers, ", the most tapegrad builds");
  TG_CHECK(n_positions <= kMaxContext, "GPT2Config", "n_positions ", n_positions, " is above ", kMaxContext,
           ", the longest context tapegrad builds");
}

GPT2Config GPT2Config::gpt2() { return {}; }

GPT2Config GPT2Config::tiny() {
  GPT2Config c;
  c.vocab_size = 256;
  c.n_positions = 128;
  c.n_embd = 128;
  c.n_layer = 4;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

GPT2Block::GPT2Block(const GPT2Config& c, Generator& gen) : Module("GPT2Block") {
  ln_1 = std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon);
  attn = std::make_shared<GPT2Attention>(c.n_embd, c.n_head, c.attn_pdrop, c.resid_pdrop, gen);
  ln_2 = std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon);
  mlp = std::make_shared<GELUMLP>(c.n_embd, c.inner(), true, c.resid_pdrop, gen);
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

Tensor GPT2Block::forward(const Tensor& x, const LayerCache* cache, const Tensor& position_ids) {
  Tensor h = add(x, attn->forward(ln_1->forward(x), cache, position_ids));
  return add(h, mlp->forward(ln_2->forward(h)));
}

GPT2Model::GPT2Model(const GPT2Config& c, Generator& gen) : Module("GPT2Model"), config(c) {
  c.validate();
  wte = std::make_shared<Embedding>(c.vocab_size, c.n_embd, gen);
  wpe = std::make_shared<Embedding>(c.n_positions, c.n_embd, gen);
  drop = std::make_shared<Dropout>(c.embd_pdrop);
  h = std::make_shared<ModuleList<GPT2Block>>();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(c, gen));
  ln_f = std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon);
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("drop", drop);
  register_module("h", h);
  register_module("ln_f", ln_f);
}

Tensor GPT2Model::forward(const Tensor& ids, const Tensor& position_ids) {
  check_ids("GPT2Model", ids);
  const int64_t T = ids.shape()[1];
  TG_CHECK(T <= config.n_positions, "GPT2Model", "sequence length ", T, " exceeds n_positions ", config.n_positions);
  if (position_ids.defined()) check_position_ids("GPT2Model", ids, position_ids, config.n_positions);
  // [B, T, d] + [T, d], or + [B, T, d] per sequence
  const Tensor pos = position_ids.defined() ? position_ids : positions(T, ids.device());
  Tensor x = drop->forward(add(wte->forward(ids), wpe->forward(pos)));
  const bool checkpointing = is_gradient_checkpointing() && is_training();
  for (const auto& block : *h)
    x = checkpointing ? checkpointed(block, x, position_ids) : block->forward(x, nullptr, position_ids);
  return ln_f->forward(x);
}

Tensor GPT2Model::positions(int64_t T, Device device) {
  if (!positions_.defined() || positions_.device() != device)
    positions_ = arange(config.n_positions, {.dtype = kInt64, .device = device});
  return slice(positions_, 0, 0, T);
}

Tensor GPT2Model::forward(const Tensor& ids, KVCache& cache) {
  check_ids("GPT2Model", ids, cache, static_cast<int64_t>(h->size()));
  const int64_t T = ids.shape()[1];
  const CacheStep step = cache.step(T, "GPT2Model");
  TG_CHECK(step.max_position < config.n_positions, "GPT2Model", "position ", step.max_position,
           " is past n_positions ", config.n_positions);
  Tensor pos = step.uniform ? arange(static_cast<double>(step.start), static_cast<double>(step.start + T), 1,
                                     {.dtype = kInt64, .device = ids.device()})
                            : step.positions;  // [T] or per sequence [B, T]
  Tensor x = drop->forward(add(wte->forward(ids), wpe->forward(pos)));
  for (size_t i = 0; i < h->size(); ++i) {
    const LayerCache layer_cache = cache.layer(static_cast<int64_t>(i), step);
    x = (*h)[i].forward(x, &layer_cache);
  }
  cache.advance(T);
  return ln_f->forward(x);
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c, Generator& gen) : CausalLM("GPT2LMHeadModel"), config(c) {
  {
    init::ReserveDrawsGuard redrawn_below;  // the layers' default init: only its counters are used
    transformer = std::make_shared<GPT2Model>(c, gen);
    lm_head = std::make_shared<Linear>(c.n_embd, c.vocab_size, false, gen);
  }
  register_module("transformer", transformer);
  register_module("lm_head", lm_head);
  // transformers' GPT2 init: weights ~ N(0, 0.02), biases 0, LayerNorm (1, 0), and the residual
  // projections (c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)); lm_head is wte (one tensor, two names).
  const double proj_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  init_weights(c.initializer_range, /*tie_head=*/true, gen, [&](const std::string& name) {
    const bool residual = name.size() >= 6 && name.compare(name.size() - 6, 6, "c_proj") == 0;
    return residual ? proj_std : c.initializer_range;
  });
}

ModelDims GPT2LMHeadModel::dims() const {
  return {.vocab_size = config.vocab_size,
          .context = config.n_positions,
          .context_field = "n_positions",
          .num_layers = config.n_layer,
          .kv_heads = config.n_head,
          .head_dim = config.n_embd / config.n_head};
}

const Architecture& GPT2LMHeadModel::architecture() const { return *find_architecture("GPT2LMHeadModel"); }

}  // namespace tg::nn
