// A Hugging Face model folder (and a peft adapter) as GGUF files for llama.cpp, Ollama and LM
// Studio (docs/gguf.md):
//
//   export_gguf --model my-model --out my-model-f16.gguf                        the model
//   export_gguf --model base --adapter out/adapter --out adapter.gguf           the adapter (llama.cpp's --lora)
//   export_gguf --model base --adapter out/adapter --merge --out merged.gguf    base + adapter merged
//
// A bfloat16 folder is read as bfloat16 (its pages mapped, not copied); each tensor streams to the
// file a few MB at a time.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "tapegrad.h"

using namespace tg;

namespace {

// The folder's own dtype (config.json's "dtype", transformers 4's "torch_dtype"): loading in it maps
// the safetensors pages instead of converting a copy.
DType folder_dtype(const std::string& dir) {
  const std::vector<uint8_t> bytes = io::read_file(dir + "/config.json", io::kMaxConfigBytes);
  const json::Value config = json::parse(std::string(bytes.begin(), bytes.end()));
  for (const char* key : {"dtype", "torch_dtype"})
    if (const json::Value* v = config.find(key); v && v->is_string()) return v->as_string() == "bfloat16" ? kBFloat16 : kFloat32;
  return kFloat32;
}

int run(int argc, char** argv) {
  examples::Flags flags("export_gguf", "Write a Hugging Face model folder, or a peft adapter of it, as GGUF for llama.cpp");
  flags.add("model", "", "the Hugging Face model folder (config.json, weights, tokenizer)")
      .add("adapter", "", "a peft adapter folder: written as a GGUF LoRA adapter (llama.cpp's --lora)")
      .add("merge", "false", "with --adapter: merge it into the model and write the merged model")
      .add("out", "", "the .gguf file to write")
      .add("dtype", "f16", "f32 | f16 | bf16 | q8_0 (norms and biases stay f32)")
      .add("name", "", "general.name (default: the folder's name)");
  if (!flags.parse(argc, argv)) return std::puts(flags.usage().c_str()), 0;
  const std::string dir = flags.str("model"), out = flags.str("out"), adapter = flags.str("adapter");
  if (dir.empty() || out.empty()) throw examples::UsageError("--model and --out are needed\n" + flags.usage());
  if (flags.boolean("merge") && adapter.empty()) throw examples::UsageError("--merge needs an --adapter\n" + flags.usage());
  const gguf::TensorType dtype = examples::gguf_dtype_flag(flags, "dtype");

  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<nn::CausalLM> model = nn::from_pretrained(dir, {.dtype = folder_dtype(dir)});
  const std::string name = flags.was_set("name") ? flags.str("name") : std::filesystem::path(dir).filename().string();
  gguf::Metadata metadata;
  metadata.set("general.name", gguf::Value::string(name));
  if (!adapter.empty()) {
    peft::load_adapter(*model, adapter);
    if (!flags.boolean("merge")) {
      peft::save_adapter_gguf(*model, out, {.dtype = dtype, .metadata = metadata});
    } else {
      peft::merge_and_unload(*model);
    }
  }
  if (adapter.empty() || flags.boolean("merge")) {
    const gguf::Metadata vocab =
        data::gguf_tokenizer_metadata(data::Tokenizer::from_pretrained(dir), model->dims().vocab_size);
    for (const auto& [key, value] : vocab.entries()) metadata.set(key, value);
    nn::save_gguf(*model, out, {.dtype = dtype, .metadata = metadata});
  }
  const gguf::Reader written(out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s %s, %zu tensors, %s, %.1f MB in %.1f s\n", out.c_str(),
              written.header().metadata.at("general.architecture").as_string("general.architecture").c_str(),
              written.header().metadata.at("general.type").as_string("general.type").c_str(),
              written.header().tensors.size(), flags.str("dtype").c_str(),
              static_cast<double>(std::filesystem::file_size(out)) / 1e6, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
