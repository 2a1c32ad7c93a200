// GPT-2 as llama.cpp's converter writes it to GGUF ("gpt2"): tapegrad holds the Conv1D weights as
// Linear's [out, in], which is what the converter's transposes make of transformers' [in, out];
// position_embd stays F32, as llama.cpp wants it.
#include <utility>

#include "core/error.h"
#include "nn/models/gguf.h"
#include "nn/models/gpt2.h"

namespace tg::nn {
namespace {

// transformers' names inside transformer.h.{i}. -> llama.cpp's inside blk.{i}.
const std::pair<const char*, const char*> kBlockNames[] = {
    {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
    {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"},
};

std::string tensor_name(const std::string& name) {
  if (name == "transformer.wte.weight") return "token_embd.weight";
  if (name == "transformer.wpe.weight") return "position_embd.weight";
  if (name == "transformer.ln_f.weight") return "output_norm.weight";
  if (name == "transformer.ln_f.bias") return "output_norm.bias";
  if (name == "lm_head.weight") return "output.weight";
  const std::string prefix = "transformer.h.";
  if (!name.starts_with(prefix)) return "";
  const size_t dot = name.find('.', prefix.size()), last = name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string block = name.substr(prefix.size(), dot - prefix.size()), module = name.substr(dot + 1, last - dot - 1);
  for (const auto& [hf, ggml] : kBlockNames)
    if (module == hf) return "blk." + block + "." + ggml + name.substr(last);
  return "";
}

}  // namespace

GgufModel gpt2_gguf(const CausalLM& model) {
  const auto* m = dynamic_cast<const GPT2LMHeadModel*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a GPT2LMHeadModel");
  const GPT2Config& c = m->config;
  GgufModel out;
  out.architecture = "gpt2";
  const bool tied = m->lm_head->weight.same(m->transformer->wte->weight);
  for (const auto& [name, t] : m->named_parameters()) {
    if ((name == "lm_head.weight" && tied) || name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")) continue;
    const std::string ggml = tensor_name(name);
    TG_CHECK(!ggml.empty(), "save_gguf", "GPT2LMHeadModel parameter '", name, "' has no llama.cpp tensor");
    out.tensors.push_back({.name = ggml, .source = t,
                           .keep_f32 = t.dim() == 1 || ggml.find("norm") != std::string::npos || ggml == "position_embd.weight"});
  }
  using gguf::Value;
  out.hparams.set("gpt2.context_length", Value::uint32(static_cast<uint32_t>(c.n_positions)))
      .set("gpt2.embedding_length", Value::uint32(static_cast<uint32_t>(c.n_embd)))
      .set("gpt2.block_count", Value::uint32(static_cast<uint32_t>(c.n_layer)))
      .set("gpt2.feed_forward_length", Value::uint32(static_cast<uint32_t>(c.inner())))
      .set("gpt2.attention.head_count", Value::uint32(static_cast<uint32_t>(c.n_head)))
      .set("gpt2.attention.layer_norm_epsilon", Value::float32(static_cast<float>(c.layer_norm_epsilon)));
  return out;
}

}  // namespace tg::nn
