// A tokenizer.json with a BPE model, run as Hugging Face tokenizers runs it. Internal to data/:
// data/tokenizer.h is the API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/detail/bpe.h"
#include "data/detail/hf_pipeline.h"
#include "io/json.h"

namespace tg::data::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
  // What decoding sees and, for a normalized token, what the second pass matches: the content as
  // the normalizer leaves it (tokenizers' normalized_cache), else the content.
  std::string form;
  bool operator==(const AddedToken& o) const {  // tokenizers compares the content and the options
    return content == o.content && special == o.special && lstrip == o.lstrip && rstrip == o.rstrip &&
           single_word == o.single_word && normalized == o.normalized;
  }
};

// tokenizers' AddedVocabulary: finds the added tokens in the text (leftmost, then longest) and
// cuts them out as pieces of their own.
class AddedVocabulary {
 public:
  explicit AddedVocabulary(std::vector<AddedToken> tokens);
  // The first pass (normalized == false: tokens matched in the raw text) or the second (in the
  // normalized pieces).
  void split(Pieces& pieces, bool normalized) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }  // by id

 private:
  struct MatchingSet {
    std::vector<std::string> patterns;            // what is searched for
    std::vector<size_t> token;                    // the token each pattern is
    std::vector<std::vector<size_t>> by_first;    // 256 lists of pattern indices, longest first
  };
  void build(MatchingSet& set, bool normalized);
  void split_piece(Piece&& piece, const MatchingSet& set, Pieces& out) const;

  std::vector<AddedToken> tokens_;
  MatchingSet raw_, normalized_;
};

class HfTokenizer {
 public:
  explicit HfTokenizer(const json::Value& root);

  // `text` must be valid UTF-8.
  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out, WordCache* cache) const;
  // encode(text, false), with the pieces the added tokens cut `text` into: each piece's [begin,
  // end) bytes and out.size() after its ids. The pieces encode independently of each other.
  struct Segment {
    size_t begin, end, ids_end;
    bool added;  // an added token
  };
  void encode_segments(std::string_view text, std::vector<int32_t>& out, std::vector<Segment>& segments,
                       WordCache* cache) const;
  // Some text as encode_segments encodes it when it is one piece (at_start: at offset 0).
  void encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& out, WordCache* cache) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;  // decode(skip_special_tokens) drops it
  const std::string& description() const { return description_; }
  const BpeModel& model() const { return *model_; }
  const std::vector<AddedToken>& added_tokens() const { return added_->tokens(); }
  const json::Value& pre_tokenizer_json() const { return pre_tokenizer_json_; }  // null when absent

 private:
  void read_added_tokens(const json::Value& root);
  void encode_piece(Piece&& piece, std::vector<int32_t>& out, WordCache* cache) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  StringMap<int32_t> added_by_content_;
  std::unordered_map<int32_t, std::string> decode_form_;  // added token id -> its form
  std::unordered_map<std::string, bool> special_contents_;
  int64_t vocab_size_ = 0;
  std::string description_;
  json::Value pre_tokenizer_json_;
};

}  // namespace tg::data::hf
