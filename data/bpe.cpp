#include "data/detail/bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "data/detail/hf_pipeline.h"
#include "core/detail/utf8.h"

namespace tg::data::hf {
namespace {

constexpr size_t kMaxCachedWord = 256;      // tokenizers caches words shorter than this
constexpr size_t kMaxCacheEntries = 1 << 15;  // then it stops adding: the frequent words come early

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

// A byte-level vocabulary string back to its bytes; false when a character is outside the alphabet.
bool alphabet_to_bytes(const std::string& token, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const int b = byte_of_char(utf8::next(token, i));
    if (b < 0) return false;
    bytes += static_cast<char>(b);
  }
  return true;
}

}  // namespace

uint64_t WordCache::hash_of(std::string_view w) {
  uint64_t h = 1469598103934665603ull ^ w.size();  // FNV-1a, 8 bytes a round
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, w.data() + i, 8);
    h = (h ^ v) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < w.size(); ++i) h = (h ^ static_cast<unsigned char>(w[i])) * 1099511628211ull;
  h ^= h >> 32;
  return h | 1;  // never 0, the empty mark
}

bool WordCache::find(std::string_view word, std::vector<int32_t>& out) const {
  if (slots_.empty()) return false;
  const uint64_t h = hash_of(word);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return false;
    if (s.hash == h && s.key_len == word.size() && std::memcmp(keys_.data() + s.key, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.begin() + s.ids, ids_.begin() + s.ids + s.n_ids);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, const std::vector<int32_t>& ids, size_t from) {
  if (word.size() >= kMaxCachedWord || used_ >= kMaxCacheEntries) return;
  if (slots_.empty()) slots_.resize(2 * kMaxCacheEntries);  // at most half full
  const uint64_t h = hash_of(word);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].hash != 0) i = (i + 1) & mask;
  slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
               static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size() - from)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  ++used_;
}

BpeModel::BpeModel(const json::Value& model, bool byte_level) : byte_level_(byte_level) {
  const std::string where = "model BPE";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json::Value* v = model.find(key);
    if (v && !v->is_null() && !v->as_string(key).empty()) unsupported(where, std::string(key) + " '" + v->as_string(key) + "'");
  }
  if (const json::Value* d = model.find("dropout"); d && !d->is_null() && d->as_double("dropout") > 0)
    unsupported(where, "dropout (tokenization would be random)");
  byte_fallback_ = bool_field(model, "byte_fallback", false);
  fuse_unk_ = bool_field(model, "fuse_unk", false);
  ignore_merges_ = bool_field(model, "ignore_merges", false);

  const json::Value& vocab = field(model, "vocab", where);
  TG_CHECK(vocab.is_object(), "tokenizer.json", "model vocab wants an object {token: id}");
  int64_t max_id = -1;
  for (size_t i = 0; i < vocab.size(); ++i)
    max_id = std::max<int64_t>(max_id, token_id(vocab.values()[i], "model vocab id of '" + vocab.keys()[i] + "'"));
  // The table is dense in the ids: a vocabulary whose ids leave most of it empty is a broken (or
  // hostile) file, not one to allocate gigabytes for.
  const int64_t entries = static_cast<int64_t>(vocab.size());
  TG_CHECK(max_id < 2 * entries + 1024, "tokenizer.json", "model vocab has ", entries, " tokens but ids up to ", max_id,
           ": ids must be about 0 .. ", entries - 1, ", with few gaps");
  tokens_.resize(static_cast<size_t>(max_id + 1));
  present_.resize(tokens_.size());
  by_token_.reserve(vocab.size());
  by_bytes_.reserve(vocab.size());
  std::string bytes;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const int64_t id = vocab.values()[i].as_int("vocab id");  // checked above
    TG_CHECK(!present_[id], "tokenizer.json", "model vocab id ", id, " is given to '", tokens_[id], "' and '",
             vocab.keys()[i], "'");
    tokens_[id] = vocab.keys()[i];
    present_[id] = true;
    by_token_.emplace(tokens_[id], static_cast<int32_t>(id));
    if (!byte_level_) by_bytes_.emplace(tokens_[id], static_cast<int32_t>(id));
    else if (alphabet_to_bytes(tokens_[id], bytes)) by_bytes_.emplace(bytes, static_cast<int32_t>(id));
  }

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const int32_t* id = id_of_token(name);
    byte_token_[b] = id ? *id : -1;
    if (byte_level_) utf8::append(byte_char_[b], byte_to_char(static_cast<uint8_t>(b)));
    const char raw = static_cast<char>(b);
    byte_unit_[b] = byte_level_ ? unit_id(std::string_view(&raw, 1)) : -1;
  }
  if (const json::Value* unk = model.find("unk_token"); unk && !unk->is_null()) {
    unk_token_ = unk->as_string("unk_token");
    const int32_t* id = id_of_token(unk_token_);
    unk_id_ = id ? *id : kUnkMissing;  // an error only when needed, as tokenizers
  }

  const auto& merges = field(model, "merges", where).as_array("merges");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string a, b;
    if (merges[rank].is_string()) {  // the older "a b" form
      const std::string& m = merges[rank].as_string("merge");
      const size_t space = m.find(' ');
      TG_CHECK(space != std::string::npos && m.find(' ', space + 1) == std::string::npos, "tokenizer.json",
               "model merge ", rank, " '", m, "' wants two tokens separated by one space");
      a = m.substr(0, space), b = m.substr(space + 1);
    } else {
      const auto& pair = merges[rank].as_array("merge");
      TG_CHECK(pair.size() == 2, "tokenizer.json", "model merge ", rank, " wants a pair of tokens");
      a = pair[0].as_string("merge"), b = pair[1].as_string("merge");
    }
    const int32_t *ia = id_of_token(a), *ib = id_of_token(b), *ic = id_of_token(a + b);
    TG_CHECK(ia && ib && ic, "tokenizer.json", "model merge ", rank, " ('", a, "', '", b, "') uses a token missing from the vocab ('",
             !ia ? a : !ib ? b : a + b, "')");
    merges_[pair_key(*ia, *ib)] = {static_cast<int32_t>(rank), *ic};  // a repeated pair keeps its last rank, as tokenizers
  }
}

