#include "data/detail/jinja_builtins.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include <utf8proc.h>

#include "core/detail/utf8.h"
#include "data/detail/jinja_budget.h"

namespace tg::data::jinja {
namespace {

std::vector<char32_t> code_points(const std::string& s) {
  Budget::text(s.size());
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(utf8::next(s, i));
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t b = 0, size_t e = SIZE_MAX) {
  std::string out;
  for (size_t i = b; i < std::min(e, cps.size()); ++i) utf8::append(out, cps[i]);
  Budget::bytes(static_cast<int64_t>(out.size()));
  return out;
}

const std::string& want_string(const Value& v, const char* what) {
  if (!v.is_string()) eval_fail(what, " wants a string, got ", describe(v));
  return v.as_string();
}

int64_t want_int(const Value& v, const char* what) {
  if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool) eval_fail(what, " wants an integer, got ", describe(v));
  return v.as_int();
}

}  // namespace

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  if (!chars.is_none() && !chars.is_undefined()) set = code_points(want_string(chars, "strip"));
  auto drop = [&](char32_t c) {
    return chars.is_none() || chars.is_undefined() ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

namespace {

// Python's str.split / rsplit.
Value split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List parts;
  auto part = [&](std::string text) {
    Budget::items(1);
    parts.push_back(Value(std::move(text)));
  };
  if (sep.is_none() || sep.is_undefined()) {
    if (from_right) eval_fail("str.rsplit without a separator is not supported");
    const std::vector<char32_t> cps = code_points(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && is_py_space(cps[e - 1])) --e;
        part(from_code_points(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      part(from_code_points(cps, i, j));
      i = j;
    }
    return Value::list(std::move(parts));
  }
  const std::string& d = want_string(sep, "str.split");
  if (d.empty()) eval_fail("str.split: empty separator");
  Budget::text(s.size());
  Budget::bytes(static_cast<int64_t>(s.size()));  // the parts hold the text once
  if (!from_right) {
    size_t pos = 0;
    for (;;) {
      const size_t hit = maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit ? std::string::npos : s.find(d, pos);
      if (hit == std::string::npos) break;
      part(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    part(s.substr(pos));
    return Value::list(std::move(parts));
  }
  size_t end = s.size();
  while (!(maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
    if (end < d.size()) break;
    const size_t hit = s.rfind(d, end - d.size());
    if (hit == std::string::npos) break;
    part(s.substr(hit + d.size(), end - hit - d.size()));
    end = hit;
  }
  part(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return Value::list(std::move(parts));
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out;
  bool prev_cased = false, first = true;
  for (char32_t c : code_points(s)) {
    const auto cp = static_cast<utf8proc_int32_t>(c);
    char32_t r;
    if (mode == 0) r = static_cast<char32_t>(utf8proc_tolower(cp));
    else if (mode == 1) r = static_cast<char32_t>(utf8proc_toupper(cp));
    else if (mode == 2) r = static_cast<char32_t>(prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
    else r = static_cast<char32_t>(first ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
    const utf8proc_category_t cat = utf8proc_category(cp);
    prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    first = false;
    utf8::append(out, r);
  }
  Budget::bytes(static_cast<int64_t>(out.size()));
  return out;
}

std::string replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string out;
  if (a.empty()) {
    // Python inserts b before every character and at the end.
    const std::vector<char32_t> cps = code_points(s);
    int64_t n = 0;
    for (char32_t c : cps) {
      if (count < 0 || n++ < count) Budget::append(out, b);
      utf8::append(out, c);
    }
    if (count < 0 || n < count) Budget::append(out, b);
    Budget::bytes(static_cast<int64_t>(s.size()));
    return out;
  }
  Budget::text(s.size());
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(a, pos);
    if (hit == std::string::npos) break;
    Budget::append(out, std::string_view(s).substr(pos, hit - pos));
    Budget::append(out, b);
    pos = hit + a.size();
  }
  Budget::append(out, std::string_view(s).substr(pos));
  return out;
}

// The pieces with sep between them, within the render's budget.
std::string join(const List& items, std::string_view sep, const std::function<std::string(const Value&)>& piece) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) Budget::append(out, sep);
    Budget::append(out, piece(items[i]));
  }
  return out;
}

// The character at index i of s (negative: from the end) or nullopt, found by walking only as far
// as it: s[i] in a loop over a long string decoded all of it each time.
std::optional<std::string> char_at(const std::string& s, int64_t i) {
  const uint64_t walk = i >= 0 ? static_cast<uint64_t>(i) : 0 - static_cast<uint64_t>(i);
  size_t at = i >= 0 ? 0 : s.size();
  for (uint64_t k = 0; k < walk; ++k) {
    if (at == (i >= 0 ? s.size() : 0)) return std::nullopt;
    if (i >= 0) utf8::next(s, at);
    else
      while (--at > 0 && (s[at] & 0xC0) == 0x80) {
      }
  }
  Budget::text(i >= 0 ? at : s.size() - at);
  if (at == s.size()) return std::nullopt;
  size_t end = at;
  utf8::next(s, end);
  return s.substr(at, end - at);
}

const Value& keyword(Args& args, const char* name, const Value& fallback) {
  for (const auto& [k, v] : args.keyword)
    if (k == name) return v;
  return fallback;
}

const Value& arg(Args& args, size_t i, const char* name, const Value& fallback) {
  return i < args.positional.size() ? args.positional[i] : keyword(args, name, fallback);
}

void check_arity(const Args& args, size_t most, const std::string& what, std::initializer_list<const char*> keywords = {}) {
  if (args.positional.size() > most) eval_fail(what, " takes at most ", most, " arguments, got ", args.positional.size());
  for (const auto& kv : args.keyword)
    if (std::find_if(keywords.begin(), keywords.end(), [&](const char* k) { return kv.first == k; }) == keywords.end())
      eval_fail(what, " has no argument '", kv.first, "'");
}

Value string_method(const Value& str, const std::string& name) {
  const Value none = Value::none();
  auto bound = [&](const std::string& method, Function fn) { return Value::method(method, std::move(fn), str); };
  if (name == "startswith" || name == "endswith") {
    return bound("str." + name, [name, none](const Value& self, Args& a) {
      const std::string& s = self.as_string();
      check_arity(a, 1, "str." + name);
      const Value& p = arg(a, 0, "", none);
      List options = p.is_tuple() ? p.as_list() : List{p};
      for (const Value& o : options) {
        const std::string& x = want_string(o, ("str." + name).c_str());
        if (name == "startswith" ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                                 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bound("str." + name, [name, none](const Value& self, Args& a) {
      check_arity(a, 1, "str." + name);
      const std::string& s = self.as_string();
      return Value(strip(s, arg(a, 0, "chars", none), name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound("str." + name, [name, none](const Value& self, Args& a) {
      check_arity(a, 2, "str." + name, {"sep", "maxsplit"});
      return split(self.as_string(), arg(a, 0, "sep", none), want_int(arg(a, 1, "maxsplit", Value(-1)), "maxsplit"), name == "rsplit");
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    const int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
    return bound("str." + name, [name, mode](const Value& self, Args& a) {
      check_arity(a, 0, "str." + name);
      return Value(map_case(self.as_string(), mode));
    });
  }
  if (name == "replace") {
    return bound("str.replace", [](const Value& self, Args& a) {
      check_arity(a, 3, "str.replace");
      if (a.positional.size() < 2) eval_fail("str.replace wants (old, new[, count])");
      return Value(replace(self.as_string(), want_string(a.positional[0], "str.replace"), want_string(a.positional[1], "str.replace"),
                           a.positional.size() > 2 ? want_int(a.positional[2], "str.replace") : -1));
    });
  }
  if (name == "find" || name == "count") {
    return bound("str." + name, [name](const Value& self, Args& a) {
      check_arity(a, 1, "str." + name);
      if (a.positional.empty()) eval_fail("str.", name, " wants a substring");
      const std::string& s = self.as_string();
      const std::string& x = want_string(a.positional[0], ("str." + name).c_str());
      Budget::text(s.size());
      if (name == "find") {
        const size_t hit = s.find(x);
        return Value(hit == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, hit)).size()));
      }
      if (x.empty()) return Value(static_cast<int64_t>(code_points(s).size() + 1));
      int64_t n = 0;
      for (size_t pos = s.find(x); pos != std::string::npos; pos = s.find(x, pos + x.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return bound("str.join", [](const Value& self, Args& a) {
      check_arity(a, 1, "str.join");
      const std::string& s = self.as_string();
      if (a.positional.empty()) eval_fail("str.join wants an iterable");
      return Value(join(iterate(a.positional[0]), s, [](const Value& v) { return want_string(v, "str.join"); }));
    });
  }
  static const std::set<std::string> python = {
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isalpha", "isascii",
      "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
      "ljust", "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition",
      "splitlines", "swapcase", "translate", "zfill"};
  if (python.count(name)) eval_fail("str.", name, " is not supported by tapegrad's Jinja subset");
  return Value::undefined("str." + name);
}

Value dict_method(const Value& dict, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::method("dict." + name, [name](const Value& d, Args& a) {
      check_arity(a, 0, "dict." + name);
      Budget::items(static_cast<int64_t>(d.as_dict().size()) * (name == "items" ? 3 : 1));
      List out;
      for (const auto& [k, v] : d.as_dict()) {
        if (name == "items") out.push_back(Value::list({Value(k), v}, true));
        else out.push_back(name == "keys" ? Value(k) : v);
      }
      return Value::list(std::move(out));
    }, dict);
  }
  if (name == "get") {
    return Value::method("dict.get", [](const Value& d, Args& a) {
      check_arity(a, 2, "dict.get");
      if (a.positional.empty()) eval_fail("dict.get wants a key");
      const Value* v = a.positional[0].is_string() ? d.find(a.positional[0].as_string()) : nullptr;
      return v ? *v : a.positional.size() > 1 ? a.positional[1] : Value::none();
    }, dict);
  }
  static const std::set<std::string> python = {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};
  if (python.count(name)) eval_fail("dict.", name, " is not supported (the sandbox forbids changing a dict)");
  return Value();
}

// Python's slice.indices(len) and the slice's length, computed so that no index overflows at
// int64's edges (x[::2**63-1], x[-2**63:]).
struct SliceRange {
  int64_t start, step, count;
  size_t at(int64_t k) const { return static_cast<size_t>(start + k * step); }  // within [0, len)
};
SliceRange slice_range(int64_t len, const Value& start, const Value& stop, const Value& step) {
  auto given = [](const Value& v) { return !v.is_none() && !v.is_undefined(); };
  int64_t s = given(step) ? want_int(step, "slice step") : 1;
  if (s == 0) eval_fail("slice step cannot be zero");
  s = std::max(s, -std::numeric_limits<int64_t>::max());  // as CPython: -s fits, the slice is the same
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t x = want_int(v, "slice index");
    if (x < 0) x += len;
    return s > 0 ? std::clamp<int64_t>(x, 0, len) : std::clamp<int64_t>(x, -1, len - 1);
  };
  const int64_t b = clamp(start, s > 0 ? 0 : len - 1), e = clamp(stop, s > 0 ? len : -1);
  const int64_t count = s > 0 ? (b < e ? (e - b - 1) / s + 1 : 0) : (b > e ? (b - e - 1) / -s + 1 : 0);
  return {b, s, count};
}

std::string bracketed(const Value& key) {  // "[0]": what an undefined subscript looked up
  std::string s = "[";
  s += key.repr();
  return s += "]";
}

}  // namespace

std::string describe(const Value& v) {
  if (v.is_undefined()) return v.undefined_name().empty() ? "an undefined value" : "'" + v.undefined_name() + "' (undefined)";
  return std::string("a ") + v.type_name();
}

Value attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: eval_fail(describe(obj), " has no attribute '", name, "'");
    case Value::Kind::String: return string_method(obj, name);
    case Value::Kind::Dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined(name);
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined(name);
    }
    default: return Value::undefined(name);
  }
}

Value item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: eval_fail(describe(obj), " cannot be subscripted");
    case Value::Kind::List:
    case Value::Kind::String: {
      if (key.kind() != Value::Kind::Int && key.kind() != Value::Kind::Bool)
        return key.is_string() ? attribute(obj, key.as_string()) : Value::undefined(bracketed(key));
      if (obj.is_string()) {
        std::optional<std::string> c = char_at(obj.as_string(), key.as_int());
        return c ? Value(std::move(*c)) : Value::undefined(bracketed(key));
      }
      const int64_t n = length(obj);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(bracketed(key));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (!key.is_string()) return Value::undefined(bracketed(key));
      const Value* v = obj.find(key.as_string());
      if (v) return *v;
      return obj.kind() == Value::Kind::Dict ? attribute(obj, key.as_string()) : Value::undefined(key.as_string());
    }
    default: return Value::undefined(bracketed(key));
  }
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.kind() != Value::Kind::List && !obj.is_string()) eval_fail("cannot slice ", describe(obj));
  if (obj.is_string()) {
    const std::vector<char32_t> cps = code_points(obj.as_string());
    const SliceRange r = slice_range(static_cast<int64_t>(cps.size()), start, stop, step);
    std::string out;
    for (int64_t k = 0; k < r.count; ++k) utf8::append(out, cps[r.at(k)]);
    Budget::bytes(static_cast<int64_t>(out.size()));
    return Value(out);
  }
  const List& xs = obj.as_list();
  const SliceRange r = slice_range(static_cast<int64_t>(xs.size()), start, stop, step);
  Budget::items(r.count);
  List out;
  for (int64_t k = 0; k < r.count; ++k) out.push_back(xs[r.at(k)]);
  return Value::list(std::move(out), obj.is_tuple());
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: Budget::steps(static_cast<int64_t>(v.as_list().size())); return v.as_list();
    case Value::Kind::String: {
      const std::vector<char32_t> cps = code_points(v.as_string());
      Budget::items(static_cast<int64_t>(cps.size()));
      Budget::bytes(static_cast<int64_t>(v.as_string().size()));
      List out;
      for (char32_t c : cps) {
        std::string s;
        utf8::append(s, c);
        out.push_back(Value(s));
      }
      return out;
    }
    case Value::Kind::Dict: {
      Budget::items(static_cast<int64_t>(v.as_dict().size()));
      List out;
      for (const auto& kv : v.as_dict()) out.push_back(Value(kv.first));
      return out;
    }
    default: eval_fail(describe(v), " is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      Budget::text(s.size());
      return std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; });  // bytes that begin a character
    }
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.as_dict().size());
    default: eval_fail(describe(v), " has no length");
  }
}

bool test(const std::string& name, const Value& x, Args& args) {
  using K = Value::Kind;
  auto one = [&]() -> const Value& {
    if (args.positional.size() != 1) eval_fail("the test '", name, "' wants one argument");
    return args.positional[0];
  };
  if (name == "defined") return !x.is_undefined();
  if (name == "undefined") return x.is_undefined();
  if (name == "none") return x.is_none();
  if (name == "boolean") return x.kind() == K::Bool;
  if (name == "true") return x.kind() == K::Bool && x.as_bool_value();
  if (name == "false") return x.kind() == K::Bool && !x.as_bool_value();
  if (name == "integer") return x.kind() == K::Int;
  if (name == "float") return x.kind() == K::Float;
  if (name == "number") return x.is_number();
  if (name == "string") return x.is_string();
  if (name == "mapping") return x.kind() == K::Dict;
  if (name == "iterable") return x.kind() == K::Undefined || x.kind() == K::List || x.is_string() || x.kind() == K::Dict;
  if (name == "sequence") return x.kind() == K::Undefined || x.kind() == K::List || x.is_string() || x.kind() == K::Dict;
  if (name == "callable") return x.kind() == K::Function;
  if (name == "odd" || name == "even") return (python_mod(want_int(x, name.c_str()), 2) != 0) == (name == "odd");
  if (name == "divisibleby") {
    const int64_t d = want_int(one(), "divisibleby");
    if (d == 0) eval_fail("divisibleby 0");
    return python_mod(want_int(x, "divisibleby"), d) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return x == one();
  if (name == "ne" || name == "!=") return !(x == one());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(x, one()) < 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(x, one()) > 0;
  if (name == "le" || name == "<=") return compare(x, one()) <= 0;
  if (name == "ge" || name == ">=") return compare(x, one()) >= 0;
  if (name == "in") {
    const Value& seq = one();
    if (seq.is_string()) {
      Budget::text(seq.as_string().size());
      return x.is_string() && seq.as_string().find(x.as_string()) != std::string::npos;
    }
    if (seq.kind() == K::Dict) return x.is_string() && seq.find(x.as_string());
    for (const Value& v : iterate(seq))
      if (v == x) return true;
    return false;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = x.str();
    return map_case(s, name == "lower" ? 0 : 1) == s && map_case(s, name == "lower" ? 1 : 0) != s;
  }
  if (name == "sameas") {
    const Value& o = one();
    return (x.is_none() && o.is_none()) || (x.kind() == K::Bool && o.kind() == K::Bool && x == o);
  }
  eval_fail("the test '", name, "' is not supported by tapegrad's Jinja subset");
}

Value filter(const std::string& name, const Value& x, Args& args) {
  const Nested level;  // map calls filters by name: xs|map('map', 'map', ...)
  using K = Value::Kind;
  const Value none = Value::none();
  if (name == "trim") {
    check_arity(args, 1, "trim", {"chars"});
    return Value(strip(x.str(), arg(args, 0, "chars", none), true, true));
  }
  if (name == "length" || name == "count") return Value(length(x));
  if (name == "tojson") {
    check_arity(args, 1, "tojson", {"indent", "sort_keys", "ensure_ascii", "separators"});
    const Value& indent = arg(args, 0, "indent", none);
    const Value sort = keyword(args, "sort_keys", Value(false));
    if (keyword(args, "ensure_ascii", Value(false)).truthy()) eval_fail("tojson(ensure_ascii=true) is not supported");
    if (!keyword(args, "separators", none).is_none()) eval_fail("tojson(separators=...) is not supported");
    if (x.is_undefined()) eval_fail("tojson: ", describe(x), " is not JSON serializable");
    if (indent.is_string()) eval_fail("tojson(indent=<a string>) is not supported");
    return Value(to_json(x, indent.is_none() ? std::nullopt : std::optional(want_int(indent, "tojson indent")), sort.truthy()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    check_arity(args, 0, name);
    return Value(map_case(x.str(), name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3));
  }
  if (name == "string") return Value(x.str());
  if (name == "safe") return x;  // no autoescape: markup is plain text
  if (name == "list") {
    List xs = iterate(x);
    Budget::items(static_cast<int64_t>(xs.size()));
    return Value::list(std::move(xs));
  }
  if (name == "items") {
    if (x.is_undefined()) return Value::list({});
    if (x.kind() != K::Dict) eval_fail("items wants a mapping, got ", describe(x));
    Args none_args;
    return attribute(x, "items").call(none_args);
  }
  if (name == "first") {
    const List xs = iterate(x);
    return xs.empty() ? Value::undefined("first") : xs.front();
  }
  if (name == "last") {
    const List xs = iterate(x);
    return xs.empty() ? Value::undefined("last") : xs.back();
  }
  if (name == "reverse") {
    if (x.is_string()) return slice(x, none, none, Value(-1));
    List xs = iterate(x);
    Budget::items(static_cast<int64_t>(xs.size()));
    std::reverse(xs.begin(), xs.end());
    return Value::list(std::move(xs));
  }
  if (name == "join") {
    check_arity(args, 2, "join", {"d", "attribute"});
    const std::string sep = arg(args, 0, "d", Value("")).str();
    const Value& attr = arg(args, 1, "attribute", none);
    return Value(join(iterate(x), sep, [&](const Value& v) { return (attr.is_none() ? v : attribute(v, attr.str())).str(); }));
  }
  if (name == "default" || name == "d") {
    check_arity(args, 2, name, {"default_value", "boolean"});
    const bool boolean = arg(args, 1, "boolean", Value(false)).truthy();
    return x.is_undefined() || (boolean && !x.truthy()) ? arg(args, 0, "default_value", Value("")) : x;
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "selectattr" || name == "select";
    if (!args.keyword.empty()) eval_fail(name, " takes no keyword arguments");
    if (by_attr && args.positional.empty()) eval_fail(name, " wants an attribute name");
    const size_t t = by_attr ? 1 : 0;
    Args targs;
    targs.positional.assign(args.positional.begin() + static_cast<long>(std::min(t + 1, args.positional.size())), args.positional.end());
    List out;
    for (const Value& v : iterate(x)) {
      const Value subject = by_attr ? attribute(v, want_string(args.positional[0], name.c_str())) : v;
      const bool pass = args.positional.size() > t ? test(want_string(args.positional[t], name.c_str()), subject, targs) : subject.truthy();
      if (pass == keep) {
        Budget::items(1);
        out.push_back(v);
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value attr = keyword(args, "attribute", Value());
    if (!attr.is_undefined()) {
      const Value dflt = keyword(args, "default", Value());
      for (const Value& v : iterate(x)) {
        Value a = attribute(v, attr.str());
        Budget::items(1);
        out.push_back(a.is_undefined() && !dflt.is_undefined() ? dflt : a);
      }
      return Value::list(std::move(out));
    }
    if (args.positional.empty()) eval_fail("map wants a filter name or attribute=");
    Budget::items(static_cast<int64_t>(args.positional.size() + args.keyword.size()));
    Args fargs;
    fargs.positional.assign(args.positional.begin() + 1, args.positional.end());
    fargs.keyword = args.keyword;
    for (const Value& v : iterate(x)) {
      Budget::items(1);
      out.push_back(filter(want_string(args.positional[0], "map"), v, fargs));
    }
    return Value::list(std::move(out));
  }
  if (name == "int") {
    check_arity(args, 2, "int", {"default", "base"});
    if (!(arg(args, 1, "base", Value(10)) == Value(10))) eval_fail("int(base=...) is not supported by tapegrad's Jinja subset");
    return to_int(x, arg(args, 0, "default", Value(0)));
  }
  if (name == "abs") return absolute(x);
  if (name == "replace") {
    check_arity(args, 3, "replace", {"count"});
    if (args.positional.size() < 2) eval_fail("replace wants (old, new[, count])");
    const Value& count = arg(args, 2, "count", none);
    return Value(replace(x.str(), args.positional[0].str(), args.positional[1].str(), count.is_none() ? -1 : want_int(count, "replace")));
  }
  eval_fail("the filter '", name, "' is not supported by tapegrad's Jinja subset");
}

std::string strftime(const std::string& format, const std::tm& when) {
  if (format.find('\0') != std::string::npos) eval_fail("strftime_now: the format holds a NUL byte");
  Budget::text(format.size());
  std::string c_format;  // what Python hands the C library: %z and %Z of a naive time are empty
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      c_format += format[i];
      continue;
    }
    const char d = format[++i];
    if (d == 'f') eval_fail("strftime_now: %f (microseconds) is not supported: the time is kept to the second");
    if (d != 'z' && d != 'Z') c_format.append({'%', d});
  }
  // Python's time.strftime: a buffer doubled from 1024 bytes until the text fits, or until it is
  // 256 times the format's size (the text is then empty).
  for (size_t size = 1024;; size *= 2) {
    Budget::bytes(static_cast<int64_t>(size));
    std::string out(size, '\0');
    const size_t n = std::strftime(out.data(), size, c_format.c_str(), &when);
    if (n > 0 || size >= 256 * c_format.size()) return out.substr(0, n);
  }
}

}  // namespace tg::data::jinja
