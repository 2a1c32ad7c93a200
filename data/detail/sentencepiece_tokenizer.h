// A sentencepiece tokenizer.model through libsentencepiece. Internal to data/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tg::data::sp {

class SpTokenizer {
 public:
  SpTokenizer(const std::string& path, bool add_bos, bool add_eos);
  ~SpTokenizer();

  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;  // control pieces (BOS, EOS) never appear
  int64_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_control(int32_t id) const;
  // A piece as the model has it: its text, score and kind.
  struct Piece {
    enum class Kind { kNormal, kUnknown, kControl, kUnused, kByte };
    std::string text;
    float score = 0;
    Kind kind = Kind::kNormal;
  };
  Piece piece(int32_t id) const;  // id in [0, vocab_size())
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool add_bos_, add_eos_;
};

}  // namespace tg::data::sp
