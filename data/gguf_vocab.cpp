#include "data/gguf_vocab.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/detail/tokenizer_impl.h"

namespace tg::data {
namespace {

// llama.cpp's token types (llama_token_type).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizer regexes of the tokenizer.json files whose llama.cpp names tapegrad knows, as
// those files write them (GPT-2's is ByteLevel's own, use_regex).
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool flag(const json::Value& v, const char* key, bool fallback) {
  const json::Value* f = v.find(key);
  return f && f->is_bool() ? f->as_bool(key) : fallback;
}
std::string type_of(const json::Value& v) {
  const json::Value* t = v.is_object() ? v.find("type") : nullptr;
  return t && t->is_string() ? t->as_string() : "?";
}

// What the converter's does_token_look_special catches: added tokens some models leave unmarked.
bool looks_special(const std::string& t) {
  auto wraps = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wraps("<unused", ">");
}

// llama.cpp treats user-defined tokens as text already normalised: SentencePiece's U+2581 back to spaces.
std::string unspaced(std::string t) {
  for (size_t at; (at = t.find("\xE2\x96\x81")) != std::string::npos;) t.replace(at, 3, " ");
  return t;
}

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;  // "llama" only
  std::vector<std::string> merges;  // "gpt2" only
  std::string model, pre;
  std::optional<int32_t> unk;
};

// A tokenizer.json BPE: byte-level as "gpt2", with byte fallback as "llama".
Vocab hf_vocab(const hf::HfTokenizer& hf, const std::string& origin) {
  const hf::BpeModel& bpe = hf.model();
  Vocab v;
  const auto size = static_cast<size_t>(hf.vocab_size());
  v.tokens.resize(size);
  v.types.assign(size, kUnused);
  for (size_t id = 0; id < size; ++id) {
    const std::string* t = bpe.token(static_cast<int32_t>(id));
    v.tokens[id] = t ? *t : "[PAD" + std::to_string(id) + "]";
    if (t) v.types[id] = kNormal;
  }
  for (const hf::AddedToken& a : hf.added_tokens()) {
    const bool control = a.special || looks_special(a.content);
    v.tokens[a.id] = control ? a.content : unspaced(a.content);
    v.types[a.id] = control ? kControl : kUserDefined;
  }
  const std::vector<hf::BpeModel::Merge> merges = bpe.merges_by_rank();
  if (bpe.byte_level()) {
    v.model = "gpt2";
    v.pre = llama_cpp_pre_tokenizer(hf.pre_tokenizer_json(), bpe.ignore_merges());
    // A space inside a merge's token is written as U+0120, as the converter writes it.
    auto part = [&](int32_t id) {
      std::string s = *bpe.token(id);
      for (size_t at; (at = s.find(' ')) != std::string::npos;) s.replace(at, 1, "\xC4\xA0");
      return s;
    };
    for (const auto& m : merges) v.merges.push_back(part(m.left) + " " + part(m.right));
    return v;
  }
  TG_CHECK(bpe.byte_fallback(), "gguf", "'", origin, "': its tokenizer.json BPE is neither byte-level nor byte-fallback ",
           "(SentencePiece-like): llama.cpp has no tokenizer for it");
  v.model = "llama";
  v.pre = "default";
  // llama.cpp's SentencePiece tokenizer merges the pair whose token scores highest: a token's score
  // is minus the rank of the merge that makes it, so it merges in the tokenizer's order.
  const float unmerged = -static_cast<float>(merges.size());
  v.scores.assign(size, unmerged);
  for (auto it = merges.rbegin(); it != merges.rend(); ++it) v.scores[it->result] = -static_cast<float>(it->rank);
  for (size_t id = 0; id < size; ++id) {
    if (v.types[id] == kNormal && is_byte_token(v.tokens[id])) v.types[id] = kByte;
    if (v.types[id] != kNormal) v.scores[id] = v.types[id] == kUserDefined ? -1000.0f : 0.0f;
  }
  if (bpe.unk_id() >= 0) {
    v.unk = bpe.unk_id();
    v.types[bpe.unk_id()] = kUnknown;
  }
  return v;
}

// A sentencepiece tokenizer.model, piece by piece.
Vocab sp_vocab(const sp::SpTokenizer& sp) {
  using Kind = sp::SpTokenizer::Piece::Kind;
  Vocab v;
  v.model = "llama";
  v.pre = "default";
  for (int32_t id = 0; id < sp.vocab_size(); ++id) {
    sp::SpTokenizer::Piece p = sp.piece(id);
    v.tokens.push_back(std::move(p.text));
    v.scores.push_back(p.score);
    v.types.push_back(p.kind == Kind::kUnknown   ? kUnknown
                      : p.kind == Kind::kControl ? kControl
                      : p.kind == Kind::kUnused  ? kUnused
                      : p.kind == Kind::kByte    ? kByte
                                                 : kNormal);
    if (p.kind == Kind::kUnknown) v.unk = id;
  }
  return v;
}

}  // namespace

