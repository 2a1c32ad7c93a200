// SequenceDataset::truncation_report: what cutting each example at seq tokens loses.
#include <algorithm>
#include <vector>

#include "data/dataset.h"

namespace tg::data {
namespace {

// Learned tokens of labels[from, to): the first token of an example or of a row is never predicted,
// so callers start at its second.
int64_t learned_in(const std::vector<int32_t>& labels, int64_t from, int64_t to) {
  return std::count_if(labels.begin() + from, labels.begin() + to, [](int32_t l) { return l != kIgnoreIndex; });
}

}  // namespace

TruncationReport SequenceDataset::truncation_report() const {
  TruncationReport r;
  if (layout_ == Layout::Pack) {  // windows of the concatenation: nothing is cut
    constexpr int64_t kChunk = 1 << 20;
    std::vector<int32_t> labels;
    const int64_t end = row_end_ * seq_;
    for (int64_t at = row_begin_ * seq_; at < end; at += kChunk) {
      const int64_t n = std::min(kChunk, end - at);
      labels.resize(static_cast<size_t>(n));
      corpus_->read(at, n, nullptr, labels.data());
      r.learned += std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
    }
    return r;
  }
  std::vector<int64_t> examples;
  if (layout_ == Layout::Pad)
    for (int64_t i = row_begin_; i < row_end_; ++i) examples.push_back(i);
  else
    examples = packing_->examples;
  std::vector<int32_t> labels;
  for (int64_t i : examples) {
    auto [b, e] = corpus_->example(i);
    const int64_t len = e - b;
    labels.resize(static_cast<size_t>(len));
    corpus_->read(b, len, nullptr, labels.data());
    ++r.examples;
    if (len > r.longest) r.longest = len, r.longest_example = i;
    const int64_t all = len > 1 ? learned_in(labels, 1, len) : 0;
    r.learned += all;
    if (len <= seq_) continue;
    ++r.cut;
    const int64_t from = truncation_ == Truncation::KeepEnd ? len - seq_ : 0;
    const int64_t kept = learned_in(labels, from + 1, from + seq_);  // the kept part's first token starts a row
    r.lost += all - kept;
    r.emptied += all > 0 && kept == 0;
  }
  return r;
}

}  // namespace tg::data
