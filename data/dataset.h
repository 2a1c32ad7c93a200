// Training data for causal language models: text, JSONL or pre-tokenized files turned into
// rows of token ids and labels (-100 where nothing is learned), packed or padded, in a seeded
// shuffled order.
//
//   auto tok = tg::data::Tokenizer::from_pretrained("folder");
//   auto corpus = tg::data::tokenize_jsonl_file("train.jsonl", tok);     // prompt tokens: -100
//   tg::data::SequenceDataset train(corpus, /*seq=*/256, tg::data::Layout::PackSeparate, *tok.pad_token_id());
//   tg::data::Batch b = train.batch(step, /*batch_size=*/8, /*seed=*/0, device);
//   tg::Tensor loss = model->loss(b.ids, b.labels, b.position_ids);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/chat_rows.h"
#include "data/tokenizer.h"
#include "io/json.h"

namespace tg::data {

inline constexpr int32_t kIgnoreIndex = -100;  // transformers' label that adds no loss

// Token ids with their labels, as a sequence of examples (documents, JSONL lines).
class TokenCorpus {
 public:
  virtual ~TokenCorpus() = default;
  virtual int64_t size() const = 0;  // tokens in all
  virtual int64_t examples() const = 0;
  virtual std::pair<int64_t, int64_t> example(int64_t i) const = 0;  // its [begin, end) tokens
  // Tokens [begin, begin + n): ids and labels (either may be null).
  virtual void read(int64_t begin, int64_t n, int32_t* ids, int32_t* labels) const = 0;
};

// Examples in memory. labels empty: every token is learned.
std::shared_ptr<const TokenCorpus> corpus_from_examples(std::vector<std::vector<int32_t>> ids,
                                                        std::vector<std::vector<int32_t>> labels = {});

// What makes `bytes` not text: the first invalid UTF-8 sequence or NUL byte, with its byte
// offset and line ("invalid UTF-8 (byte 0xff) at byte 1234, line 5"); nullopt for text.
std::optional<std::string> text_problem(std::string_view bytes);

struct TextOptions {
  // A text file holds documents separated by this string ("": the whole file is one).
  std::string separator;
  // Read a file that is not text (text_problem) anyway; otherwise it is a tg::Error.
  bool allow_binary = false;
  // Conversations ({"messages"} rows): what becomes of their system messages (data/chat_rows.h).
  SystemMessage system_message = SystemMessage::Keep;
  // Receives the one warning a JSONL file may give (prompt tokens that are not a prefix, see
  // tokenize_jsonl_file); empty: printed to stderr.
  std::function<void(const std::string&)> warn;
};

// Each document as the tokenizer encodes it (its BOS, if any), then EOS; every token learned.
// tg::Error when the tokenizer has no EOS token, or the file is not text (see TextOptions).
std::shared_ptr<const TokenCorpus> tokenize_text_file(const std::string& path, const Tokenizer& tokenizer,
                                                      const TextOptions& options = {});
// One JSON object a line: {"text": ...} (a document, as above) or {"prompt": ..., "completion":
// ...}: as TRL, prompt + completion encoded as one text with special tokens, then EOS; the first
// as many tokens as the prompt encodes to alone are labelled -100, the rest learned. Where the
// prompt's own tokens are not a prefix of the whole's (a tokenizer that merges across the
// boundary), one warning counts the examples (TextOptions::warn). A file whose first row has
// "messages" holds conversations, read by tokenize_chat_jsonl_file (data/chat_dataset.h). Errors
// name the file and line.
std::shared_ptr<const TokenCorpus> tokenize_jsonl_file(const std::string& path, const Tokenizer& tokenizer,
                                                       const TextOptions& options = {});

// The JSON objects of a JSONL file, one a non-blank line, each with where it is ("'path' line 3")
// for errors. tg::Error (from `op`) for a file that is not text or a line that is not an object.
struct JsonlRow {
  json::Value value;
  std::string where;
  size_t line = 0;
};
std::vector<JsonlRow> read_jsonl_objects(const std::string& path, const TextOptions& options, const char* op);

// Pre-tokenized files, read as rows are drawn (larger than memory is fine; a file truncated
// while in use is a tg::Error, not a crash): llm.c's shards (a 256 x int32
// header: magic 20240520 with uint16 tokens, or 20240801 with uint32, then the token count) or
// headerless token arrays (nanoGPT's train.bin) of the given width. One example, every token
// learned.
enum class TokenWidth { Auto, U16, U32 };  // Auto: the llm.c header says
std::shared_ptr<const TokenCorpus> open_token_file(const std::string& path, TokenWidth width = TokenWidth::Auto);
// The largest id of a corpus (-1 when empty), read once in chunks: a token file made with another
// tokenizer is then refused before training instead of failing at the step that meets the id.
int64_t max_token_id(const TokenCorpus& corpus);
// Writes an llm.c shard (uint16 when every id fits, else uint32), atomically.
void write_token_file(const std::string& path, const std::vector<int32_t>& ids);

enum class Layout {
  Pack,  // rows are consecutive windows of the concatenated examples (documents see each other)
  Pad,   // one example a row, cut at seq, padded with pad_id (labels -100)
  // Whole examples (each cut at seq) packed into rows best-fit-decreasing (TRL's "bfd"), the rest
  // of a row padded (labels -100, position 0). Each example keeps its own positions from 0
  // (Batch::position_ids) and its first token is not predicted from the example before (label
  // -100), so a model given the position ids (nn::CausalLM::loss) computes each example as if
  // alone: attention stays inside it (flash_attn_varlen_func's packing, rows still [batch, seq]).
  // Padding-free batches: about the Pack layout's tokens a step without its cross-talk.
  PackSeparate,
};

// Which end of an example longer than seq a row keeps (Layout::Pad and PackSeparate), as TRL's
// truncation_mode: the start (the prompt, the first turns) or the end (the last replies).
enum class Truncation { KeepStart, KeepEnd };

// What a dataset's rows keep of its learned tokens (labels other than -100, each example's first
// token aside: nothing predicts it), measured before training so that a run that would learn
// little or nothing is refused before the model loads.
struct TruncationReport {
  int64_t examples = 0, cut = 0;      // examples (Pack: none counted), and those longer than seq
  int64_t longest = 0;                // the longest example's tokens
  int64_t longest_example = -1;       // its index in the corpus
  int64_t learned = 0, lost = 0;      // learned tokens in all, and those cut away
  int64_t emptied = 0;                // examples with learned tokens that keep none
  double lost_share() const { return learned ? static_cast<double>(lost) / static_cast<double>(learned) : 0.0; }
  int64_t kept() const { return learned - lost; }
};

struct Batch {
  Tensor ids, labels;     // [batch, seq] int64
  int64_t targets = 0;    // positions whose next-token label counts (the loss's denominator)
  Tensor position_ids;    // [batch, seq] int64, PackSeparate only (else undefined: 0..seq-1)
};

// The seeded order the datasets draw their rows in: the epochs one after the other, each a
// Fisher-Yates shuffle of the n rows from Philox(seed, epoch), so position p of the order depends
// only on (seed, n, p) and a resumed run draws the same batches. Keeps the current epoch's
// permutation; copies share it; thread-safe.
class ShuffledOrder {
 public:
  ShuffledOrder();
  // The rows at positions [index * batch_size, (index + 1) * batch_size) of the order (batch
  // `index`); `who` names the dataset in errors (no rows, a batch_size below 1, an index too large).
  std::vector<int64_t> batch(int64_t index, int64_t batch_size, int64_t n, uint64_t seed, const char* who) const;

