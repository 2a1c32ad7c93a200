// Preference data as TRL's trainers read it: DPO / CPO / ORPO's pairs {"prompt", "chosen",
// "rejected"} and KTO's unpaired {"prompt", "completion", "label"}, as text or as conversations,
// truncated with DPOConfig's settings and drawn in batches of right-padded rows whose labels are
// -100 but on the completion tokens.
//
//   auto pairs = tg::data::read_preference_jsonl("pairs.jsonl", tok);
//   tg::data::PreferenceDataset train(pairs, {.max_length = 512}, *tok.pad_token_id());
//   tg::data::PreferenceBatch b = train.batch(step, /*batch_size=*/4, /*seed=*/0, device);  // 8 rows
//
// Text rows are encoded as TRL's DPOTrainer encodes them: the prompt alone and prompt + completion
// each with the tokenizer's special tokens (its BOS), the completion's tokens being those after
// the prompt's count, and the tokenizer's EOS text appended to a completion that does not end
// with it. Conversation rows (lists of {"role", "content"}) are rendered with the folder's chat
// template: the prompt with add_generation_prompt, the prompt followed by the completion's
// messages whole, both encoded without special tokens (the template writes them). Where the
// prompt's tokens are not a prefix of the whole's, one warning counts the rows (TextOptions::warn).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "io/json.h"

namespace tg::data {

// TRL's truncation of each prompt + completion (DPOConfig's names and defaults).
struct TruncationOptions {
  int64_t max_length = 1024;          // tokens of prompt + completion; 0: no limit
  // "keep_start": the first max_length tokens (a row whose prompt alone fills them is dropped, as
  // TRL drops it: nothing of its completion would be learned); "keep_end": the last ones.
  std::string truncation_mode = "keep_start";
  int64_t max_prompt_length = 0;      // older TRL's: only the prompt's last tokens; 0: no limit
  int64_t max_completion_length = 0;  // older TRL's: only the completion's first tokens; 0: no limit
  // tg::Error naming the field (and `who`) that is out of range.
  void validate(const char* who) const;
};

struct PreferencePair {
  std::vector<int32_t> prompt, chosen, rejected;
};
struct UnpairedExample {
  std::vector<int32_t> prompt, completion;
  bool label = true;  // desirable (KTO's "label": true) or not
};

// One pair (or example) a line. Errors name the file, the line and the field: a missing or
// mistyped field, an empty completion, chosen equal to rejected (a pair that teaches nothing),
// a "label" that is not true / false, a row of text where the first row was a conversation (or
// the other way), a conversation with no chat template. TRL's rows without "prompt" (the prompt
// inside chosen and rejected) are refused: give the prompt its own field.
std::vector<PreferencePair> read_preference_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                                  const TextOptions& options = {});
std::vector<UnpairedExample> read_unpaired_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                                 const TextOptions& options = {});

// A prompt + completion after truncation: its tokens and how many of them are the prompt's.
struct Completion {
  std::vector<int32_t> ids;
  int64_t prompt_tokens = 0;
  // The completion tokens a causal LM predicts from the tokens before them (all but a first one).
  int64_t predicted() const;
};
// TRL's truncation of prompt + completion; a completion that would keep no predicted token gives
// an empty one (dropped by the datasets).
Completion truncated(std::span<const int32_t> prompt, std::span<const int32_t> completion,
                     const TruncationOptions& options);

// Rows (of `completions`, in this order) right-padded with pad_id to the longest: ids and labels
// [rows, longest] int64, labels the completion's ids and -100 elsewhere.
std::pair<Tensor, Tensor> padded_rows(std::span<const Completion* const> completions, int32_t pad_id, Device device);

struct PreferenceBatch {
  // [2B, T]: the B chosen sequences, then the B rejected ones (TRL's concatenated batch).
  Tensor ids{}, labels{};
  std::vector<int64_t> rows{};               // the pairs, by index in the dataset
  std::vector<int64_t> completion_tokens{};  // [2B]: each row's predicted completion tokens
  int64_t tokens = 0;                        // of the rows, padding left out
};

