// UTF-8: validity, the repair Python and Rust apply to invalid input, code points and their
// encoding (JSON's \u escapes, the tokenizers, Jinja's strings).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tg::utf8 {

// Length of the longest valid UTF-8 prefix of s (s.size() when all of it is valid).
size_t valid_prefix(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

// s with each maximal invalid subpart replaced by U+FFFD: what Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy give.
std::string repair(std::string_view s);

// Bytes of the character starting with `lead` in valid UTF-8.
inline size_t char_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The code point at s[i]; advances i past it. An invalid or truncated sequence reads as U+FFFD
// over its maximal invalid subpart, as repair() does: never a byte past the end, never another
// character made of the bytes after it.
char32_t next(std::string_view s, size_t& i);

// Where s stops being valid UTF-8, "invalid UTF-8 (byte 0xe2) at byte 5"; "" when it is valid.
std::string invalid_at(std::string_view s);

// Appends the encoding of code point cp.
inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Unicode's White_Space property (Rust's char::is_whitespace, Oniguruma's \s).
bool is_white_space(char32_t cp);

}  // namespace tg::utf8
