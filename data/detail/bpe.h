// The BPE model of a tokenizer.json: words to ids by merges in rank order, exactly as Hugging
// Face tokenizers' BPE (lowest rank first, the leftmost of equal ranks; byte_fallback, unk and
// fuse_unk, ignore_merges; a character with neither a token nor an unk_token is dropped, as
// tokenizers drops it). Internal to data/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/json.h"

namespace tg::data::hf {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Words already tokenized, for one thread at a time: an open-addressing table over one arena of
// bytes and one of ids (a node-based map spent a quarter of the encode time finding words).
class WordCache {
 public:
  // The ids of `word`, or false.
  bool find(std::string_view word, std::vector<int32_t>& out) const;
  // Remembers ids[from:] as the tokens of `word` (until the table is full).
  void insert(std::string_view word, const std::vector<int32_t>& ids, size_t from);

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key, key_len, ids, n_ids;
  };
  static uint64_t hash_of(std::string_view word);
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model"; with `byte_level` the vocabulary's strings are read
  // as GPT-2's byte alphabet and words arrive as raw bytes.
  BpeModel(const json::Value& model, bool byte_level);

  // Appends the ids of `word` (one pre-tokenized piece) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }  // the highest id + 1
  // The merges by rank, lowest first: the ids of the pair and of the token it makes.
  struct Merge {
    int32_t left, right, result, rank;
  };
  std::vector<Merge> merges_by_rank() const;
  bool byte_level() const { return byte_level_; }
  bool byte_fallback() const { return byte_fallback_; }
  bool ignore_merges() const { return ignore_merges_; }
  int32_t unk_id() const { return unk_id_ >= 0 ? unk_id_ : -1; }  // -1: none (or not in the vocabulary)
  int64_t entries() const { return static_cast<int64_t>(by_token_.size()); }  // tokenizers' get_vocab_size()
  const std::string* token(int32_t id) const;  // the vocabulary's own string; null for a gap
  const int32_t* id_of_token(std::string_view token) const;  // by the vocabulary's string

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;
  int32_t unit_id(std::string_view unit) const;

  std::vector<std::string> tokens_;   // id -> vocabulary string ("" for gaps)
  std::vector<bool> present_;
  StringMap<int32_t> by_token_;       // vocabulary string -> id
  StringMap<int32_t> by_bytes_;       // the string the model matches (raw bytes when byte-level) -> id
  struct MergeTarget {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, MergeTarget> merges_;
  int32_t byte_unit_[256];  // byte-level: each byte's symbol id, -1 when absent
  bool byte_level_, byte_fallback_, fuse_unk_, ignore_merges_;
  static constexpr int32_t kUnkMissing = -2;  // an unk_token the vocabulary lacks
  int32_t unk_id_ = -1;                         // -1: no unk_token
  std::string unk_token_;
  int32_t byte_token_[256];  // <0xNN> ids for byte_fallback, -1 when absent
  // Byte-level: what a byte falls back to when its character is not in the vocabulary.
  std::string byte_char_[256];
};

}  // namespace tg::data::hf