class PreferenceDataset {
 public:
  PreferenceDataset(std::span<const PreferencePair> pairs, TruncationOptions truncation = {}, int32_t pad_id = 0);

  int64_t rows() const { return static_cast<int64_t>(chosen_.size()); }
  int64_t dropped() const { return dropped_; }  // pairs left out (a prompt filling max_length)
  int64_t longest() const { return longest_; }  // the longest sequence, in tokens
  const Completion& chosen(int64_t i) const { return chosen_.at(static_cast<size_t>(i)); }
  const Completion& rejected(int64_t i) const { return rejected_.at(static_cast<size_t>(i)); }
  // Batch `index` of the seeded shuffled order (data::ShuffledOrder): its pairs, or the batch;
  // or the given pairs.
  std::vector<int64_t> batch_rows(int64_t index, int64_t batch_size, uint64_t seed) const;
  PreferenceBatch batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const;
  PreferenceBatch rows_batch(std::span<const int64_t> rows, Device device) const;
  // The last `fraction` of the pairs, and the pairs before them.
  std::pair<PreferenceDataset, PreferenceDataset> split(double fraction) const;

 private:
  PreferenceDataset() = default;
  std::vector<Completion> chosen_, rejected_;
  int32_t pad_id_ = 0;
  int64_t dropped_ = 0, longest_ = 0;
  ShuffledOrder order_;
};

struct UnpairedBatch {
  Tensor ids{}, labels{};    // [B, T]
  // [B, T']: the KL estimate's mismatched rows, prompt i with the completion of the batch's row
  // i - 1 (the last row's for the first), as TRL's KTO builds them
  Tensor kl_ids{}, kl_labels{};
  std::vector<int64_t> rows{};
  std::vector<bool> desirable{};
  int64_t tokens = 0;  // of the rows (not the KL rows), padding left out
};

class UnpairedPreferenceDataset {
 public:
  UnpairedPreferenceDataset(std::span<const UnpairedExample> examples, TruncationOptions truncation = {},
                            int32_t pad_id = 0);

  int64_t rows() const { return static_cast<int64_t>(sequences_.size()); }
  int64_t dropped() const { return dropped_; }
  int64_t longest() const { return longest_; }
  int64_t desirable() const;  // rows labelled true
  const Completion& sequence(int64_t i) const { return sequences_.at(static_cast<size_t>(i)); }
  bool label(int64_t i) const { return labels_.at(static_cast<size_t>(i)); }
  std::vector<int64_t> batch_rows(int64_t index, int64_t batch_size, uint64_t seed) const;
  UnpairedBatch batch(int64_t index, int64_t batch_size, uint64_t seed, Device device) const;
  UnpairedBatch rows_batch(std::span<const int64_t> rows, Device device) const;
  std::pair<UnpairedPreferenceDataset, UnpairedPreferenceDataset> split(double fraction) const;

 private:
  UnpairedPreferenceDataset() = default;
  std::vector<std::vector<int32_t>> prompts_, completions_;  // as read, for the KL rows
  std::vector<Completion> sequences_;
  std::vector<bool> labels_;
  TruncationOptions truncation_;
  int32_t pad_id_ = 0;
  int64_t dropped_ = 0, longest_ = 0;
  ShuffledOrder order_;
};

// GRPO's prompts: {"prompt": text or conversation, ...} a line, encoded as the pairs' prompts
// above; the row's other fields ("answer", ...) are kept for the reward functions.
struct PromptExample {
  std::vector<int32_t> ids;
  std::string text;  // the prompt as the model sees it (a conversation rendered)
  json::Value row;   // the JSONL object
  std::string where; // "'path' line 3"
};
std::vector<PromptExample> read_prompt_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                             const TextOptions& options = {});

}  // namespace tg::data
