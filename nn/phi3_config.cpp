// config.json of Phi3ForCausalLM (Phi-3, Phi-3.5-mini), read into and written from LlamaConfig, and
// its registry entry. What would change the computation in a way not implemented is refused by name.
#include <string>

#include "nn/architecture.h"
#include "nn/config_fields.h"
#include "nn/phi3.h"

namespace tg::nn {
namespace {

PretrainedConfig phi3(const ConfigFields& f) {
  // read_llama_fields reads RoPE and refuses longrope / su scaling (Phi-3-128k, Phi-3.5) by name.
  LlamaConfig c = read_llama_fields(f, "Phi3ForCausalLM", 32064, 1e-5);
  c.sliding_window = f.integer("sliding_window", 0, /*lo=*/0);  // null: none
  auto refuse_partial_rotary = [&](const std::string& key, const json::Value* v) {
    if (v && !v->is_null() && !(v->is_number() && v->as_double() == 1.0))
      fail("from_pretrained", "'", f.source(), "': ", key, " = ", json::dump(*v),
           " is not supported (wants 1.0: RoPE over the whole head)");
  };
  refuse_partial_rotary("partial_rotary_factor", f.get("partial_rotary_factor"));
  if (const json::Value* r = f.get("rope_parameters"); r && r->is_object())
    refuse_partial_rotary("rope_parameters.partial_rotary_factor", r->find("partial_rotary_factor"));
  if (f.probability("resid_pdrop", 0.0) != 0.0) f.unsupported("resid_pdrop", "wants 0.0");
  // embd_pdrop is in Phi-3's config.json, but transformers' Phi3Model applies no embedding dropout.
  return validated(f, c);
}

std::shared_ptr<CausalLM> build(const PretrainedConfig& c, Generator& gen) {
  return std::make_shared<Phi3ForCausalLM>(std::get<LlamaConfig>(c), gen);
}

const std::vector<std::string> kTargets = {"qkv_proj", "o_proj"};

}  // namespace

json::Value Phi3ForCausalLM::config_json() const {
  using json::Value;
  const LlamaConfig& c = config;
  return llama_fields_json(c, architecture())
      .set("original_max_position_embeddings", c.max_position_embeddings)
      .set("embd_pdrop", 0.0)
      .set("resid_pdrop", 0.0)
      .set("sliding_window", c.sliding_window ? Value(c.sliding_window) : Value())
      .set("partial_rotary_factor", 1.0)
      .set("rope_parameters", rope_json(c.rope_theta, c.rope_scaling).set("partial_rotary_factor", 1.0));
}

extern const Architecture kPhi3Architecture{"Phi3ForCausalLM", "phi3", "model.", "model.embed_tokens.weight",
                                            {".rotary_emb.inv_freq"}, kTargets, {}, phi3, build};

}  // namespace tg::nn
