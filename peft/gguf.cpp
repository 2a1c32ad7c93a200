#include "peft/gguf.h"

#include "core/error.h"
#include "nn/models/gguf.h"
#include "peft/lora.h"
#include "peft/lora_experts.h"

namespace tg::peft {

void save_adapter_gguf(nn::CausalLM& model, const std::string& path, const GgufAdapterOptions& options) {
  for (const auto& [module, experts] : lora_experts(model))
    fail("save_adapter_gguf", "'", module, ".", experts->parameters.front(), "' is adapted as peft's target_parameters: ",
         "llama.cpp's GGUF adapters (convert_lora_to_gguf.py) hold no expert weights; merge_and_unload and write the ",
         "model with nn::save_gguf");
  const auto layers = lora_layers(model);
  TG_CHECK(!layers.empty(), "save_adapter_gguf", "the model has no LoRA layers (apply_lora or load_adapter first)");
  for (const auto& [name, t] : model.named_trainable_parameters())
    TG_CHECK(name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight"), "save_adapter_gguf", "'", name,
             "' is trained beside the adapters (modules_to_save, unfrozen norms): a GGUF adapter holds only LoRA's ",
             "A and B; merge_and_unload and write the model with nn::save_gguf");
  const nn::GgufModel base = nn::gguf_model(model);
  std::vector<nn::GgufTensor> tensors;
  const double alpha = layers.front().second->lora_alpha;
  for (const auto& [path_in_model, layer] : layers) {
    TG_CHECK(!layer->merged(), "save_adapter_gguf", "'", path_in_model, "' is merged into its weight: unmerge first");
    TG_CHECK(layer->lora_alpha == alpha, "save_adapter_gguf", "'", path_in_model, "' has lora_alpha ",
             layer->lora_alpha, ", another layer ", alpha, ": a GGUF adapter has one alpha");
    const nn::GgufTensor* weight = nullptr;
    for (const nn::GgufTensor& t : base.tensors)
      if (t.source.same(layer->weight)) weight = &t;
    TG_CHECK(weight, "save_adapter_gguf", "'", path_in_model, "' has no llama.cpp tensor in ", base.architecture);
    tensors.push_back({.name = weight->name + ".lora_a", .source = layer->lora_A->weight});
    tensors.push_back({.name = weight->name + ".lora_b", .source = layer->lora_B->weight,
                       .rope_head_dim = weight->rope_head_dim});
  }
  using gguf::Value;
  gguf::Metadata m;
  m.set("general.architecture", Value::string(base.architecture)).set("general.type", Value::string("adapter"));
  m.set("adapter.type", Value::string("lora")).set("adapter.lora.alpha", Value::float32(static_cast<float>(alpha)));
  m.set("general.file_type", Value::uint32(nn::gguf_file_type(options.dtype)));
  m.set("general.quantization_version", Value::uint32(2));
  for (const auto& [key, value] : options.metadata.entries()) m.set(key, value);
  nn::write_gguf_tensors(path, m, tensors, options.dtype);
}

}  // namespace tg::peft
