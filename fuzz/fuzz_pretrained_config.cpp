// config.json text -> nn::parse_pretrained_config: a tg::Error, or a config that validates; a
// small one is built into its model, whose buffers (the RoPE tables) are finite, and which runs a
// forward pass.
#include <any>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/factory.h"
#include "nn/models/pretrained.h"

namespace {

// Parameters, in floating point so that no product overflows; a bound to build models under.
double llama_params(const tg::nn::LlamaConfig& c) {
  const double d = static_cast<double>(c.hidden_size), layer = 4.0 * d * d + 3.0 * d * static_cast<double>(c.intermediate_size);
  return 2.0 * static_cast<double>(c.vocab_size) * d + static_cast<double>(c.num_hidden_layers) * layer +
         static_cast<double>(c.max_position_embeddings) * static_cast<double>(c.head_dim());  // RoPE tables
}
double gpt2_params(const tg::nn::GPT2Config& c) {
  const double d = static_cast<double>(c.n_embd);
  return (static_cast<double>(c.vocab_size) + static_cast<double>(c.n_positions)) * d +
         static_cast<double>(c.n_layer) * (4.0 * d * d + 2.0 * d * static_cast<double>(c.inner()));
}
constexpr double kMaxParams = 20000;

template <class Model, class Config>
void run(const Config& c, int64_t vocab) {
  tg::Generator gen(0);
  Model model(c, gen);
  for (const auto& [name, b] : model.named_buffers())  // a config that validates makes finite tables
    if (b.defined() && b.dtype() == tg::kFloat32)
      for (float v : b.template to_vector<float>())
        if (!std::isfinite(v)) std::abort();
  tg::Tensor ids = tg::randint(0, vocab, {1, 2}, gen);
  model.forward(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::nn::ModelBuilder config;
  try {
    config = tg::nn::parse_pretrained_config(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const tg::Error&) {
    return 0;
  }
  if (const auto* l = std::any_cast<tg::nn::LlamaConfig>(&config.config)) {
    l->validate();  // parse_pretrained_config promised it: a throw here is a finding
    if (llama_params(*l) <= kMaxParams && l->max_position_embeddings >= 2)
      run<tg::nn::LlamaForCausalLM>(*l, l->vocab_size);
  } else if (const auto* g = std::any_cast<tg::nn::GPT2Config>(&config.config)) {
    g->validate();
    if (gpt2_params(*g) <= kMaxParams && g->n_positions >= 2) run<tg::nn::GPT2LMHeadModel>(*g, g->vocab_size);
  }
  return 0;
}
