#include "data/detail/hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>

#include "core/error.h"
#include "data/detail/regex.h"
#include "core/detail/utf8.h"

namespace tg::data::hf {

// ---- helpers of the stages (data/detail/hf_pipeline.h)

const json::Value& field(const json::Value& v, const char* key, const std::string& where) {
  const json::Value* f = v.is_object() ? v.find(key) : nullptr;
  TG_CHECK(f != nullptr, "tokenizer.json", where, " has no \"", key, "\"");
  return *f;
}

bool bool_field(const json::Value& v, const char* key, bool fallback) {
  const json::Value* f = v.find(key);
  return f && !f->is_null() ? f->as_bool(key) : fallback;
}

const std::string& type_of(const json::Value& v, const std::string& where) {
  TG_CHECK(v.is_object(), "tokenizer.json", where, " wants an object, got ", json::Value::type_name(v.type()));
  return field(v, "type", where).as_string("type");
}

void unsupported(const std::string& where, const std::string& what) {
  fail("tokenizer.json", where, " '", what, "' is not supported by tapegrad");
}

int32_t token_id(const json::Value& v, const std::string& what) {
  TG_CHECK(v.is_int(), "tokenizer.json", what, " wants an integer id, got ", v.is_number() ? "a fraction" : json::Value::type_name(v.type()));
  const int64_t id = v.as_int(what);
  TG_CHECK(id >= 0 && id < INT32_MAX, "tokenizer.json", what, " is ", id, ", outside the ids [0, 2^31 - 1)");
  return static_cast<int32_t>(id);
}

size_t count_value(const json::Value& v, const std::string& what) {
  TG_CHECK(v.is_int(), "tokenizer.json", what, " wants an integer, got ", json::Value::type_name(v.type()));
  const int64_t n = v.as_int(what);
  TG_CHECK(n >= 0 && n <= INT32_MAX, "tokenizer.json", what, " is ", n, ", outside [0, 2^31)");
  return static_cast<size_t>(n);
}

std::string one_char_field(const json::Value& v, const char* key, const std::string& where) {
  const std::string& s = field(v, key, where).as_string(key);
  size_t end = 0;
  if (!s.empty()) end = utf8::char_len(static_cast<unsigned char>(s[0]));
  TG_CHECK(!s.empty() && end == s.size() && utf8::is_valid(s), "tokenizer.json", where, " ", key,
           " wants one character, got '", s, "'");
  return s;
}

namespace {

// bytes_to_unicode(): printable Latin-1 bytes are themselves, the others 256 + n in order.
struct ByteAlphabet {
  char32_t to_char[256];
  int to_byte[324];
  ByteAlphabet() {
    std::fill(std::begin(to_byte), std::end(to_byte), -1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_char[b]] = b;
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return alphabet().to_char[b]; }
int byte_of_char(char32_t c) { return c < 324 ? alphabet().to_byte[c] : -1; }

// ---- added tokens

namespace {

// The Rust regex crate's \w, which tokenizers' single_word checks use.
bool is_word_char(std::string_view s, size_t at) {
  static const Regex word("^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]");
  return word.search(s.substr(at, utf8::char_len(static_cast<unsigned char>(s[at]))));
}
size_t last_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}
bool is_space_at(std::string_view s, size_t at) {
  size_t i = at;
  return utf8::is_white_space(utf8::next(s, i));
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  build(raw_, false);
  build(normalized_, true);
}

void AddedVocabulary::build(MatchingSet& set, bool normalized) {
  set.by_first.assign(256, {});
  for (size_t t = 0; t < tokens_.size(); ++t) {
    if (tokens_[t].normalized != normalized) continue;
    std::string pattern = normalized ? tokens_[t].form : tokens_[t].content;
    if (pattern.empty()) continue;
    set.by_first[static_cast<unsigned char>(pattern[0])].push_back(set.patterns.size());
    set.patterns.push_back(std::move(pattern));
    set.token.push_back(t);
  }
  for (auto& list : set.by_first)
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return set.patterns[a].size() > set.patterns[b].size(); });
}

void AddedVocabulary::split(Pieces& pieces, bool normalized) const {
  const MatchingSet& set = normalized ? normalized_ : raw_;
  if (set.patterns.empty()) return;
  Pieces out;
  for (Piece& p : pieces) {
    if (p.added_id >= 0) out.push_back(std::move(p));
    else split_piece(std::move(p), set, out);
  }
  pieces = std::move(out);
}

// tokenizers' AddedVocabulary::find_matches (aho-corasick, leftmost-longest, non-overlapping),
// then the single_word, lstrip and rstrip rules.
void AddedVocabulary::split_piece(Piece&& piece, const MatchingSet& set, Pieces& out) const {
  const std::string& s = piece.text;
  size_t start_offset = 0;
  auto emit_text = [&](size_t a, size_t b) {
    if (b > a) out.push_back({s.substr(a, b - a), -1, piece.at_start && a == 0});
  };
  for (size_t i = 0; i < s.size();) {
    const auto& candidates = set.by_first[static_cast<unsigned char>(s[i])];
    size_t found = SIZE_MAX;
    for (size_t c : candidates)
      if (s.compare(i, set.patterns[c].size(), set.patterns[c]) == 0) {
        found = c;
        break;
      }
    if (found == SIZE_MAX) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + set.patterns[found].size();
    i = stop;  // the search resumes after the match, whether it is used or not
    const AddedToken& tok = tokens_[set.token[found]];
    if (tok.single_word) {
      const bool start_space = start == 0 || !is_word_char(s, last_char_start(s, start));
      const bool stop_space = stop == s.size() || !is_word_char(s, stop);
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        const size_t prev = last_char_start(s, new_start);
        if (!is_space_at(s, prev)) break;
        new_start = prev;
      }
      start = std::max(new_start, start_offset);
    }
    if (tok.rstrip)
      while (stop < s.size() && is_space_at(s, stop)) stop += utf8::char_len(static_cast<unsigned char>(s[stop]));
    emit_text(start_offset, start);
    out.push_back({s.substr(start, stop - start), tok.id, piece.at_start && start == 0});
    start_offset = stop;
    i = std::max(i, stop);
  }
  emit_text(start_offset, s.size());
}

