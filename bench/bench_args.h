// The hand-parsed flags of the CUDA benchmarks (--reps N, --shape ROWSxDIM), checked through
// io/number.h: a value that is not wholly a number in range is a usage error (exit 2).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "io/number.h"

namespace tg::bench {

// `text`, the value of `flag`, as an integer in [1, max].
inline int positive_arg(const char* flag, const std::string& text, int max = 1 << 20) {
  const std::optional<int> v = io::parse_integer<int>(text);
  if (v && *v >= 1 && *v <= max) return *v;
  std::fprintf(stderr, "%s wants an integer in [1, %d], got '%s'\n", flag, max, text.c_str());
  std::exit(2);
}

}  // namespace tg::bench
