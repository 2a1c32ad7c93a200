// Checked parsing of numbers written as text (command-line flags, safetensors metadata, launcher
// environment variables): the whole text must be the number, in range for its type, with no
// sign, space or suffix left over ("2abc", "4294967297" as an int, "1e400" are all refused).
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <type_traits>

namespace tg::io {

template <class T>
std::optional<T> parse_integer(std::string_view text) {
  static_assert(std::is_integral_v<T>);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
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

}  // namespace tg::io