std::string llama_cpp_pre_tokenizer(const json::Value& pre, bool ignore_merges) {
  std::string regex, shape = type_of(pre);
  bool prefix_space = false;
  if (shape == "ByteLevel" && flag(pre, "use_regex", true)) {
    regex = "GPT-2's";
    prefix_space = flag(pre, "add_prefix_space", true);
  } else if (shape == "Sequence") {
    const json::Value* parts = pre.find("pretokenizers");
    const size_t n = parts && parts->is_array() ? parts->size() : 0;
    shape = "Sequence of";
    for (size_t i = 0; i < n; ++i) shape += " " + type_of(parts->as_array()[i]);
    if (n == 2 && type_of(parts->as_array()[0]) == "Split" && type_of(parts->as_array()[1]) == "ByteLevel") {
      const json::Value &split = parts->as_array()[0], &byte_level = parts->as_array()[1];
      const json::Value* pattern = split.find("pattern");
      const json::Value* r = pattern && pattern->is_object() ? pattern->find("Regex") : nullptr;
      const json::Value* behavior = split.find("behavior");
      if (r && r->is_string() && behavior && behavior->is_string() && behavior->as_string() == "Isolated" &&
          !flag(split, "invert", false) && !flag(byte_level, "use_regex", true))
        regex = r->as_string();
      prefix_space = flag(byte_level, "add_prefix_space", true);
    }
  }
  if (!prefix_space) {
    if (regex == "GPT-2's") return "gpt-2";
    if (regex == kLlama3Regex) return ignore_merges ? "llama-bpe" : "smaug-bpe";
    if (regex == kQwen2Regex) return "qwen2";
  }
  fail("gguf", "tokenizer.json's pre_tokenizer (", shape, regex.empty() ? "" : ", regex " + regex,
       prefix_space ? ", add_prefix_space" : "", ") has no llama.cpp name tapegrad knows: llama.cpp splits text by ",
       "the name tokenizer.ggml.pre gives (GPT-2's, Llama 3's and Qwen2's are known)");
}

gguf::Metadata gguf_tokenizer_metadata(const Tokenizer& tokenizer, int64_t vocab_size) {
  const Tokenizer::Impl& impl = *tokenizer.impl_;
  Vocab v = impl.hf ? hf_vocab(*impl.hf, impl.origin) : sp_vocab(*impl.sp);
  const auto n = static_cast<int64_t>(v.tokens.size());
  TG_CHECK(n <= vocab_size, "gguf", "the tokenizer of '", impl.origin, "' has ", n, " tokens, more than the model's ",
           vocab_size, " embeddings");
  for (int64_t id = n; id < vocab_size; ++id) {
    v.tokens.push_back("[PAD" + std::to_string(id) + "]");
    v.types.push_back(kUnused);
    if (!v.scores.empty()) v.scores.push_back(-1000.0f);
  }

  using gguf::Value;
  gguf::Metadata m;
  m.set("tokenizer.ggml.model", Value::string(v.model)).set("tokenizer.ggml.pre", Value::string(v.pre));
  m.set("tokenizer.ggml.tokens", Value::strings(std::move(v.tokens)));
  if (!v.scores.empty()) m.set("tokenizer.ggml.scores", Value::float32s(v.scores));
  m.set("tokenizer.ggml.token_type", Value::int32s(v.types));
  if (!v.merges.empty()) m.set("tokenizer.ggml.merges", Value::strings(std::move(v.merges)));
  auto id = [&](const char* key, std::optional<int32_t> token) {
    if (token) m.set(key, Value::uint32(static_cast<uint32_t>(*token)));
  };
  id("tokenizer.ggml.bos_token_id", tokenizer.bos_token_id());
  id("tokenizer.ggml.eos_token_id", tokenizer.eos_token_id());
  id("tokenizer.ggml.unknown_token_id", v.unk);
  id("tokenizer.ggml.padding_token_id", tokenizer.pad_token_id());
  // What the tokenizer adds around a text, as encode(text) adds it.
  const std::vector<int32_t> bare = tokenizer.encode("a", false), full = tokenizer.encode("a", true);
  const auto at = std::search(full.begin(), full.end(), bare.begin(), bare.end());
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(at != full.begin()));
  m.set("tokenizer.ggml.add_eos_token", Value::boolean(at + static_cast<std::ptrdiff_t>(bare.size()) != full.end()));
  if (v.model == "llama")  // whether a text is tokenized as if it began with a space (Llama 2's "▁a", not Gemma's "a")
    m.set("tokenizer.ggml.add_space_prefix",
          Value::boolean(!bare.empty() && tokenizer.id_to_token(bare[0]).starts_with("\xE2\x96\x81")));
  if (const ChatTemplate* t = tokenizer.chat_template()) m.set("tokenizer.chat_template", Value::string(t->source()));
  return m;
}

}  // namespace tg::data
