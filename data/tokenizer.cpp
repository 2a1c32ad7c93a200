#include "data/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "core/parallel.h"
#include "data/detail/hf_tokenizer.h"
#include "data/detail/sentencepiece_tokenizer.h"
#include "core/detail/utf8.h"
#include "io/file.h"
#include "io/json.h"

namespace tg::data {
namespace fs = std::filesystem;

struct Tokenizer::Impl {
  std::unique_ptr<hf::HfTokenizer> hf;
  std::unique_ptr<sp::SpTokenizer> sp;
  std::optional<int32_t> bos, eos, pad;
  std::string description;
  std::optional<ChatTemplate> chat_template;
  std::string origin;  // the folder or file, for errors
  uint64_t serial = next_serial();  // names this tokenizer's word caches; never reused

  static uint64_t next_serial() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  // The calling thread's cache of this tokenizer's words.
  hf::WordCache& cache() const {
    thread_local std::unordered_map<uint64_t, hf::WordCache> caches;
    if (caches.size() > 8 && !caches.count(serial)) caches.clear();  // tokenizers long gone
    return caches[serial];
  }
  void encode(std::string_view text, bool add_special, std::vector<int32_t>& out) const {
    std::string repaired;
    if (!utf8::is_valid(text)) text = repaired = utf8::repair(text);
    if (hf) hf->encode(text, add_special, out, &cache());
    else sp->encode(text, add_special, out);
  }
};

namespace {

std::string read_text(const std::string& path) {
  std::vector<uint8_t> bytes = io::read_file(path, io::kMaxConfigBytes);
  return std::string(bytes.begin(), bytes.end());
}

json::Value read_json(const std::string& path) {
  try {
    return json::parse(read_text(path));
  } catch (const Error& e) {
    fail("tokenizer", "'", path, "': ", e.what());
  }
}

// tokenizer_config.json's "bos_token" etc.: a string, an AddedToken object {"content": ...} or null.
std::optional<std::string> special_token(const json::Value& config, const char* key) {
  const json::Value* v = config.find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (v->is_string()) return v->as_string(key);
  TG_CHECK(v->is_object() && v->find("content"), "tokenizer", "tokenizer_config.json ", key,
           " wants a string or {\"content\": ...}");
  return v->at("content").as_string(key);
}

std::shared_ptr<Tokenizer::Impl> load(const std::string& path, const json::Value& config) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) {
    const json::Value root = read_json(path);  // its errors name the file already
    try {
      impl->hf = std::make_unique<hf::HfTokenizer>(root);
    } catch (const Error& e) {
      fail("tokenizer", "'", path, "': ", e.what());
    }
    impl->description = impl->hf->description();
  } else {
    auto flag = [&](const char* key, bool fallback) {
      const json::Value* v = config.find(key);
      return v && !v->is_null() ? v->as_bool(key) : fallback;
    };
    impl->sp = std::make_unique<sp::SpTokenizer>(path, flag("add_bos_token", true), flag("add_eos_token", false));
    impl->description = "sentencepiece tokenizer.model, " + std::to_string(impl->sp->vocab_size()) + " pieces";
    impl->bos = impl->sp->bos_id(), impl->eos = impl->sp->eos_id(), impl->pad = impl->sp->pad_id();
  }
  auto id_of = [&](const char* key, std::optional<int32_t>& slot) {
    std::optional<std::string> token = special_token(config, key);
    if (!token) return;
    std::optional<int32_t> id = impl->hf ? impl->hf->token_to_id(*token) : impl->sp->token_to_id(*token);
    TG_CHECK(id.has_value(), "tokenizer", "tokenizer_config.json ", key, " '", *token, "' is not in the vocabulary of '",
             path, "'");
    slot = id;
  };
  id_of("bos_token", impl->bos);
  id_of("eos_token", impl->eos);
  id_of("pad_token", impl->pad);
  return impl;
}

}  // namespace

Tokenizer Tokenizer::from_pretrained(const std::string& dir) {
  TG_CHECK(fs::is_directory(dir), "Tokenizer::from_pretrained", "'", dir, "' is not a directory");
  const fs::path d(dir);
  const json::Value config =
      fs::exists(d / "tokenizer_config.json") ? read_json((d / "tokenizer_config.json").string()) : json::Value::object();
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (!fs::exists(d / name)) continue;
    std::shared_ptr<Impl> impl = load((d / name).string(), config);
    impl->origin = dir;
    impl->chat_template = ChatTemplate::from_config(config, dir);
    return Tokenizer(std::move(impl));
  }
  fail("Tokenizer::from_pretrained", "'", dir, "' has neither tokenizer.json nor tokenizer.model",
       fs::exists(d / "vocab.json") ? " (vocab.json + merges.txt alone are not read: save the tokenizer with "
                                      "transformers' save_pretrained to get its tokenizer.json)"
                                    : "");
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  TG_CHECK(fs::is_regular_file(path), "Tokenizer::from_file", "no file '", path, "'");
  std::shared_ptr<Impl> impl = load(path, json::Value::object());
  impl->origin = path;
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  impl_->encode(text, add_special_tokens, ids);
  return ids;
}

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}
size_t common_suffix(std::span<const int32_t> a, std::span<const int32_t> b) {
  return static_cast<size_t>(std::mismatch(a.rbegin(), a.rend(), b.rbegin(), b.rend()).first - a.rbegin());
}

}  // namespace