// ---- the tokenizer

namespace {

// An added token's listed id, which tokenizers reads as a u32 and then replaces by its own.
int64_t listed_id(const json::Value& v, const std::string& what) {
  TG_CHECK(v.is_int(), "tokenizer.json", what, " wants an integer id, got ", v.is_number() ? "a fraction" : json::Value::type_name(v.type()));
  const int64_t id = v.as_int(what);
  TG_CHECK(id >= 0 && id <= UINT32_MAX, "tokenizer.json", what, " is ", id, ", outside the ids [0, 2^32)");
  return id;
}

}  // namespace

HfTokenizer::HfTokenizer(const json::Value& root) {
  TG_CHECK(root.is_object(), "tokenizer.json", "wants a JSON object at the top");
  for (const char* key : {"truncation", "padding"}) {
    const json::Value* v = root.find(key);
    if (v && !v->is_null())
      fail("tokenizer.json", "\"", key, "\" is set; tapegrad does not ", key == std::string("padding") ? "pad" : "truncate",
           " inside the tokenizer (set it to null; the datasets pack and pad)");
  }
  const json::Value& model = field(root, "model", "the file");
  const json::Value* type = model.find("type");
  const std::string model_type = type ? type->as_string("model type") : model.find("merges") ? "BPE" : "?";
  if (model_type != "BPE") unsupported("model", model_type);

  const json::Value null;
  auto stage = [&](const char* key) -> const json::Value& {
    const json::Value* v = root.find(key);
    return v ? *v : null;
  };
  normalizer_ = make_normalizer(stage("normalizer"));
  const bool byte_level = ends_in_byte_level(stage("pre_tokenizer"));
  pre_tokenizer_ = make_pre_tokenizer(stage("pre_tokenizer"));
  pre_tokenizer_json_ = stage("pre_tokenizer");
  model_ = std::make_unique<BpeModel>(model, byte_level);
  post_processor_ = make_post_processor(stage("post_processor"));
  decoder_ = make_decoder(stage("decoder"));
  vocab_size_ = model_->vocab_size();
  read_added_tokens(root);
  if (post_processor_)
    for (int32_t id : post_processor_->added_ids())
      TG_CHECK(id_to_token(id).has_value(), "tokenizer.json", "post_processor adds id ", id,
               ", which is neither in the vocabulary nor an added token (", vocab_size_, " ids)");
  description_ = std::string("tokenizer.json BPE") + (byte_level ? " (byte-level)" : "") + ", " +
                 std::to_string(vocab_size_) + " tokens";
}

