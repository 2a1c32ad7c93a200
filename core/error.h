// tg::Error: the one exception type tapegrad throws. Messages name the op, what it got and
// what it wanted, e.g. "linear: x has 5 features, weight wants 4 (x [2, 5], weight [3, 4])".
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Shapes print as [2, 3]; everything else through its own operator<<.
inline std::string to_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
template <class T>
const T& to_text(const T& v) {
  return v;
}

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << to_text(args));
  return os.str();
}

}  // namespace detail

// Names for an error message: all of them when few, else the first `shown` and how many more
// ("a, b, c, ... and 290 more"), so a model that misses every tensor does not print kilobytes.
inline std::string name_list(const std::vector<std::string>& names, size_t shown = 6) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ... and " + std::to_string(names.size() - shown) + " more";
  return s;
}

// Throws tg::Error("<op>: <message pieces>").
template <class... Args>
[[noreturn]] void fail(const char* op, const Args&... args) {
  throw Error(detail::cat(op, ": ", args...));
}

}  // namespace tg

// TG_CHECK(cond, "op", "what went wrong, got ", x, ", wants ", y);
#define TG_CHECK(cond, op, ...)            \
  do {                                     \
    if (!(cond)) ::tg::fail(op, __VA_ARGS__); \
  } while (0)
