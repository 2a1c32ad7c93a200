// The process's resident memory for the benchmarks that report a peak (load_bench,
// gguf_export_bench): /proc/self/status's fields, and VmHWM reset through /proc/self/clear_refs.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "examples/common/precision.h"

namespace tg::bench {

// A field of /proc/self/status in MiB ("VmHWM", "VmRSS"); -1 where there is none.
inline double status_mib(const std::string& field) {
  const std::optional<int64_t> kib = examples::proc_status_kib(field);
  return kib ? static_cast<double>(*kib) / 1024.0 : -1;
}

// Resets VmHWM to the current RSS; false where the kernel does not allow it.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace tg::bench
