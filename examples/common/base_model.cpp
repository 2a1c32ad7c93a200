#include "examples/common/base_model.h"

#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "nn/state_dict.h"

namespace examples {
namespace fs = std::filesystem;

std::optional<tg::data::Tokenizer> load_tokenizer(const std::string& base, const char* program, const char* flag) {
  if (!fs::is_directory(base)) return std::nullopt;
  TG_CHECK(fs::exists(fs::path(base) / "config.json"), program, flag, " '", base,
           "' is a folder without config.json (wants a Hugging Face model folder)");
  try {
    return tg::data::Tokenizer::from_pretrained(base);
  } catch (const tg::Error& e) {
    tg::fail(program, flag, " '", base, "': no usable tokenizer: ", e.what());
  }
}

BaseModel load_base(const std::string& base, const std::string& toy_config, const char* program, const char* flag,
                    const tg::nn::PretrainedOptions& options, std::optional<tg::data::Tokenizer> tokenizer) {
  BaseModel out;
  if (fs::is_directory(base)) {
    TG_CHECK(tokenizer.has_value(), program, flag, " '", base, "': load_tokenizer first");
    auto lm = tg::nn::from_pretrained(base, options);
    lm->train();
    out.model = lm;
    out.hf_folder = true;
    out.architecture = lm->architecture().name;
    out.context = lm->dims().context;
    out.default_targets = lm->architecture().lora_targets;
    out.tokenizer = std::move(tokenizer);
    return out;
  }
  TG_CHECK(fs::exists(base), program, "no base checkpoint at '", base, "' (run examples/toy_transformer first, or pass ",
           flag, " a Hugging Face folder)");
  std::string name = toy_config;
  if (name == "auto") {  // toy_transformer records the config in the checkpoint's metadata
    auto meta = tg::safetensors::load_file_with_metadata(base).metadata;
    name = meta.count("config") ? meta["config"] : "tiny";
  }
  auto model = std::make_shared<tg::nn::LlamaForCausalLM>(tg::nn::LlamaConfig::by_name(name));
  tg::nn::load_state_dict_file(*model, base);
  model->to(options.dtype.value_or(tg::kFloat32), options.device);
  if (options.quantization.load_in_4bit) tg::nn::replace_with_4bit_linear(*model, options.quantization);
  if (options.quantization.load_in_fp8) tg::nn::replace_with_fp8_linear(*model, options.quantization);
  out.model = model;
  out.architecture = "LlamaForCausalLM";
  out.context = model->config.max_position_embeddings;
  out.default_targets = model->architecture().lora_targets;
  return out;
}

std::shared_ptr<const tg::data::TokenCorpus> load_corpus(const std::string& path, const std::string& flag,
                                                        const std::optional<tg::data::Tokenizer>& tokenizer,
                                                        const std::string& separator, bool allow_binary,
                                                        tg::data::SystemMessage system_message) {
  TG_CHECK(fs::is_regular_file(path), "lora_finetune", "--", flag, " '", path, "' is not a file");
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".bin") return tg::data::open_token_file(path);
  std::vector<uint8_t> bytes = tg::io::read_file(path);
  const std::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!allow_binary)
    if (auto problem = tg::data::text_problem(view))
      tg::fail("lora_finetune", "--", flag, " '", path, "' is not text: ", *problem,
               " (pass --bytes to train on it anyway, or give a .bin token file)");
  const tg::data::TextOptions options{.separator = separator, .allow_binary = true,  // checked above
                                      .system_message = system_message};
  if (tokenizer) {
    if (ext == ".jsonl") return tg::data::tokenize_jsonl_file(path, *tokenizer, options);
    return tg::data::tokenize_text_file(path, *tokenizer, options);
  }
  TG_CHECK(ext != ".jsonl", "lora_finetune", "--", flag, " '", path,
           "': JSONL data needs a tokenizer; the toy base reads text as bytes (pass --base a Hugging Face folder)");
  return tg::data::corpus_from_examples({std::vector<int32_t>(bytes.begin(), bytes.end())});
}

void copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "vocab.json", "merges.txt"}) {
    const fs::path from = fs::path(from_dir) / name;
    if (fs::exists(from)) fs::copy_file(from, fs::path(to_dir) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace examples
