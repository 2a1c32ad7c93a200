// lora_finetune's data, made before the model loads: --data and --val tokenized (conversations
// rendered with the chat template, so a template that refuses a row fails here), cut into rows of
// --seq tokens, and refused when the cut would leave a dataset nothing (or too little) to learn;
// --show-labels prints rows with what is learned marked.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "examples/common/flags.h"

namespace examples {

// The flags it reads, declared on `flags`: --data --val --val-fraction --doc-separator --layout
// --bytes --truncation-mode --allow-truncation --system-message --show-labels.
void add_data_flags(Flags& flags);

struct TrainingData {
  std::shared_ptr<const tg::data::TokenCorpus> corpus;  // --data's (or the generated one)
  std::optional<tg::data::SequenceDataset> train, val;
  std::string layout;         // pack, pad or pack-separate
  int64_t largest_id = -1;    // of --data and --val: token files are checked against the embedding
};

// Reads, cuts and checks the data (UsageError naming the flag and the way out); `tokenizer` null:
// the toy's bytes. eval_batches x batch rows validate (0: all).
TrainingData load_training_data(const Flags& flags, const std::optional<tg::data::Tokenizer>& tokenizer, int64_t seq,
                                int64_t batch, int64_t eval_batches, int32_t pad_id);

// --show-labels N: the first N training examples as rows see them, learned text between [[ and ]]
// (in colour on a terminal), on stdout.
void show_labels(const TrainingData& data, const std::optional<tg::data::Tokenizer>& tokenizer, int64_t n, int64_t seq,
                 tg::data::Truncation truncation);

tg::data::Truncation truncation_flag(const Flags& flags);

}  // namespace examples
