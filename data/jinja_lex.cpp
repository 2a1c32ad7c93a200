// Jinja2's lexer with transformers' settings (trim_blocks, lstrip_blocks): the source as lines,
// its text, tags, comments, and the tokens inside tags.
#include <algorithm>
#include <charconv>
#include <cstring>

#include "core/detail/utf8.h"
#include "core/error.h"
#include "data/detail/jinja.h"
#include "data/detail/jinja_builtins.h"
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
      if (cp > 0x10FFFF) syntax_error(line, "illegal Unicode character: an escape past \\U0010ffff");  // Python's syntax error
      if (cp >= 0xD800 && cp <= 0xDFFF) syntax_error(line, "a lone surrogate escape (\\ud800 to \\udfff), which no UTF-8 text holds");
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

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int digit_value(char c) {  // in base 16 and below; 99 for no digit
  if (is_digit(c)) return c - '0';
  const char lower = static_cast<char>(c | 0x20);
  return lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : 99;
}

size_t digits_at(std::string_view s, size_t i) {  // (\d+_)*\d+ at s[i]: its end, or i
  size_t end = i;
  for (size_t j = i; j < s.size() && is_digit(s[j]);) {
    while (j < s.size() && is_digit(s[j])) ++j;
    end = j;
    if (!(j + 1 < s.size() && s[j] == '_' && is_digit(s[j + 1]))) break;
    ++j;
  }
  return end;
}

// Jinja2's float literal at s[p] (not after a '.'): digits, then a fraction and an exponent, or one
// of them; its end, or p.
size_t float_at(std::string_view s, size_t p) {
  const size_t whole = digits_at(s, p);
  if (whole == p || (p > 0 && s[p - 1] == '.')) return p;
  size_t fraction = whole;
  if (whole < s.size() && s[whole] == '.' && digits_at(s, whole + 1) > whole + 1) fraction = digits_at(s, whole + 1);
  size_t e = fraction;
  if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
    const size_t sign = e + 1 < s.size() && (s[e + 1] == '+' || s[e + 1] == '-') ? e + 2 : e + 1;
    if (const size_t exponent = digits_at(s, sign); exponent > sign) return exponent;
  }
  return fraction > whole ? fraction : p;
}

// Jinja2's integer literal at s[p]: 0b / 0o / 0x and digits of that base (each may follow an
// underscore), a decimal without a leading zero, or zeros; its end. 007 is two of them, as in Jinja2.
size_t integer_at(std::string_view s, size_t p) {
  auto run = [&](size_t j, auto is_part) {  // (_?part)* from s[j]
    for (;;) {
      if (j + 1 < s.size() && s[j] == '_' && is_part(s[j + 1])) j += 2;
      else if (j < s.size() && is_part(s[j])) ++j;
      else return j;
    }
  };
  if (s[p] == '0' && p + 1 < s.size()) {
    const char prefix = static_cast<char>(s[p + 1] | 0x20);
    const int base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : prefix == 'x' ? 16 : 0;
    const size_t end = base ? run(p + 2, [&](char c) { return digit_value(c) < base; }) : p;
    if (end > p + 2) return end;
  }
  if (s[p] != '0') return run(p + 1, is_digit);
  return run(p + 1, [](char c) { return c == '0'; });
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
      } else if (is_digit(c)) {
        const size_t f = float_at(src, p);
        const size_t q = f > p ? f : integer_at(src, p);
        toks.push_back({f > p ? Token::Float : Token::Int, src.substr(p, q - p), line});
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

Value number_value(const Token& t, bool negative) {
  if (t.kind == Token::Float) return Value(*python_float((negative ? "-" : "") + t.text));  // the lexer matched float()'s syntax
  std::string digits;
  for (char c : t.text)
    if (c != '_') digits += c;
  int base = 10;
  size_t from = 0;
  if (digits.size() > 2 && std::isalpha(static_cast<unsigned char>(digits[1]))) {  // 0b, 0o, 0x
    base = (digits[1] | 0x20) == 'b' ? 2 : (digits[1] | 0x20) == 'o' ? 8 : 16;
    from = 2;
  }
  uint64_t magnitude = 0;
  const char* last = digits.data() + digits.size();
  const auto [end, ec] = std::from_chars(digits.data() + from, last, magnitude, base);
  if (ec != std::errc() || end != last || magnitude > (uint64_t{1} << 63) - (negative ? 0 : 1))
    syntax_error(t.line, "the integer " + std::string(negative ? "-" : "") + t.text + " does not fit in 64 bits (Python's int would grow)");
  return Value(static_cast<int64_t>(negative ? 0 - magnitude : magnitude));
}

std::vector<Token> lex(std::string_view source) {
  TG_CHECK(utf8::is_valid(source), "chat template", "the template is not valid UTF-8");
  return tokens(normalize_newlines(source));
}

}  // namespace tg::data::jinja
