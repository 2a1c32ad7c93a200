#include "io/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/error.h"
#include "core/detail/utf8.h"

namespace tg::json {

// ---------------------------------------------------------------- Value

Value Value::array(std::vector<Value> items) {
  Value v;
  v.type_ = Type::Array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object() {
  Value v;
  v.type_ = Type::Object;
  return v;
}

const char* Value::type_name(Type t) {
  switch (t) {
    case Type::Null: return "null";
    case Type::Bool: return "bool";
    case Type::Int: return "integer";
    case Type::Double: return "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_type(std::string_view what, Value::Type got, const char* want) {
  fail("json", std::string(what), " is a ", Value::type_name(got), ", wants a ", want);
}
}  // namespace

bool Value::as_bool(std::string_view what) const {
  if (type_ != Type::Bool) wrong_type(what, type_, "bool");
  return bool_;
}

double Value::as_double(std::string_view what) const {
  if (type_ == Type::Int) return static_cast<double>(int_);
  if (type_ != Type::Double) wrong_type(what, type_, "number");
  return double_;
}

int64_t Value::as_int(std::string_view what) const {
  if (type_ == Type::Int) return int_;
  if (type_ == Type::Double && std::trunc(double_) == double_ && std::abs(double_) < 9.0e15)
    return static_cast<int64_t>(double_);
  if (type_ == Type::Double) fail("json", std::string(what), " is ", double_, ", wants an integer");
  wrong_type(what, type_, "integer");
}

const std::string& Value::as_string(std::string_view what) const {
  if (type_ != Type::String) wrong_type(what, type_, "string");
  return str_;
}

const std::vector<Value>& Value::as_array(std::string_view what) const {
  if (type_ != Type::Array) wrong_type(what, type_, "array");
  return items_;
}

size_t Value::size() const { return items_.size(); }

const Value* Value::find(std::string_view key) const {
  if (type_ != Type::Object) return nullptr;
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items_[it->second];
  }
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  if (type_ != Type::Object) wrong_type("value", type_, "object");
  const Value* v = find(key);
  TG_CHECK(v != nullptr, "json", "missing key \"", std::string(key), "\"");
  return *v;
}

Value& Value::set(const std::string& key, Value v) {
  if (type_ == Type::Null) type_ = Type::Object;
  if (type_ != Type::Object) wrong_type("value", type_, "object");
  if (const Value* old = find(key)) {
    items_[static_cast<size_t>(old - items_.data())] = std::move(v);
    return *this;
  }
  keys_.push_back(key);
  items_.push_back(std::move(v));
  if (!index_.empty()) {
    index_.emplace(key, keys_.size() - 1);
  } else if (keys_.size() == kIndexFrom) {
    for (size_t i = 0; i < keys_.size(); ++i) index_.emplace(keys_[i], i);
  }
  return *this;
}

Value& Value::push_back(Value v) {
  if (type_ == Type::Null) type_ = Type::Array;
  if (type_ != Type::Array) wrong_type("value", type_, "array");
  items_.push_back(std::move(v));
  return *this;
}

// ---------------------------------------------------------------- parser

namespace {

// Deep nesting is the one way a small input could exhaust the stack; nothing we read needs more.
constexpr int kMaxDepth = 64;

}  // namespace

namespace detail {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail("json", what, " at byte ", pos_);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }

