// KernelTrace: records, while alive, which backward variants and kernels ran on this thread,
// so tests and users can see that a frozen weight took the pruned path:
//   tg::KernelTrace trace;  loss.backward();
//   trace.contains("linear.dweight_gemm")  // false when the weight is frozen
// Recording costs one thread-local pointer test when no trace is alive.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tg {

class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  const std::vector<std::string>& events() const { return events_; }
  bool contains(std::string_view event) const;
  size_t count(std::string_view event) const;
  std::string str() const;  // one event per line

  // Adds an event to the innermost live trace, if any.
  static void record(std::string_view event);
  static bool active();

 private:
  std::vector<std::string> events_;
  KernelTrace* outer_;
};

}  // namespace tg
