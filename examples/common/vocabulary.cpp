#include "examples/common/vocabulary.h"

#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace examples {
namespace fs = std::filesystem;

int64_t embedding_rows(const tg::nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    // transformers' names: Llama's model.embed_tokens, GPT-2's transformer.wte
    const bool embedding = name.ends_with("embed_tokens.weight") || name.ends_with("wte.weight");
    if (embedding && p.dim() == 2) return p.size(0);
  }
  tg::fail("embedding_rows", "the model has no parameter named *embed_tokens.weight or *wte.weight");
}

std::optional<int64_t> config_vocab_size(const std::string& folder) {
  const fs::path config = fs::path(folder) / "config.json";
  if (!fs::is_regular_file(config)) return std::nullopt;
  const std::vector<uint8_t> bytes = tg::io::read_file(config.string(), tg::io::kMaxConfigBytes);
  const tg::json::Value v = tg::json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const tg::json::Value* n = v.is_object() ? v.find("vocab_size") : nullptr;
  if (!n || !n->is_int()) return std::nullopt;
  return n->as_int("vocab_size");
}

void check_vocabulary(const tg::data::Tokenizer& tokenizer, int64_t rows, const std::string& program,
                      const std::string& flag, const std::string& path) {
  const int64_t ids = tokenizer.vocab_size();
  TG_CHECK(ids <= rows, program.c_str(), flag, " '", path, "': the tokenizer has ", ids, " ids (", tokenizer.description(),
           "), the model's embedding ", rows, " rows: ids from ", rows, " on have no embedding. Resize the "
           "embedding to the tokenizer with transformers' model.resize_token_embeddings(len(tokenizer)) and save "
           "the folder again, or use the tokenizer the model was trained with");
}

void check_folder_vocabulary(const std::string& folder, const std::string& program, const std::string& flag) {
  const std::optional<int64_t> rows = config_vocab_size(folder);
  if (!rows) return;
  std::optional<tg::data::Tokenizer> tokenizer;
  try {
    tokenizer = tg::data::Tokenizer::from_pretrained(folder);
  } catch (const tg::Error& e) {
    tg::fail(program.c_str(), flag, " '", folder, "': no usable tokenizer: ", e.what());
  }
  check_vocabulary(*tokenizer, *rows, program, flag, folder);
}

std::string decode_lenient(const tg::data::Tokenizer& tokenizer, std::span<const int32_t> ids, bool skip_special_tokens) {
  std::string text;
  std::vector<int32_t> run;  // ids the tokenizer has, decoded together
  for (int32_t id : ids) {
    bool known = id >= 0 && id < tokenizer.vocab_size();
    if (known) {
      try {
        tokenizer.id_to_token(id);
      } catch (const tg::Error&) {
        known = false;  // a gap in the vocabulary
      }
    }
    if (known) {
      run.push_back(id);
      continue;
    }
    text += tokenizer.decode(run, skip_special_tokens) + "\xEF\xBF\xBD";
    run.clear();
  }
  return text + tokenizer.decode(run, skip_special_tokens);
}

}  // namespace examples
