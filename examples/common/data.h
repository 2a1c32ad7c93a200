// Byte-level text data for the examples: load any text file, or generate one of two small
// synthetic corpora (no download, no licence questions), split it, and draw batches of
// next-token windows.
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"

namespace examples {

// The spec's training batch for a LlamaConfig::by_name config (tiny 8, small 16, bench-135m 8):
// a training setting, not the model's.
int64_t default_batch_size(const std::string& config_name);

// The whole file as bytes; a clear tg::Error when it cannot be read or is empty.
std::string read_text_file(const std::string& path);

// Two corpora of different style, deterministic in `seed`, about `bytes` long:
// "stories": plain prose, short sentences about people and animals;
// "logbook": a ship's log, upper-case stamps, numbers and terse clauses.
std::string generate_corpus(const std::string& style, uint64_t seed, size_t bytes);

class ByteDataset {
 public:
  // The first (1 - val_fraction) of the text trains, the rest validates.
  ByteDataset(std::string text, double val_fraction = 0.1);

  // Random windows of `seq` bytes, ids [batch, seq] int64 on `device`. As with transformers,
  // the ids are also the labels: the loss shifts them (tg::nn::causal_lm_loss).
  tg::Tensor batch(bool train, int64_t batch, int64_t seq, tg::Generator& gen, tg::Device device) const;
  size_t train_bytes() const { return split_; }
  size_t val_bytes() const { return text_.size() - split_; }

 private:
  std::string text_;
  size_t split_;
};

}  // namespace examples
