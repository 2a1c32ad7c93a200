// What a template's values can do (data/detail/jinja.h): attributes and methods, subscripts and
// slices, iteration, and the filters and tests. Internal to data/jinja*.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/detail/jinja.h"

namespace tg::data::jinja {

// Thrown by the builtins; the evaluator adds the template line.
struct EvalError {
  std::string message;
};
template <class... A>
[[noreturn]] void eval_fail(const A&... parts) {
  throw EvalError{tg::detail::cat(parts...)};
}

// The way Jinja names a value in an error: "'x' is undefined", "a NoneType".
std::string describe(const Value& v);

Value attribute(const Value& obj, const std::string& name);  // obj.name (a method, bound, or a member)
Value item(const Value& obj, const Value& key);              // obj[key]
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
List iterate(const Value& v);  // for x in v
int64_t length(const Value& v);

// Filters and tests by name; tg::Error (EvalError) naming one the subset lacks.
Value filter(const std::string& name, const Value& x, Args& args);
bool test(const std::string& name, const Value& x, Args& args);

// Python's <, for sorting and comparisons.
bool less(const Value& a, const Value& b);

}  // namespace tg::data::jinja
