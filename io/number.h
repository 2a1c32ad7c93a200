// Checked parsing of numbers written as text (command-line flags, safetensors metadata, checkpoint
// folders, launcher environment variables): the whole text must be the number, in range for its
// type, with no sign, space or suffix left over ("2abc", "4294967297" as an int, "1e400" are all
// refused).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace tg::io {

// base 16: hexadecimal digits, without a "0x".
template <class T>
std::optional<T> parse_integer(std::string_view text, int base = 10) {
  static_assert(std::is_integral_v<T>);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A finite number (no NaN, no infinity).
inline std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// Integers separated by `separator` ("4x512x32000" with 'x'), each as parse_integer reads it.
template <class T>
std::optional<std::vector<T>> parse_integers(std::string_view text, char separator) {
  std::vector<T> values;
  for (size_t at = 0;;) {
    const size_t end = std::min(text.find(separator, at), text.size());
    const std::optional<T> v = parse_integer<T>(text.substr(at, end - at));
    if (!v) return std::nullopt;
    values.push_back(*v);
    if (end == text.size()) return values;
    at = end + 1;
  }
}

// `text` as an integer in [lo, hi], else tg::Error from `op`: "<what>='<text>' is not an integer
// in [lo, hi]", where `what` says which field of which file ("'ckpt/state.safetensors' metadata step").
template <class T>
T checked_integer(std::string_view text, T lo, T hi, const char* op, const std::string& what, int base = 10) {
  const std::optional<T> v = parse_integer<T>(text, base);
  if (!v || *v < lo || *v > hi)
    fail(op, what, "='", std::string(text), "' is not ", base == 16 ? "a hexadecimal integer" : "an integer", " in [",
         lo, ", ", hi, "]");
  return *v;
}

}  // namespace tg::io
