#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>

#include "core/detail/utf8.h"
#include "core/error.h"
#include "data/detail/jinja.h"
#include "data/detail/jinja_budget.h"
#include "data/detail/jinja_builtins.h"
#include "io/json.h"

namespace tg::data::jinja {

Value::~Value() {
  // Only the last owner of a list or dict frees it. Where its items hold lists or dicts of their
  // own to free, they move to `pending` and are freed here in turn, each emptied first, so that no
  // destructor calls another more than one level deep.
  auto owns_items = [](const Value& v) {
    return (v.list_ && v.list_.use_count() == 1 && !v.list_->empty()) || (v.dict_ && v.dict_.use_count() == 1 && !v.dict_->empty());
  };
  auto nests = [&](const Value& v) {
    if (v.list_ && v.list_.use_count() == 1) return std::any_of(v.list_->begin(), v.list_->end(), owns_items);
    if (v.dict_ && v.dict_.use_count() == 1)
      return std::any_of(v.dict_->begin(), v.dict_->end(), [&](const auto& kv) { return owns_items(kv.second); });
    return false;
  };
  if (!nests(*this)) return;
  std::vector<Value> pending;
  auto take = [&](Value& v) {
    if (v.list_ && v.list_.use_count() == 1) {
      std::move(v.list_->begin(), v.list_->end(), std::back_inserter(pending));
      v.list_->clear();
    }
    if (v.dict_ && v.dict_.use_count() == 1) {
      for (auto& kv : *v.dict_) pending.push_back(std::move(kv.second));
      v.dict_->clear();
    }
  };
  take(*this);
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
    take(v);
  }
}

Value Value::list(List items, bool tuple) {
  Value v = make(Kind::List);
  v.list_ = std::make_shared<List>(std::move(items));
  v.tuple_ = tuple;
  return v;
}

