#include "examples/common/inputs.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace examples {
namespace fs = std::filesystem;

namespace {

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

void check_model_path(const Flags& flags, const std::string& flag) {
  const std::string path = flags.str(flag);
  const std::string wants = "wants a Hugging Face model folder (config.json, model.safetensors, tokenizer) or a "
                            "toy_transformer checkpoint (.safetensors)";
  if (fs::is_directory(path)) {
    if (!fs::is_regular_file(fs::path(path) / "config.json"))
      throw UsageError("--" + flag + " '" + path + "' is a folder without config.json: " + wants + "\n");
    return;
  }
  if (!fs::exists(path)) {
    const bool toy = !flags.was_set(flag) || lower_extension(path) == ".safetensors";
    throw UsageError("--" + flag + " '" + path + "' does not exist: " + wants +
                     (toy ? " (the toy's checkpoint is made by examples/toy_transformer)" : "") + "\n");
  }
  if (!fs::is_regular_file(path) || lower_extension(path) != ".safetensors")
    throw UsageError("--" + flag + " '" + path + "' is neither a folder nor a .safetensors file: " + wants + "\n");
}

void check_data_file(const std::string& path, const std::string& flag) {
  if (!fs::exists(path)) throw UsageError("--" + flag + " '" + path + "' does not exist\n");
  if (!fs::is_regular_file(path)) throw UsageError("--" + flag + " '" + path + "' is not a regular file\n");
  const std::string ext = lower_extension(path);
  const std::string accepted = "lora_finetune reads .jsonl (one JSON object a line: {\"text\"} or {\"prompt\", "
                               "\"completion\"}), .bin (an llm.c token file) or plain text (any other name)";
  if (ext == ".json")
    throw UsageError("--" + flag + " '" + path + "' is a .json file: " + accepted +
                     ". A JSON array of objects converts with jq -c '.[]' in.json > out.jsonl; a file already one "
                     "object a line only wants the .jsonl name\n");
  if (ext == ".csv" || ext == ".tsv" || ext == ".parquet" || ext == ".arrow")
    throw UsageError("--" + flag + " '" + path + "' is a " + ext.substr(1) + " file, which would be read as plain "
                     "text: " + accepted + ". Convert it to JSON Lines first (e.g. with Hugging Face datasets' "
                     "to_json(lines=True))\n");
}

void check_adapter_folder(const std::string& path, const std::string& flag) {
  if (!fs::is_directory(path))
    throw UsageError("--" + flag + " '" + path + "' is not a folder: wants a peft adapter folder "
                     "(adapter_config.json + adapter_model.safetensors)\n");
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"})
    if (!fs::is_regular_file(fs::path(path) / name))
      throw UsageError("--" + flag + " '" + path + "' has no " + name + ": wants a peft adapter folder "
                       "(adapter_config.json + adapter_model.safetensors)\n");
}

}  // namespace examples