std::vector<BpeModel::Merge> BpeModel::merges_by_rank() const {
  std::vector<Merge> out;
  out.reserve(merges_.size());
  for (const auto& [key, target] : merges_)
    out.push_back({static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu), target.id, target.rank});
  std::sort(out.begin(), out.end(), [](const Merge& a, const Merge& b) { return a.rank < b.rank; });
  return out;
}

const std::string* BpeModel::token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() && present_[id] ? &tokens_[id] : nullptr;
}

const int32_t* BpeModel::id_of_token(std::string_view t) const {
  auto it = by_token_.find(t);
  return it == by_token_.end() ? nullptr : &it->second;
}

int32_t BpeModel::unit_id(std::string_view unit) const {
  auto it = by_bytes_.find(unit);
  return it == by_bytes_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const {
  if (word.empty()) return;
  if (ignore_merges_)
    if (auto it = by_bytes_.find(word); it != by_bytes_.end()) return out.push_back(it->second);
  if (cache && cache->find(word, out)) return;
  const size_t from = out.size();
  merge(word, out);
  if (cache) cache->insert(word, out, from);
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) const {
  // The symbols: one per character (per byte when byte-level), as tokenizers' merge_word makes them.
  thread_local std::vector<int32_t> ids;
  ids.clear();
  bool pending_unk = false;
  auto flush_unk = [&] {
    if (pending_unk) ids.push_back(unk_id_);
    pending_unk = false;
  };
  for (size_t i = 0; i < word.size();) {
    const size_t n = byte_level_ ? 1 : utf8::char_len(static_cast<unsigned char>(word[i]));
    const std::string_view unit = word.substr(i, n);
    i += n;
    const int32_t id = byte_level_ ? byte_unit_[static_cast<unsigned char>(unit[0])] : unit_id(unit);
    if (id >= 0) {
      flush_unk();
      ids.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      // The unit's own bytes, or (byte-level) the bytes of its alphabet character.
      const std::string_view bytes = byte_level_ ? std::string_view(byte_char_[static_cast<unsigned char>(unit[0])]) : unit;
      bool all = true;
      for (char c : bytes) all &= byte_token_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : bytes) ids.push_back(byte_token_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ == -1) continue;  // no unk_token: tokenizers drops the character
    TG_CHECK(unk_id_ != kUnkMissing, "tokenizer", "BPE: '", std::string(unit), "' is not in the vocabulary and the "
             "unk_token '", unk_token_, "' is not either");
    if (pending_unk && !fuse_unk_) ids.push_back(unk_id_);
    pending_unk = true;
  }
  flush_unk();

  const int32_t n = static_cast<int32_t>(ids.size());
  if (n > 1) {
    // Merges by (rank, position), lowest first, over a linked list of symbols.
    struct Entry {
      int32_t rank, pos, id;
      bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<int32_t> prev, next;
    thread_local std::vector<Entry> heap;
    prev.resize(n);
    next.resize(n);
    heap.clear();
    auto push = [&](int32_t pos) {
      auto it = merges_.find(pair_key(ids[pos], ids[next[pos]]));
      if (it == merges_.end()) return;
      heap.push_back({it->second.rank, pos, it->second.id});
      std::push_heap(heap.begin(), heap.end(), std::greater<Entry>());
    };
    for (int32_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<Entry>());
      const Entry top = heap.back();
      heap.pop_back();
      const int32_t right = next[top.pos];
      if (ids[top.pos] < 0 || right < 0) continue;
      auto it = merges_.find(pair_key(ids[top.pos], ids[right]));
      if (it == merges_.end() || it->second.id != top.id) continue;  // stale: a neighbour merged since
      ids[top.pos] = top.id;
      ids[right] = -1;
      next[top.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = top.pos;
      if (prev[top.pos] >= 0) push(prev[top.pos]);
      if (next[top.pos] >= 0) push(top.pos);
    }
  }
  for (int32_t id : ids)
    if (id >= 0) out.push_back(id);
}

}  // namespace tg::data::hf
