// Text to token ids and back, as the model folder's own tokenizer does it: a Hugging Face
// tokenizer.json with a BPE model (byte-level as GPT-2, Llama-3 and Qwen2; SentencePiece-style
// with byte fallback as Llama-2, TinyLlama and Mistral), or a sentencepiece tokenizer.model.
// The ids are those Hugging Face tokenizers (or sentencepiece) gives, checked against them on a
// corpus of hard cases (tests/test_tokenizer.cpp).
//
//   auto tok = tg::data::Tokenizer::from_pretrained("TinyLlama-folder");
//   std::vector<int32_t> ids = tok.encode("Hello world");   // with BOS, as transformers gives it
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);   // "Hello world"
//   std::string chat = tok.apply_chat_template(messages, {.add_generation_prompt = true});
//
// Text that is not valid UTF-8 is read as Python reads it with errors="replace" (each invalid
// stretch one U+FFFD). A tokenizer.json stage tapegrad does not implement (a WordPiece or
// Unigram model, a BertPreTokenizer, ...) is a tg::Error naming it when the file is loaded.
// A Tokenizer is immutable: every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"

namespace tg::gguf {
class Metadata;
}

namespace tg::data {

class Tokenizer {
 public:
  // A model folder: tokenizer.json, else tokenizer.model; tokenizer_config.json (when present)
  // names the bos / eos / pad tokens and, for tokenizer.model, add_bos_token / add_eos_token.
  static Tokenizer from_pretrained(const std::string& dir);
  // One file: a tokenizer.json, or a sentencepiece model (BOS added, no EOS, as Llama's).
  static Tokenizer from_file(const std::string& path);

  // add_special_tokens: the post-processor's BOS / EOS (tokenizer.json) or add_bos_token /
  // add_eos_token (tokenizer.model), as transformers' tokenizer(text) adds them.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // encode(text, false) and where byte offsets of `text` (cuts, ascending) fall among its ids:
  // `before` ids lie wholly before a cut and `after` ids begin before it. They differ only where
  // a token spans the cut (a template's "\n" merged with a reply's leading "\n\n"); such a token
  // is counted in both. The added tokens cut the text into pieces that encode independently, so
  // only the piece around each cut is encoded again. tg::Error for text that is not UTF-8.
  struct TokenCut {
    size_t before = 0, after = 0;
  };
  std::vector<int32_t> encode_with_cuts(std::string_view text, std::span<const size_t> cuts,
                                        std::vector<TokenCut>& where) const;
  // Each text encoded on its own, in parallel over the texts (tg::get_num_threads() threads).
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts,
                                                 bool add_special_tokens = true) const;
  // tg::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  int64_t vocab_size() const;  // the highest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // tg::Error outside the vocabulary
  bool is_special(int32_t id) const;          // an added special token (a control piece for sentencepiece)
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  // The folder's chat template rendered over `messages` as transformers'
  // apply_chat_template(messages, tokenize=False, ...) renders it (data/chat_template.h).
  // tg::Error when the folder has no chat template, or the template raises.
  std::string apply_chat_template(std::span<const ChatMessage> messages, const ChatTemplateOptions& options = {}) const;
  const ChatTemplate* chat_template() const;  // nullptr when the folder has none
  const std::string& name_or_path() const;  // the folder or file it was loaded from
  // What was loaded, e.g. "tokenizer.json BPE (byte-level), 50257 tokens".
  const std::string& description() const;

  struct Impl;

 private:
  friend gguf::Metadata gguf_tokenizer_metadata(const Tokenizer& tokenizer, int64_t vocab_size);  // data/gguf_vocab.h
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tg::data
