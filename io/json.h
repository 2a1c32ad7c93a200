// A small JSON value, parser and writer (safetensors headers, adapter_config.json, optimizer
// metadata): objects keep insertion order, integers stay exact int64 (docs/api.md).
//
//   tg::json::Value cfg = tg::json::Value::object();
//   cfg.set("r", 8).set("target_modules", tg::json::Value::array({"q_proj", "v_proj"}));
//   std::string text = tg::json::dump(cfg, 2);
//   tg::json::Value back = tg::json::parse(text);   // throws tg::Error on bad input
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tg::json {

namespace detail {
class Parser;
}

class Value {
 public:
  enum class Type { Null, Bool, Int, Double, String, Array, Object };

  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : type_(Type::Bool), bool_(b) {}
  Value(int v) : type_(Type::Int), int_(v) {}
  Value(int64_t v) : type_(Type::Int), int_(v) {}
  Value(double v) : type_(Type::Double), double_(v) {}
  Value(std::string s) : type_(Type::String), str_(std::move(s)) {}
  Value(const char* s) : type_(Type::String), str_(s) {}
  static Value array(std::vector<Value> items = {});
  static Value object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Double; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed access; a wrong type throws tg::Error naming `what`.
  bool as_bool(std::string_view what = "value") const;
  double as_double(std::string_view what = "value") const;
  int64_t as_int(std::string_view what = "value") const;  // exact integers only
  const std::string& as_string(std::string_view what = "value") const;
  const std::vector<Value>& as_array(std::string_view what = "value") const;

  // Objects.
  size_t size() const;  // elements of an array, members of an object
  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<Value>& values() const { return items_; }
  const Value* find(std::string_view key) const;
  const Value& at(std::string_view key) const;  // throws when missing
  Value& set(const std::string& key, Value v);   // replaces or appends; returns *this
  Value& push_back(Value v);                     // arrays; returns *this

  static const char* type_name(Type t);

 private:
  friend class detail::Parser;  // appends members it has checked itself (a tokenizer.json vocabulary: 10^5 keys)
  Type type_ = Type::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string str_;
  std::vector<Value> items_;       // array elements or object values
  std::vector<std::string> keys_;  // object keys, parallel to items_
  // Key -> position, built once an object has kIndexFrom members (a scan is faster below).
  std::unordered_map<std::string, size_t> index_;
  static constexpr size_t kIndexFrom = 16;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors name the byte offset.
Value parse(std::string_view text);
// indent < 0: compact, one line. sort_keys orders object members by key (like Python's json).
std::string dump(const Value& v, int indent = -1, bool sort_keys = false);

}  // namespace tg::json
