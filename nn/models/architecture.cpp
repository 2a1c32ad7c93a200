#include "nn/models/architecture.h"

#include "core/error.h"

namespace tg::nn {

// The families (one line each; their entries sit in their config files).
extern const Architecture kLlamaArchitecture, kMistralArchitecture, kQwen2Architecture, kQwen3Architecture,
    kGPT2Architecture;
extern const Architecture kGemma2Architecture, kGemma3Architecture;
extern const Architecture kPhi3Architecture;
extern const Architecture kSmolLM3Architecture, kOlmo2Architecture;

namespace {

std::vector<const Architecture*>& registry() {
  static std::vector<const Architecture*> all = {&kLlamaArchitecture, &kMistralArchitecture, &kQwen2Architecture,
                                                 &kQwen3Architecture, &kGPT2Architecture,
                                                 &kGemma2Architecture, &kGemma3Architecture,
                                                 &kPhi3Architecture, &kSmolLM3Architecture, &kOlmo2Architecture};
  return all;
}

}  // namespace

const std::vector<const Architecture*>& architectures() { return registry(); }

void register_architecture(const Architecture& arch) {
  TG_CHECK(!arch.name.empty() && !arch.model_type.empty() && arch.parse, "register_architecture",
           "an architecture needs a name, a model_type and parse");
  for (const Architecture* a : registry())
    TG_CHECK(a->name != arch.name && a->model_type != arch.model_type, "register_architecture", "'", arch.name,
             "' (model_type \"", arch.model_type, "\") is taken by ", a->name);
  registry().push_back(&arch);
}

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture* a : architectures())
    if (a->name == name || a->model_type == name) return a;
  return nullptr;
}

std::string architecture_names() {
  std::string out;
  for (const Architecture* a : architectures()) out += (out.empty() ? "" : ", ") + a->name;
  return out;
}

}  // namespace tg::nn
