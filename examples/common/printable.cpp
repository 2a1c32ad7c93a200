#include "examples/common/printable.h"

#include <cstdio>
#include <string_view>

#include "core/detail/utf8.h"

namespace examples {

std::string printable(const std::string& text, bool one_line) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t valid = c >= 0x80 ? tg::utf8::valid_prefix(std::string_view(text).substr(i, 4)) : 0;
    const size_t n = c >= 0x80 ? tg::utf8::char_len(c) : 1;
    if (c >= 0x80 && valid >= n) {  // a whole UTF-8 character
      out.append(text, i, n);
      i += n;
      continue;
    }
    if (!one_line && (c == '\n' || c == '\t' || c == '\\')) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 32 || c >= 127 || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

size_t finished_prefix(const std::string& text) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  size_t end = text.size();
  while (end >= 3 && text.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  if (end < text.size()) return end;
  // The last lead byte within a character's length of the end, and whether its bytes are all there.
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const bool lead = c >= 0xC2 && c <= 0xF4;
    return lead && tg::utf8::char_len(c) > back ? text.size() - back : text.size();
  }
  return text.size();
}

}  // namespace examples
