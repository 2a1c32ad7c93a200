// The process's resident memory for the benchmarks that report a peak (load_bench,
// gguf_export_bench): /proc/self/status's fields, and VmHWM reset through /proc/self/clear_refs.
#pragma once

#include <fstream>
#include <string>

namespace tg::bench {

// A field of /proc/self/status in MiB ("VmHWM", "VmRSS"); -1 where there is none.
inline double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;  // kB
  return -1;
}

// Resets VmHWM to the current RSS; false where the kernel does not allow it.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace tg::bench
