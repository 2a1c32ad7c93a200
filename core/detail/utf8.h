// UTF-8 for the tokenizers: validity, the repair Python and Rust apply to invalid input, and
// code points.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tg::data::utf8 {

// Length of the longest valid UTF-8 prefix of s (s.size() when all of it is valid).
size_t valid_prefix(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

// s with each maximal invalid subpart replaced by U+FFFD: what Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy give.
std::string repair(std::string_view s);

// Bytes of the character starting with `lead` in valid UTF-8.
inline size_t char_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The code point at s[i] of valid UTF-8; advances i past it.
char32_t next(std::string_view s, size_t& i);  // (encoding: tg::append_utf8, core/utf8.h)

// Unicode's White_Space property (Rust's char::is_whitespace, Oniguruma's \s).
bool is_white_space(char32_t cp);

}  // namespace tg::data::utf8
