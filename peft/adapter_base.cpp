// Whether an adapter was trained on the model it is loaded onto: peft's base_model_name_or_path
// against the model's folder and config.
#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/causal_lm.h"
#include "peft/lora.h"

namespace tg::peft {
namespace {

namespace fs = std::filesystem;

// What makes two checkpoints of a family differ in shape, under transformers' names.
const char* const kShapeFields[] = {"architectures", "model_type", "hidden_size", "n_embd", "num_hidden_layers",
                                    "n_layer", "num_attention_heads", "n_head", "num_key_value_heads",
                                    "intermediate_size", "n_inner", "head_dim", "vocab_size"};

// "Qwen2.5-0.5B-Instruct" of "Qwen/Qwen2.5-0.5B-Instruct" or "/models/Qwen2.5-0.5B-Instruct/".
std::string last_name(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return fs::path(s).filename().string();
}

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::is_directory(a, ec) && fs::is_directory(b, ec) && fs::equivalent(a, b, ec);
}

}  // namespace

std::string adapter_base_mismatch(const std::string& adapter_base, const std::string& model_name_or_path,
                                  const json::Value& model_config) {
  if (adapter_base.empty()) return "";
  std::error_code ec;
  const fs::path base_config = fs::path(adapter_base) / "config.json";
  if (model_config.is_object() && fs::is_regular_file(base_config, ec)) {
    const std::vector<uint8_t> bytes = io::read_file(base_config.string(), io::kMaxConfigBytes);
    json::Value theirs;
    try {
      theirs = json::parse(std::string(bytes.begin(), bytes.end()));
    } catch (const Error&) {
      return "";  // unreadable: the names below still count
    }
    std::string differ;
    for (const char* field : kShapeFields) {
      const json::Value *a = theirs.is_object() ? theirs.find(field) : nullptr, *b = model_config.find(field);
      if (a && b && json::dump(*a) != json::dump(*b))
        differ += std::string(differ.empty() ? "" : ", ") + field + " " + json::dump(*a) + " there, " + json::dump(*b) +
                  " here";
    }
    if (!differ.empty())
      return "the adapter was trained on '" + adapter_base + "', whose config.json differs from the model's (" + differ + ")";
  }
  if (model_name_or_path.empty() || same_folder(adapter_base, model_name_or_path) ||
      last_name(adapter_base) == last_name(model_name_or_path))
    return "";
  return "the adapter was trained on '" + adapter_base + "', the model is '" + model_name_or_path + "'";
}

std::string adapter_base_mismatch(const LoraConfig& adapter, const nn::Module& model) {
  const auto* lm = dynamic_cast<const nn::CausalLM*>(&model);
  if (!lm) return "";
  return adapter_base_mismatch(adapter.base_model_name_or_path, lm->name_or_path, lm->config_json());
}

}  // namespace tg::peft