// tokenizers' AddedVocabulary::add_tokens as its deserializer calls it (0.23): the listed ids
// are not used. In the listed order, each token takes the id its content already has (an earlier
// added token's, else the vocabulary's), else the next id from the vocabulary's token count on;
// an empty content is skipped, and a later listing of a content replaces its options. Where two
// tokens end on one id (a vocabulary with gaps) the later holds it, for encoding and decoding.
void HfTokenizer::read_added_tokens(const json::Value& root) {
  std::map<int32_t, AddedToken> by_id;
  std::unordered_map<int32_t, std::string> normalized_cache;  // never pruned, as tokenizers'
  int64_t next_id = model_->entries();
  size_t moved = 0;
  std::string first_moved;
  if (const json::Value* list = root.find("added_tokens"))
    for (const json::Value& t : list->as_array("added_tokens")) {
      AddedToken a;
      a.content = field(t, "content", "added token").as_string("content");
      const int64_t listed = listed_id(field(t, "id", "added token '" + a.content + "'"), "added token '" + a.content + "' id");
      a.special = bool_field(t, "special", false);
      a.lstrip = bool_field(t, "lstrip", false);
      a.rstrip = bool_field(t, "rstrip", false);
      a.single_word = bool_field(t, "single_word", false);
      a.normalized = bool_field(t, "normalized", !a.special);
      if (a.content.empty()) continue;
      const auto known = added_by_content_.find(a.content);
      if (known != added_by_content_.end() && by_id[known->second] == a) continue;
      if (known != added_by_content_.end()) a.id = known->second;
      else if (const int32_t* id = model_->id_of_token(a.content)) a.id = *id;
      else {
        TG_CHECK(next_id < INT32_MAX, "tokenizer.json", "added token '", a.content, "' would get id ", next_id,
                 ", outside the ids [0, 2^31 - 1)");
        a.id = static_cast<int32_t>(next_id++);
      }
      if (a.id != listed && moved++ == 0)
        first_moved = "'" + a.content + "': listed " + std::to_string(listed) + ", given " + std::to_string(a.id);
      if (a.normalized && normalizer_) {
        std::string form = a.content;
        normalizer_->normalize(form);
        if (form != a.content) normalized_cache[a.id] = std::move(form);
      }
      added_by_content_[a.content] = a.id;
      if (a.special) special_contents_[a.content] = true;
      by_id[a.id] = std::move(a);
    }
  if (moved)
    std::cerr << "warning: tokenizer.json: " << moved << " added token" << (moved > 1 ? "s are" : " is")
              << " listed with an id other than Hugging Face tokenizers gives, which is used (" << first_moved
              << "): tokenizers gives an added token its content's vocabulary id, else the next id after the vocabulary\n";
  std::vector<AddedToken> added;
  for (auto& [id, a] : by_id) {
    const auto cached = normalized_cache.find(id);
    a.form = cached != normalized_cache.end() ? cached->second : a.content;
    decode_form_[id] = a.form;
    vocab_size_ = std::max<int64_t>(vocab_size_, id + 1);
    added.push_back(std::move(a));
  }
  added_ = std::make_unique<AddedVocabulary>(std::move(added));
}

void HfTokenizer::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out, WordCache* cache) const {
  std::vector<Segment> segments;
  const size_t from = out.size();
  encode_segments(text, out, segments, cache);
  if (add_special_tokens && post_processor_) {
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(from), out.end());
    out.resize(from);
    ids = post_processor_->process(std::move(ids));
    out.insert(out.end(), ids.begin(), ids.end());
  }
}

// The later stages see one first-pass piece at a time, so each piece encodes on its own.
void HfTokenizer::encode_segments(std::string_view text, std::vector<int32_t>& out, std::vector<Segment>& segments,
                                  WordCache* cache) const {
  Pieces pieces;
  pieces.push_back({std::string(text), -1, true});
  added_->split(pieces, false);
  size_t at = 0;  // the first pass cuts the text into contiguous pieces
  for (Piece& p : pieces) {
    const size_t n = p.text.size();
    const bool added = p.added_id >= 0;
    encode_piece(std::move(p), out, cache);
    segments.push_back({at, at + n, out.size(), added});
    at += n;
  }
}

void HfTokenizer::encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& out, WordCache* cache) const {
  encode_piece(Piece{std::string(piece), -1, at_start}, out, cache);
}

void HfTokenizer::encode_piece(Piece&& piece, std::vector<int32_t>& out, WordCache* cache) const {
  if (piece.added_id >= 0) {
    out.push_back(piece.added_id);
    return;
  }
  Pieces pieces;
  pieces.push_back(std::move(piece));
  if (normalizer_) normalizer_->normalize(pieces[0].text);
  added_->split(pieces, true);
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
  for (const Piece& p : pieces) {
    if (p.added_id >= 0) out.push_back(p.added_id);
    else model_->encode_word(p.text, out, cache);
  }
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  if (const int32_t* id = model_->id_of_token(token)) return *id;
  return std::nullopt;
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (auto it = decode_form_.find(id); it != decode_form_.end()) return it->second;
  if (const std::string* t = model_->token(id)) return *t;
  return std::nullopt;
}

// As tokenizers decides it: by the token's string.
bool HfTokenizer::is_special(int32_t id) const {
  std::optional<std::string> t = id_to_token(id);
  return t && special_contents_.count(*t);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::optional<std::string> t = id_to_token(id);
    TG_CHECK(t.has_value(), "decode", "id ", id, " is not in the vocabulary (", vocab_size_, " tokens)");
    if (skip_special_tokens && special_contents_.count(*t)) continue;
    tokens.push_back(std::move(*t));
  }
  std::string text;
  if (decoder_) {
    for (const std::string& t : decoder_->decode_chain(std::move(tokens))) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  return text;
}

}  // namespace tg::data::hf
