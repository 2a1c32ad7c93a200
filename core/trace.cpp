#include "core/trace.h"

#include <algorithm>

namespace tg {
namespace {
thread_local KernelTrace* current = nullptr;
}

KernelTrace::KernelTrace() : outer_(current) { current = this; }
KernelTrace::~KernelTrace() { current = outer_; }

bool KernelTrace::contains(std::string_view event) const { return count(event) > 0; }

size_t KernelTrace::count(std::string_view event) const {
  return static_cast<size_t>(std::count(events_.begin(), events_.end(), event));
}

std::string KernelTrace::str() const {
  std::string s;
  for (const auto& e : events_) s += e + "\n";
  return s;
}

void KernelTrace::record(std::string_view event) {
  if (current) current->events_.emplace_back(event);
}

bool KernelTrace::active() { return current != nullptr; }

}  // namespace tg
