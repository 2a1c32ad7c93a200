// adapter_config.json text -> peft::parse_adapter_config: a tg::Error, or a config that writes
// and parses back to itself; one that fits a small Llama is applied, saved as an adapter and
// loaded back into a fresh model (the same weights) and into the wrapped one (all-or-nothing).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "nn/init.h"
#include "nn/models/llama.h"
#include "peft/lora.h"

namespace {

tg::nn::LlamaConfig small_llama() {
  tg::nn::LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 4;
  return c;
}

bool same_config(const tg::peft::LoraConfig& a, const tg::peft::LoraConfig& b) {
  return a.r == b.r && a.lora_alpha == b.lora_alpha && a.lora_dropout == b.lora_dropout &&
         a.target_modules == b.target_modules && a.modules_to_save == b.modules_to_save &&
         a.base_model_name_or_path == b.base_model_name_or_path && a.task_type == b.task_type;
}

bool same_adapters(tg::nn::Module& a, tg::nn::Module& b) {
  auto la = tg::peft::lora_layers(a), lb = tg::peft::lora_layers(b);
  if (la.size() != lb.size()) return false;
  for (size_t i = 0; i < la.size(); ++i)
    for (auto [x, y] : {std::pair{la[i].second->lora_A, lb[i].second->lora_A}, {la[i].second->lora_B, lb[i].second->lora_B}})
      if (x->weight.to_vector<float>() != y->weight.to_vector<float>()) return false;
  return true;
}

// One folder per process, in memory where the machine has /dev/shm.
const std::string& adapter_dir() {
  static const std::string dir = (std::filesystem::exists("/dev/shm") ? std::string("/dev/shm") : std::string("/tmp")) +
                                 "/tg_fuzz_adapter_" + std::to_string(::getpid());
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::peft::LoraConfig config;
  try {
    config = tg::peft::parse_adapter_config(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const tg::Error&) {
    return 0;
  }
  if (!same_config(tg::peft::parse_adapter_config(tg::peft::adapter_config_json(config)), config)) std::abort();
  if (config.r > 64) return 0;  // a valid rank, but its adapters would take the time of many inputs

  tg::Generator gen(1);
  tg::nn::LlamaForCausalLM model(small_llama(), gen);
  try {
    tg::peft::apply_lora(model, config, gen);
  } catch (const tg::Error&) {
    return 0;  // targets or modules_to_save that match nothing in the model
  }
  for (auto& [path, l] : tg::peft::lora_layers(model)) tg::nn::init::normal_(l->lora_B->weight, 0.0, 1.0, gen);
  tg::peft::save_adapter(model, adapter_dir(), config);
  tg::nn::LlamaForCausalLM fresh(small_llama(), gen);
  tg::peft::load_adapter(fresh, adapter_dir(), gen);
  tg::peft::load_adapter(model, adapter_dir(), gen);  // into the model it came from: fits as it is
  if (!same_adapters(model, fresh)) std::abort();
  return 0;
}