std::vector<int32_t> Tokenizer::encode_with_cuts(std::string_view text, std::span<const size_t> cuts,
                                                 std::vector<TokenCut>& where) const {
  TG_CHECK(utf8::is_valid(text), "Tokenizer::encode_with_cuts", "the text is not valid UTF-8");
  std::vector<int32_t> ids;
  std::vector<hf::HfTokenizer::Segment> segments;
  if (impl_->hf) {
    impl_->hf->encode_segments(text, ids, segments, &impl_->cache());
  } else {
    impl_->sp->encode(text, false, ids);
    segments.push_back({0, text.size(), ids.size(), false});
  }
  auto encode_piece = [&](std::string_view piece, bool at_start) {
    std::vector<int32_t> out;
    if (impl_->hf) impl_->hf->encode_piece(piece, at_start, out, &impl_->cache());
    else impl_->sp->encode(piece, false, out);
    return out;
  };
  where.clear();
  size_t k = 0, first = 0;  // the piece the cut falls in, and its first id
  for (size_t i = 0; i < cuts.size(); ++i) {
    const size_t cut = cuts[i];
    TG_CHECK(cut <= text.size() && (i == 0 || cut >= cuts[i - 1]), "Tokenizer::encode_with_cuts", "cut ", i, " at byte ",
             cut, " is not in ascending order within the ", text.size(), " bytes");
    // A cut inside a character would hand the pipeline (PCRE2 without its UTF check) a truncated one.
    TG_CHECK(cut == text.size() || (static_cast<unsigned char>(text[cut]) & 0xC0) != 0x80, "Tokenizer::encode_with_cuts",
             "cut ", i, " at byte ", cut, " falls inside a UTF-8 character");
    while (k < segments.size() && segments[k].end <= cut) first = segments[k++].ids_end;
    if (k == segments.size() || cut == segments[k].begin) {
      where.push_back({first, first});
      continue;
    }
    const hf::HfTokenizer::Segment& s = segments[k];
    const size_t n = s.ids_end - first;
    if (s.added) {
      where.push_back({first, s.ids_end});
      continue;
    }
    const std::span<const int32_t> whole(ids.data() + first, n);
    const std::string_view piece = text.substr(s.begin, s.end - s.begin);
    const std::vector<int32_t> head = encode_piece(piece.substr(0, cut - s.begin), s.begin == 0);
    const size_t lcp = common_prefix(whole, head);
    if (lcp == head.size()) {  // the ids of the text before the cut begin the piece's: a boundary
      where.push_back({first + lcp, first + lcp});
      continue;
    }
    // The piece's last ids that the text after the cut ends in lie after it, bar the tail's first
    // id, which may hold what the normalizer prepends to every piece (sentencepiece's "▁").
    const std::vector<int32_t> tail = encode_piece(piece.substr(cut - s.begin), false);
    const size_t lcs = std::min(common_suffix(whole, tail), tail.empty() ? size_t{0} : tail.size() - 1);
    where.push_back({first + lcp, first + std::min(n, std::max(lcp + 1, n - lcs))});
  }
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts, bool add_special_tokens) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  // Chunks claimed one at a time by the pool's threads: documents differ in length.
  const int64_t n = static_cast<int64_t>(texts.size());
  const int64_t chunks = std::min<int64_t>(n, 16 * static_cast<int64_t>(get_num_threads()));
  struct Ctx {
    const Impl* impl;
    std::span<const std::string> texts;
    std::vector<std::vector<int32_t>>* out;
    int64_t n, chunks;
    bool special;
  } ctx{impl_.get(), texts, &out, n, chunks, add_special_tokens};
  if (chunks == 0) return out;
  detail::run_chunks(
      chunks,
      [](void* c, int64_t chunk) {
        const Ctx& x = *static_cast<const Ctx*>(c);
        for (int64_t i = chunk * x.n / x.chunks, e = (chunk + 1) * x.n / x.chunks; i < e; ++i)
          x.impl->encode(x.texts[i], x.special, (*x.out)[i]);
      },
      &ctx);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  if (impl_->hf) return impl_->hf->decode(ids, skip_special_tokens);
  return impl_->sp->decode(ids);
}

int64_t Tokenizer::vocab_size() const { return impl_->hf ? impl_->hf->vocab_size() : impl_->sp->vocab_size(); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->hf ? impl_->hf->token_to_id(token) : impl_->sp->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  std::optional<std::string> t = impl_->hf ? impl_->hf->id_to_token(id) : impl_->sp->id_to_token(id);
  TG_CHECK(t.has_value(), "Tokenizer::id_to_token", "id ", id, " is not in the vocabulary (", vocab_size(), " tokens)");
  return *t;
}

bool Tokenizer::is_special(int32_t id) const { return impl_->hf ? impl_->hf->is_special(id) : impl_->sp->is_control(id); }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad; }
std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
  TG_CHECK(impl_->chat_template.has_value(), "Tokenizer::apply_chat_template", "'", impl_->origin,
           "' has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)");
  return impl_->chat_template->render(messages, options);
}

const ChatTemplate* Tokenizer::chat_template() const { return impl_->chat_template ? &*impl_->chat_template : nullptr; }
const std::string& Tokenizer::name_or_path() const { return impl_->origin; }
const std::string& Tokenizer::description() const { return impl_->description; }

}  // namespace tg::data
