// The stages of a Hugging Face tokenizer.json, as the `tokenizers` library runs them (internal
// to data/; data/tokenizer.h is the API):
//   added tokens split out -> normalizer (per piece) -> pre-tokenizer -> model (BPE) ->
//   post-processor (special tokens); decoding: ids -> token strings -> decoder -> text.
// Each stage is built from its JSON object; a type or option tapegrad does not implement is a
// tg::Error naming it ("tokenizer.json: pre_tokenizer type 'BertPreTokenizer' is not
// supported"), never skipped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/json.h"

namespace tg::data::hf {

// A stretch of the text on its way through the pipeline.
struct Piece {
  std::string text;
  int32_t added_id = -1;   // >= 0: an added token, which no later stage touches
  bool at_start = false;   // begins at offset 0 of the input (Metaspace's prepend_scheme "first")
};
using Pieces = std::vector<Piece>;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece that is not an added token; drops the pieces that end up empty.
  virtual void pre_tokenize(Pieces& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // tokenizers' decode_chain: token strings in, token strings out (joined at the very end).
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
  // Every id process() may add (checked against the vocabulary when the file is loaded).
  virtual std::vector<int32_t> added_ids() const = 0;
};

// Null JSON gives a null pointer (the stage is absent).
std::unique_ptr<Normalizer> make_normalizer(const json::Value& v);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json::Value& v);
std::unique_ptr<Decoder> make_decoder(const json::Value& v);
std::unique_ptr<PostProcessor> make_post_processor(const json::Value& v);

// Whether this pre-tokenizer ends in ByteLevel: the BPE model then works on raw bytes (its
// vocabulary mapped back from GPT-2's byte alphabet), and ByteLevel itself leaves the bytes be.
// tg::Error when ByteLevel appears anywhere but last.
bool ends_in_byte_level(const json::Value& pre_tokenizer);

// GPT-2's byte alphabet: byte b <-> the code point bytes_to_unicode() gives it.
char32_t byte_to_char(uint8_t b);
int byte_of_char(char32_t c);  // -1 outside the alphabet

// The field `key` of a JSON object, or the error naming the stage `where` and the key.
const json::Value& field(const json::Value& v, const char* key, const std::string& where);
// A field that may be absent: `fallback` then.
bool bool_field(const json::Value& v, const char* key, bool fallback);
// The stage's "type", naming `where` when it has none.
const std::string& type_of(const json::Value& v, const std::string& where);
[[noreturn]] void unsupported(const std::string& where, const std::string& what);
// A token id from the file: an integer in [0, 2^31 - 1) (so that id + 1, a vocabulary size,
// still fits), or the error naming `what`.
int32_t token_id(const json::Value& v, const std::string& what);
// A count from the file: an integer in [0, 2^31).
size_t count_value(const json::Value& v, const std::string& what);
// A string field that must be one character (tokenizers' `char` fields: Metaspace's
// replacement, Strip's content): an empty one would never advance the text.
std::string one_char_field(const json::Value& v, const char* key, const std::string& where);

}  // namespace tg::data::hf
