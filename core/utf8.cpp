#include "core/detail/utf8.h"

#include <cstdint>
#include <cstdio>

namespace tg::utf8 {
namespace {

// Bytes of the valid sequence at s[i], or 0 with `bad` set to the length of its maximal
// invalid subpart (at least 1): the Unicode standard's "best practice for U+FFFD substitution".
size_t sequence_at(std::string_view s, size_t i, size_t& bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) need = 3, lo = 0xA0;
  else if (c == 0xED) need = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) need = 3;
  else if (c == 0xF0) need = 4, lo = 0x90;
  else if (c == 0xF4) need = 4, hi = 0x8F;  // nothing above U+10FFFF
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else return bad = 1, 0;
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return bad = k, 0;
    const unsigned char x = b(k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return bad = k, 0;
  }
  return need;
}

}  // namespace

size_t valid_prefix(std::string_view s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    // ASCII runs, 8 bytes at a time: most text is mostly ASCII.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const size_t n = sequence_at(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t n = sequence_at(s, i, bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

char32_t next(std::string_view s, size_t& i) {
  size_t bad = 0;
  const size_t n = sequence_at(s, i, bad);
  if (n == 0) {
    i += bad;
    return 0xFFFD;
  }
  const auto c = static_cast<unsigned char>(s[i]);
  char32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

std::string invalid_at(std::string_view s) {
  const size_t at = valid_prefix(s);
  if (at == s.size()) return {};
  char what[32];
  std::snprintf(what, sizeof what, "invalid UTF-8 (byte 0x%02x)", static_cast<unsigned char>(s[at]));
  return what + std::string(" at byte ") + std::to_string(at);
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace tg::utf8
