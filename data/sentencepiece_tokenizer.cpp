#include "data/detail/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"
#include "io/file.h"

namespace tg::data::sp {

SpTokenizer::SpTokenizer(const std::string& path, bool add_bos, bool add_eos)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), add_bos_(add_bos), add_eos_(add_eos) {
  // Read through io's bounded reader: sentencepiece's own would read a FIFO or device without end.
  const std::vector<uint8_t> bytes = io::read_file(path, io::kMaxConfigBytes);
  sentencepiece::util::Status status;
  try {
    status = sp_->LoadFromSerializedProto(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const std::exception& e) {  // its trie builder throws on some malformed models (an empty piece)
    fail("tokenizer", "cannot load the sentencepiece model '", path, "': ", e.what());
  }
  TG_CHECK(status.ok(), "tokenizer", "cannot load the sentencepiece model '", path, "': ", status.ToString());
  TG_CHECK(!add_bos || sp_->bos_id() >= 0, "tokenizer", "'", path, "' has no BOS piece, yet add_bos_token is set");
  TG_CHECK(!add_eos || sp_->eos_id() >= 0, "tokenizer", "'", path, "' has no EOS piece, yet add_eos_token is set");
}

SpTokenizer::~SpTokenizer() = default;

void SpTokenizer::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  TG_CHECK(status.ok(), "tokenizer", "sentencepiece could not encode the text: ", status.ToString());
  if (add_special_tokens && add_bos_) out.push_back(sp_->bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_special_tokens && add_eos_) out.push_back(sp_->eos_id());
}

std::string SpTokenizer::decode(std::span<const int32_t> ids) const {
  const int n = sp_->GetPieceSize();
  for (int32_t id : ids) TG_CHECK(id >= 0 && id < n, "decode", "id ", id, " is not in the vocabulary (", n, " pieces)");
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  TG_CHECK(status.ok(), "decode", "sentencepiece could not decode: ", status.ToString());
  return text;
}

int64_t SpTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::optional<int32_t> SpTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId answers unk_id for an unknown piece: only the unk piece itself maps there.
  if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::optional<std::string> SpTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return std::nullopt;
  return sp_->IdToPiece(id);
}

SpTokenizer::Piece SpTokenizer::piece(int32_t id) const {
  using Kind = Piece::Kind;
  const Kind kind = sp_->IsUnknown(id) ? Kind::kUnknown
                    : sp_->IsControl(id) ? Kind::kControl
                    : sp_->IsUnused(id)  ? Kind::kUnused
                    : sp_->IsByte(id)    ? Kind::kByte
                                         : Kind::kNormal;
  return {sp_->IdToPiece(id), sp_->GetScore(id), kind};
}

bool SpTokenizer::is_control(int32_t id) const { return id >= 0 && id < sp_->GetPieceSize() && sp_->IsControl(id); }

std::optional<int32_t> SpTokenizer::bos_id() const { return sp_->bos_id() >= 0 ? std::optional<int32_t>(sp_->bos_id()) : std::nullopt; }
std::optional<int32_t> SpTokenizer::eos_id() const { return sp_->eos_id() >= 0 ? std::optional<int32_t>(sp_->eos_id()) : std::nullopt; }
std::optional<int32_t> SpTokenizer::pad_id() const { return sp_->pad_id() >= 0 ? std::optional<int32_t>(sp_->pad_id()) : std::nullopt; }

}  // namespace tg::data::sp
