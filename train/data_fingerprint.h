// A fingerprint of a training dataset's rows, kept in each checkpoint: a resume over other data
// (an edited file, another seq or layout) is refused with what changed, instead of continuing
// silently on rows the run never planned for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "io/json.h"

namespace tg::train {

struct DataFingerprint {
  int64_t rows = 0, seq = 0;
  // A hash of the ids and labels of each of up to kSegments equal runs of rows (so a change is
  // located to a range of rows).
  std::vector<uint64_t> segments;
  static constexpr int64_t kSegments = 16;

  json::Value to_json() const;
  // tg::Error naming `source` when the JSON is not a fingerprint.
  static DataFingerprint from_json(const json::Value& v, const std::string& source);
};

// Reads every row once (in order, on the CPU).
DataFingerprint fingerprint(const data::SequenceDataset& dataset);
// The same for any data of `rows` rows of at most `seq` tokens: `values(first, n)` gives the
// numbers of rows [first, first + n) (their ids, labels, ...), hashed in the order given.
DataFingerprint fingerprint_rows(int64_t rows, int64_t seq,
                                 const std::function<std::vector<int64_t>(int64_t first, int64_t n)>& values);

// "" when they match; else what differs: the row count or length, or the row ranges whose tokens
// or labels changed ("rows [0, 8) and [64, 72) differ").
std::string describe_change(const DataFingerprint& then, const DataFingerprint& now);

}  // namespace tg::train
