#include "train/data_fingerprint.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "io/number.h"

namespace tg::train {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

void mix(uint64_t& h, int64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((static_cast<uint64_t>(v) >> (8 * i)) & 0xff)) * kFnvPrime;
}

int64_t segment_begin(int64_t rows, size_t count, size_t i) {
  return rows * static_cast<int64_t>(i) / static_cast<int64_t>(count);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

json::Value DataFingerprint::to_json() const {
  json::Value segs = json::Value::array();
  for (uint64_t s : segments) segs.push_back(hex(s));
  json::Value v = json::Value::object();
  v.set("rows", rows).set("seq", seq).set("segments", segs);
  return v;
}

DataFingerprint DataFingerprint::from_json(const json::Value& v, const std::string& source) {
  TG_CHECK(v.is_object() && v.find("rows") && v.find("seq") && v.find("segments"), "DataFingerprint", "'", source,
           "' holds no data fingerprint (rows, seq, segments)");
  const std::string what = "'" + source + "' data_fingerprint ";
  try {
    DataFingerprint f{v.at("rows").as_int("rows"), v.at("seq").as_int("seq"), {}};
    for (const json::Value& s : v.at("segments").as_array("segments"))
      f.segments.push_back(io::checked_integer<uint64_t>(s.as_string("segment"), 0, UINT64_MAX, "DataFingerprint",
                                                         what + "segment", 16));
    return f;
  } catch (const Error& e) {
    if (std::string(e.what()).find(source) != std::string::npos) throw;
    fail("DataFingerprint", what, e.what());
  }
}

DataFingerprint fingerprint_rows(int64_t rows, int64_t seq,
                                 const std::function<std::vector<int64_t>(int64_t first, int64_t n)>& values) {
  DataFingerprint f{rows, seq, {}};
  const size_t count = static_cast<size_t>(std::min(DataFingerprint::kSegments, f.rows));
  constexpr int64_t kChunk = 256;  // rows read at once
  for (size_t s = 0; s < count; ++s) {
    uint64_t h = kFnvOffset;
    const int64_t end = segment_begin(f.rows, count, s + 1);
    for (int64_t first = segment_begin(f.rows, count, s); first < end; first += kChunk)
      for (int64_t v : values(first, std::min(kChunk, end - first))) mix(h, v);
    f.segments.push_back(h);
  }
  return f;
}

DataFingerprint fingerprint(const data::SequenceDataset& dataset) {
  return fingerprint_rows(dataset.rows(), dataset.seq(), [&](int64_t first, int64_t n) {
    const data::Batch b = dataset.rows_batch(first, n, Device::cpu());
    std::vector<int64_t> v = b.ids.to_vector<int64_t>();
    for (int64_t label : b.labels.to_vector<int64_t>()) v.push_back(label);
    if (b.position_ids.defined())  // where the documents of packed rows start
      for (int64_t p : b.position_ids.to_vector<int64_t>()) v.push_back(p);
    return v;
  });
}

std::string describe_change(const DataFingerprint& then, const DataFingerprint& now) {
  auto shape = [](const DataFingerprint& f) {
    return std::to_string(f.rows) + " rows of " + std::to_string(f.seq) + " tokens";
  };
  if (then.rows != now.rows || then.seq != now.seq) return shape(then) + " then, " + shape(now) + " now";
  std::string ranges;
  size_t changed = 0;
  for (size_t s = 0; s < then.segments.size() && s < now.segments.size(); ++s) {
    if (then.segments[s] == now.segments[s]) continue;
    ++changed;
    if (changed <= 4)
      ranges += std::string(ranges.empty() ? "" : ", ") + "[" +
                std::to_string(segment_begin(now.rows, now.segments.size(), s)) + ", " +
                std::to_string(segment_begin(now.rows, now.segments.size(), s + 1)) + ")";
  }
  if (changed == 0) return "";
  return "the same " + shape(now) + ", but the tokens or labels of rows " + ranges +
         (changed > 4 ? " and " + std::to_string(changed - 4) + " more ranges" : "") + " differ";
}

}  // namespace tg::train