  bool consume_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) error("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos_ >= s_.size()) error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Value(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (consume_literal("true")) return Value(true);
    if (consume_literal("false")) return Value(false);
    if (consume_literal("null")) return Value();
    error("unexpected character");
  }

  Value parse_object(int depth) {
    expect('{');
    Value obj = Value::object();
    std::unordered_set<std::string> seen;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return obj;
    }
    while (true) {
      skip_ws();
      if (peek() != '"') error("expected a string key");
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        error("duplicate key \"" + key + "\"");
      }
      skip_ws();
      expect(':');
      skip_ws();
      obj.keys_.push_back(std::move(key));
      obj.items_.push_back(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return obj;
    }
  }

  Value parse_array(int depth) {
    expect('[');
    Value arr = Value::array();
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return arr;
    }
    while (true) {
      skip_ws();
      arr.push_back(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return arr;
    }
  }

  unsigned parse_hex4() {
    if (s_.size() - pos_ < 4) error("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return v;
  }



  // One multi-byte UTF-8 character, checked (JSON text is UTF-8: a string that is not would
  // reach code that trusts its lengths, e.g. a tokenizer's vocabulary).
  void append_utf8_sequence(std::string& out) {
    const auto at = [&](size_t i) { return pos_ + i < s_.size() ? static_cast<unsigned char>(s_[pos_ + i]) : 0u; };
    const unsigned lead = at(0);
    // Unicode's well-formed sequences: no overlong forms, no surrogates, nothing above U+10FFFF.
    const size_t n = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (n == 0) error("invalid UTF-8 in string");
    const unsigned lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    if (at(1) < lo || at(1) > hi) error("invalid UTF-8 in string");
    for (size_t i = 2; i < n; ++i)
      if ((at(i) & 0xC0) != 0x80) error("invalid UTF-8 in string");
    out.append(s_.data() + pos_, n);
    pos_ += n;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return out;
      if (c < 0x20) {
        --pos_;
        error("control character in string");
      }
      if (c >= 0x80) {
        --pos_;
        append_utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair encodes one code point
            if (!consume_literal("\\u")) error("unpaired surrogate in \\u escape");
            unsigned lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("unpaired surrogate in \\u escape");
          }
          utf8::append(out, static_cast<char32_t>(cp));
          break;
        }
        default: --pos_; error("bad escape character");
      }
    }
  }

  Value parse_number() {
    size_t start = pos_;
    bool is_integer = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      error("bad number");
    }
    if (peek() == '.') {
      is_integer = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) error("bad number: digits must follow '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      is_integer = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) error("bad number: digits must follow the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (is_integer) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && p == last) return Value(v);
      // Too large for int64: fall through to a double.
    }
    double d = 0;
    auto [p, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || p != last || !std::isfinite(d)) {
      pos_ = start;
      error("number out of range");
    }
    return Value(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace detail

namespace {

// ---------------------------------------------------------------- writer

void dump_string(std::string& out, const std::string& s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void dump_double(std::string& out, double d) {
  TG_CHECK(std::isfinite(d), "json", "cannot write ", d, ": JSON has no NaN or infinity");
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), d);  // shortest text that round-trips
  std::string s(buf, p);
  // Keep it a float when read back (Python writes 0.0, not 0).
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  out += s;
}

void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * level), ' ');
}

void dump_value(std::string& out, const Value& v, int indent, bool sort_keys, int level) {
  switch (v.type()) {
    case Value::Type::Null: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Double: dump_double(out, v.as_double()); return;
    case Value::Type::String: dump_string(out, v.as_string()); return;
    case Value::Type::Array: {
      const auto& items = v.as_array();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, level + 1);
        dump_value(out, items[i], indent, sort_keys, level + 1);
      }
      newline(out, indent, level);
      out += ']';
      return;
    }
    case Value::Type::Object: {
      if (v.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<size_t> order(v.size());
      std::iota(order.begin(), order.end(), 0);
      if (sort_keys)
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v.keys()[a] < v.keys()[b]; });
      out += '{';
      for (size_t n = 0; n < order.size(); ++n) {
        if (n) out += ',';
        newline(out, indent, level + 1);
        dump_string(out, v.keys()[order[n]]);
        out += indent < 0 ? ":" : ": ";
        dump_value(out, v.values()[order[n]], indent, sort_keys, level + 1);
      }
      newline(out, indent, level);
      out += '}';
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text) { return detail::Parser(text).parse_document(); }

std::string dump(const Value& v, int indent, bool sort_keys) {
  std::string out;
  dump_value(out, v, indent, sort_keys, 0);
  return out;
}

}  // namespace tg::json
