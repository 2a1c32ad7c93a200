// The subset of Jinja2 that Hugging Face chat templates use, rendered as Jinja2 renders it under
// transformers' settings (trim_blocks, lstrip_blocks, loopcontrols, no autoescape, the default
// Undefined): statements if / for (loop.*, else, an if filter, break / continue) / set (names,
// namespace attributes, tuples) / generation (transformers' assistant tracker), expressions with
// Python's semantics (slices, `in`, `~`, comparisons, `a if b else c`), the tests, filters and
// str / dict methods the real templates call. Anything else is a tg::Error naming it when the
// template is parsed or rendered, never a different string; so is a template that nests too deep
// or spends more than its budget (data/detail/jinja_budget.h). Internal to data/: the API is
// Tokenizer::apply_chat_template (data/tokenizer.h).
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/chat_template.h"
#include "io/json.h"

namespace tg::data::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
// self: the value a method was bound to (str.split's string), undefined for a plain function.
using Function = std::function<Value(const Value& self, Args&)>;

// A Python value as a template sees it. Lists and dicts are immutable and shared; a namespace()
// is the one mutable object (assigned through `set ns.x = ...`).
class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };

  Value() = default;  // undefined
  // Frees nested lists and dicts one at a time, not recursively: a template can nest a list a
  // million levels deep in a loop.
  ~Value();
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  static Value undefined(std::string name) {  // an undefined value that remembers what was looked up
    Value v;
    v.str_ = std::make_shared<const std::string>(std::move(name));
    return v;
  }
  const std::string& undefined_name() const;  // "" when unknown
  static Value none() { return make(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d) : kind_(Kind::Float), float_(d) {}
  Value(std::string s) : kind_(Kind::String), str_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items, bool tuple = false);
  static Value dict(Dict items);
  static Value namespace_(Dict items);
  static Value function(std::string name, Function fn);
  // fn bound to self, which the value holds rather than fn's captures, where the destructor could
  // not reach it.
  static Value method(std::string name, Function fn, Value self);
  static Value from_json(const json::Value& v);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }

  bool as_bool_value() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // Int or Bool
  double as_float() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *str_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }  // Dict or Namespace
  Dict& namespace_items() const { return *dict_; }
  const std::string& function_name() const { return *str_; }
  Value call(Args& args) const;

  const Value* find(std::string_view key) const;  // a Dict's or Namespace's member

  bool truthy() const;                 // Python's bool(x); undefined is false
  std::string str() const;             // Python's str(x); undefined is ""
  std::string repr() const;            // Python's repr(x)
  bool operator==(const Value& o) const;  // Python's ==
  static const char* kind_name(Kind k);   // "str", "list", ... as Python names the types
  const char* type_name() const { return kind_name(kind_); }

 private:
  static Value make(Kind k) {
    Value v;
    v.kind_ = k;
    return v;
  }
  Kind kind_ = Kind::Undefined;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> str_;  // String; a Function's name
  std::shared_ptr<List> list_;              // List; a Function's self (one item)
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
// (separators ", " / ": ", or "," / ": " with an indent; an indent <= 0 breaks lines unindented).
std::string to_json(const Value& v, std::optional<int64_t> indent = std::nullopt, bool sort_keys = false);

// transformers' strftime_now: Python's datetime.strftime of a naive now() (%z and %Z empty; %f, the
// microseconds, refused: `when` is kept to the second) over the C library's strftime, as long as
// the text is.
std::string strftime(const std::string& format, const std::tm& when);

// Python's str.isspace for one code point.
bool is_py_space(char32_t cp);

struct Node;

// A template's {% generation %} blocks: none, only empty ones (which mark no assistant token), or
// some that hold something.
enum class GenerationBlocks { None, Empty, Marking };

// A parsed template; render may be called from many threads at once.
class Template {
 public:
  // tg::Error naming the line for a syntax error or a construct the subset lacks.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // The output for these variables. generation: where set, receives the [begin, end) byte
  // offsets of each {% generation %} block's output (transformers' assistant masks).
  std::string render(const Dict& variables, const ChatTemplateLimits& limits,
                     std::vector<std::pair<size_t, size_t>>* generation = nullptr) const;
  GenerationBlocks generation_blocks() const { return generation_; }

 private:
  std::unique_ptr<Node> root_;
  GenerationBlocks generation_ = GenerationBlocks::None;
};

}  // namespace tg::data::jinja