Value Value::dict(Dict items) {
  Value v = make(Kind::Dict);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::namespace_(Dict items) {
  Value v = make(Kind::Namespace);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v = make(Kind::Function);
  v.str_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

Value Value::method(std::string name, Function fn, Value self) {
  Value v = function(std::move(name), std::move(fn));
  v.list_ = std::make_shared<List>(List{std::move(self)});
  return v;
}

Value Value::call(Args& args) const { return (*fn_)(list_ ? list_->front() : Value(), args); }

Value Value::from_json(const json::Value& j) {
  switch (j.type()) {
    case json::Value::Type::Null: return none();
    case json::Value::Type::Bool: return Value(j.as_bool());
    case json::Value::Type::Int: return Value(j.as_int());
    case json::Value::Type::Double: return Value(j.as_double());
    case json::Value::Type::String: return Value(j.as_string());
    case json::Value::Type::Array: {
      List items;
      for (const json::Value& x : j.as_array()) items.push_back(from_json(x));
      return list(std::move(items));
    }
    case json::Value::Type::Object: {
      Dict items;
      for (size_t i = 0; i < j.size(); ++i) items.emplace_back(j.keys()[i], from_json(j.values()[i]));
      return dict(std::move(items));
    }
  }
  return {};
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict && kind_ != Kind::Namespace) return nullptr;
  Budget::steps(1 + static_cast<int64_t>(dict_->size() / 16));
  for (const auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0;
    case Kind::String: return !str_->empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->empty();
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

namespace {

// Python's repr(float): the shortest digits that read back, fixed from 1e-4 to 1e16.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  const int exp = std::stoi(s.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') sign = "-", mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + out + ebuf;
}

// Python's repr(str), appended to `to`: single quotes unless the text has ' and no ".
void str_repr(std::string& to, const std::string& s) {
  Budget::text(s.size());
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t cp = utf8::next(s, i);
    if (cp == '\\' || cp == static_cast<char32_t>(q)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp == 0xad || (cp >= 0x2028 && cp <= 0x2029) || (is_py_space(cp) && cp != ' ')) {
      // Non-printable in Python (separators and most spaces): escaped as \uXXXX.
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s, start, i - start);
    }
  }
  Budget::append(to, out += q);
}

void repr(std::string& out, const Value& v) {
  Budget::steps(1);
  switch (v.kind()) {
    case Value::Kind::String: return str_repr(out, v.as_string());
    case Value::Kind::List: {
      const Nested level;
      Budget::append(out, v.is_tuple() ? "(" : "[");
      for (size_t i = 0; i < v.as_list().size(); ++i) {
        if (i) Budget::append(out, ", ");
        repr(out, v.as_list()[i]);
      }
      Budget::append(out, v.is_tuple() ? (v.as_list().size() == 1 ? ",)" : ")") : "]");
      return;
    }
    case Value::Kind::Dict: {
      const Nested level;
      Budget::append(out, "{");
      for (size_t i = 0; i < v.as_dict().size(); ++i) {
        if (i) Budget::append(out, ", ");
        str_repr(out, v.as_dict()[i].first);
        Budget::append(out, ": ");
        repr(out, v.as_dict()[i].second);
      }
      Budget::append(out, "}");
      return;
    }
    case Value::Kind::Undefined: return Budget::append(out, "Undefined");
    case Value::Kind::None: return Budget::append(out, "None");
    case Value::Kind::Bool: return Budget::append(out, v.as_bool_value() ? "True" : "False");
    case Value::Kind::Int: return Budget::append(out, std::to_string(v.as_int()));
    case Value::Kind::Float: return Budget::append(out, float_repr(v.as_float()));
    case Value::Kind::Namespace: return Budget::append(out, "<Namespace>");
    case Value::Kind::Function: return Budget::append(out, "<function " + v.function_name() + ">");
  }
}

// A JSON string literal as Python's json.dumps(ensure_ascii=False) writes it: io/json's writer.
void json_string(std::string& out, const std::string& s) {
  Budget::text(s.size());
  Budget::append(out, json::dump(json::Value(s)));
}

void json_value(std::string& out, const Value& v, std::optional<int64_t> indent, bool sort_keys, int64_t depth) {
  const Nested level;
  Budget::steps(1);
  auto newline = [&](int64_t d) {
    if (!indent) return;
    int64_t spaces = 0;  // Python indents by no space for indent <= 0, and by far too many for indent=10**12
    if (*indent > 0 && __builtin_mul_overflow(*indent, d, &spaces)) spaces = std::numeric_limits<int64_t>::max();
    Budget::bytes(spaces);
    out += '\n';
    out.append(static_cast<size_t>(spaces), ' ');
  };
  const char* item_sep = indent ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::None: return Budget::append(out, "null");
    case Value::Kind::Bool: return Budget::append(out, v.as_bool_value() ? "true" : "false");
    case Value::Kind::Int: return Budget::append(out, std::to_string(v.as_int()));
    case Value::Kind::Float: {
      const double d = v.as_float();
      return Budget::append(out, std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d));
    }
    case Value::Kind::String: return json_string(out, v.as_string());
    case Value::Kind::List: {
      if (v.as_list().empty()) return Budget::append(out, "[]");
      Budget::append(out, "[");
      for (size_t i = 0; i < v.as_list().size(); ++i) {
        if (i) Budget::append(out, item_sep);
        newline(depth + 1);
        json_value(out, v.as_list()[i], indent, sort_keys, depth + 1);
      }
      newline(depth);
      return Budget::append(out, "]");
    }
    case Value::Kind::Dict: {
      if (v.as_dict().empty()) return Budget::append(out, "{}");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict()) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      Budget::append(out, "{");
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) Budget::append(out, item_sep);
        newline(depth + 1);
        json_string(out, items[i]->first);
        Budget::append(out, ": ");
        json_value(out, items[i]->second, indent, sort_keys, depth + 1);
      }
      newline(depth);
      return Budget::append(out, "}");
    }
    default: fail("chat template", "tojson: Object of type ", v.type_name(), " is not JSON serializable");
  }
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return *str_;
    default: return repr();
  }
}

std::string Value::repr() const {
  std::string out;
  jinja::repr(out, *this);
  return out;
}

bool Value::operator==(const Value& o) const {
  if (is_number() && o.is_number()) return compare(*this, o) == 0;
  if (kind_ != o.kind_) return false;
  const Nested level;
  Budget::steps(1);
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return *str_ == *o.str_;
    case Kind::List: return *list_ == *o.list_;
    case Kind::Dict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const Value* w = o.find(k);
        if (!w || !(v == *w)) return false;
      }
      return true;
    }
    default: return dict_ == o.dict_ && fn_ == o.fn_;  // identity
  }
}

const char* Value::kind_name(Kind k) {
  switch (k) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

std::string to_json(const Value& v, std::optional<int64_t> indent, bool sort_keys) {
  std::string out;
  json_value(out, v, indent, sort_keys, 0);
  return out;
}

bool is_py_space(char32_t cp) { return utf8::is_white_space(cp) || (cp >= 0x1c && cp <= 0x1f); }

}  // namespace tg::data::jinja