 private:
  struct State {
    std::mutex mutex;
    int64_t epoch = -1, n = 0;
    uint64_t seed = 0;
    std::vector<int64_t> perm;
  };
  std::shared_ptr<State> state_;
};

// Rows of `seq` tokens over a corpus (or a range of its rows), drawn in a shuffled order that
// depends only on the seed and the batch index: a resumed run draws the same batches. seq is at
// most kMaxContext (core/limits.h): no model takes longer rows.
class SequenceDataset {
 public:
  SequenceDataset(std::shared_ptr<const TokenCorpus> corpus, int64_t seq, Layout layout, int32_t pad_id = 0,
                  Truncation truncation = Truncation::KeepStart);

  int64_t rows() const { return row_end_ - row_begin_; }
  int64_t seq() const { return seq_; }
  Layout layout() const { return layout_; }
  int64_t truncated() const { return truncated_; }  // Pad, PackSeparate: examples longer than seq, cut
  // Over this dataset's examples (its rows' tokens for Pack, which cuts nothing); reads them all once.
  TruncationReport truncation_report() const;

  // The last `fraction` of the rows, and the rows before them (PackSeparate: of the examples,
  // each part packed on its own, so no example is in both).
  std::pair<SequenceDataset, SequenceDataset> split(double fraction) const;

  // Batch `index` of the epoch-by-epoch shuffled order (epoch e: a Philox permutation of seed, e).
  Batch batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const;
  // Rows [first, first + n) in order (validation).
  Batch rows_batch(int64_t first, int64_t n, Device device) const;
  // tg::Error from `op` naming `what` (the rows' count) when a batch of `rows` rows would take
  // more than the host's memory (batch and rows_batch check it before they allocate).
  void check_batch_memory(int64_t rows, const char* op, const std::string& what) const;

 private:
  void fill(int64_t row, int64_t* ids, int64_t* labels, int64_t* positions) const;
  Batch make(const std::vector<int64_t>& rows, Device device) const;
  void pack(int64_t first_example, int64_t end_example);  // PackSeparate's rows of those examples

  std::shared_ptr<const TokenCorpus> corpus_;
  int64_t seq_;
  Layout layout_;
  int32_t pad_id_;
  Truncation truncation_;
  int64_t row_begin_ = 0, row_end_ = 0, truncated_ = 0;
  struct Packing {
    std::vector<int64_t> starts, examples;  // row r holds examples[starts[r] .. starts[r + 1])
  };
  std::shared_ptr<const Packing> packing_;  // PackSeparate
  ShuffledOrder order_;
};

}  // namespace tg::data
