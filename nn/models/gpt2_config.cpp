// config.json of GPT2LMHeadModel, read into and written from GPT2Config, and its registry entry.
#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/gpt2.h"

namespace tg::nn {
namespace {

ModelBuilder gpt2(const ConfigFields& f) {
  GPT2Config c;  // its defaults are transformers' GPT2Config defaults
  c.vocab_size = f.integer("vocab_size", c.vocab_size);
  c.n_positions = f.integer("n_positions", c.n_positions, 1, kMaxContext);
  c.n_embd = f.integer("n_embd", c.n_embd);
  c.n_layer = f.integer("n_layer", c.n_layer, 1, kMaxLayers);
  c.n_head = f.integer("n_head", c.n_head);
  c.n_inner = f.integer("n_inner", 0, /*lo=*/0);  // 0: 4 n_embd
  c.layer_norm_epsilon = f.number("layer_norm_epsilon", c.layer_norm_epsilon);
  c.initializer_range = f.number("initializer_range", c.initializer_range);
  c.embd_pdrop = f.probability("embd_pdrop", c.embd_pdrop);
  c.attn_pdrop = f.probability("attn_pdrop", c.attn_pdrop);
  c.resid_pdrop = f.probability("resid_pdrop", c.resid_pdrop);
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.unsupported("activation_function", "wants \"gelu_new\" or \"gelu_pytorch_tanh\" (GELU, tanh approximation)");
  if (!f.boolean("scale_attn_weights", true)) f.unsupported("scale_attn_weights", "wants true");
  if (f.boolean("scale_attn_by_inverse_layer_idx", false)) f.unsupported("scale_attn_by_inverse_layer_idx", "wants false");
  if (f.boolean("add_cross_attention", false)) f.unsupported("add_cross_attention", "wants false");
  if (!f.boolean("tie_word_embeddings", true))
    f.unsupported("tie_word_embeddings", "wants true: GPT2LMHeadModel's lm_head is wte");
  try {
    c.validate();
  } catch (const Error& e) {
    fail("from_pretrained", "'", f.source(), "': ", e.what());
  }
  return builder_of<GPT2LMHeadModel>(c);
}

}  // namespace

json::Value GPT2LMHeadModel::config_json() const {
  using json::Value;
  const GPT2Config& c = config;
  return Value::object()
      .set("architectures", Value::array({"GPT2LMHeadModel"}))
      .set("model_type", "gpt2")
      .set("vocab_size", c.vocab_size)
      .set("n_positions", c.n_positions)
      .set("n_embd", c.n_embd)
      .set("n_layer", c.n_layer)
      .set("n_head", c.n_head)
      .set("n_inner", c.n_inner ? Value(c.n_inner) : Value())
      .set("activation_function", "gelu_new")
      .set("layer_norm_epsilon", c.layer_norm_epsilon)
      .set("initializer_range", c.initializer_range)
      .set("embd_pdrop", c.embd_pdrop).set("attn_pdrop", c.attn_pdrop).set("resid_pdrop", c.resid_pdrop)
      .set("scale_attn_weights", true)
      .set("tie_word_embeddings", true);
}

// GPT-2 on the Hub was saved from GPT2Model (no "transformer." prefix), with causal-mask buffers.
extern const Architecture kGPT2Architecture{.name = "GPT2LMHeadModel",
                                            .model_type = "gpt2",
                                            .base_prefix = "transformer.",
                                            .embedding = "transformer.wte.weight",
                                            .ignored_suffixes = {".attn.bias", ".attn.masked_bias"},
                                            .lora_targets = {"c_attn", "c_proj"},
                                            .conv1d_layers = {"c_attn", "c_proj", "c_fc"},
                                            .parse = gpt2};

}  // namespace tg::nn
