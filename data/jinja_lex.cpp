// Jinja2's lexer with transformers' settings (trim_blocks, lstrip_blocks): the source as lines,
// its text, tags, comments, and the tokens inside tags.
#include <algorithm>
#include <cstring>

#include "core/detail/utf8.h"
#include "core/error.h"
#include "data/detail/jinja.h"
#include "data/detail/jinja_lex.h"

namespace tg::data::jinja {
namespace {

bool is_space_at(std::string_view s, size_t i, size_t* len) {
  size_t j = i;
  const char32_t cp = utf8::next(s, j);
  *len = j - i;
  return is_py_space(cp);
}

std::string rstrip(std::string_view s) {  // Python's str.rstrip()
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const bool space = is_space_at(s, i, &n);
    i += n;
    if (!space) end = i;
  }
  return std::string(s.substr(0, end));
}

size_t skip_space(std::string_view s, size_t i) {  // the regex \s*
  size_t n;
  while (i < s.size() && is_space_at(s, i, &n)) i += n;
  return i;
}

// Jinja reads the source as lines: \r\n, \r and Python's other line breaks become \n, and one
// trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view src) {
  std::string out;
  for (size_t i = 0; i < src.size();) {
    const size_t start = i;
    const char32_t cp = utf8::next(src, i);
    if (cp == '\r') {
      if (i < src.size() && src[i] == '\n') ++i;
      out += '\n';
    } else if (cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
      out += '\n';
    } else {
      out.append(src, start, i - start);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// A string literal's body as Python's "unicode-escape" codec reads it.
std::string unescape(std::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) {
      char32_t cp = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = i + k < s.size() ? s[i + k] : 'g';
        if (!std::isxdigit(static_cast<unsigned char>(h))) syntax_error(line, "truncated \\x / \\u escape in a string");
        cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      i += n;
      utf8::append(out, cp);
    };
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': syntax_error(line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; ++k) cp = cp * 8 + static_cast<char32_t>(s[i + k] - '0');
          i += k - 1;
          utf8::append(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::vector<Token> tokens(const std::string& src) {
  std::vector<Token> toks;
  int line = 1;
  size_t pos = 0;
  bool line_starting = true;
  auto advance_to = [&](size_t p) {
    line += static_cast<int>(std::count(src.begin() + static_cast<long>(pos), src.begin() + static_cast<long>(p), '\n'));
    pos = p;
  };
  static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                               "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
  while (pos < src.size()) {
    size_t start = pos;
    for (;;) {
      start = src.find('{', start);
      if (start == std::string::npos || (start + 1 < src.size() && std::strchr("{%#", src[start + 1]))) break;
      ++start;
    }
    if (start == std::string::npos || start + 1 >= src.size()) {
      toks.push_back({Token::Data, src.substr(pos), line});
      break;
    }
    const char kind = src[start + 1];
    const char sign = start + 2 < src.size() && (src[start + 2] == '-' || src[start + 2] == '+') ? src[start + 2] : 0;
    std::string text = src.substr(pos, start - pos);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a block or comment alone on its line
      const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
      if ((l > 0 || line_starting) && std::all_of(text.begin() + static_cast<long>(l), text.end(),
                                                  [](char c) { return c == ' ' || c == '\t'; }))
        text.resize(l);
    }
    if (!text.empty()) toks.push_back({Token::Data, text, line});
    advance_to(start);
    size_t p = start + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      const size_t close = src.find("#}", p);
      if (close == std::string::npos) syntax_error(line, "a comment {# is never closed");
      size_t after = close + 2;
      if (close > p && src[close - 1] == '-') after = skip_space(src, after);
      else if (!(close > p && src[close - 1] == '+') && after < src.size() && src[after] == '\n') ++after;  // trim_blocks
      line_starting = src[after - 1] == '\n';
      advance_to(after);
      continue;
    }
    const bool block = kind == '%';
    toks.push_back({block ? Token::BlockBegin : Token::VarBegin, "", line});
    int depth = 0;
    for (;;) {
      p = skip_space(src, p);
      if (p >= src.size()) syntax_error(line, std::string("unexpected end of template, wanted ") + (block ? "%}" : "}}"));
      const char* close = block ? "%}" : "}}";
      auto at = [&](const char* s) { return src.compare(p, std::strlen(s), s) == 0; };
      if (depth == 0 && (at(block ? "-%}" : "-}}") || at(close) || (block && at("+%}")))) {
        size_t after;
        if (src[p] == '-') after = skip_space(src, p + 3);
        else if (src[p] == '+') after = p + 3;
        else after = p + 2 + (block && p + 2 < src.size() && src[p + 2] == '\n' ? 1 : 0);  // trim_blocks
        advance_to(p);
        toks.push_back({block ? Token::BlockEnd : Token::VarEnd, "", line});
        line_starting = src[after - 1] == '\n';
        advance_to(after);
        break;
      }
      advance_to(p);
      const char c = src[p];
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src.size() && src[q] != c) q += src[q] == '\\' ? 2 : 1;
        if (q >= src.size()) syntax_error(line, "a string literal is never closed");
        toks.push_back({Token::String, unescape(std::string_view(src).substr(p + 1, q - p - 1), line), line});
        p = q + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        bool is_float = false;
        while (q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
        if (q + 1 < src.size() && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) {
          is_float = true;
          for (++q; q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_');) ++q;
        }
        if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
          size_t e = q + 1;
          if (e < src.size() && (src[e] == '+' || src[e] == '-')) ++e;
          if (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) {
            is_float = true;
            for (q = e; q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]));) ++q;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k)
          if (src[k] != '_') num += src[k];
        toks.push_back({is_float ? Token::Float : Token::Int, num, line});
        p = q;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
        toks.push_back({Token::Name, src.substr(p, q - p), line});
        p = q;
      } else {
        const char* op = nullptr;
        for (const char* o : kOps)
          if (at(o)) {
            op = o;
            break;
          }
        if (!op) syntax_error(line, std::string("unexpected character '") + c + "'");
        if (std::strchr("([{", op[0])) ++depth;
        if (std::strchr(")]}", op[0])) --depth;
        toks.push_back({Token::Op, op, line});
        p += std::strlen(op);
      }
    }
  }
  toks.push_back({Token::Eof, "", line});
  return toks;
}

}  // namespace

[[noreturn]] void syntax_error(int line, const std::string& what) { fail("chat template", "line ", line, ": ", what); }

std::vector<Token> lex(std::string_view source) {
  TG_CHECK(utf8::is_valid(source), "chat template", "the template is not valid UTF-8");
  return tokens(normalize_newlines(source));
}

}  // namespace tg::data::jinja
