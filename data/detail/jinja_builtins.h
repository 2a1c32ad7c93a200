// What a template's values can do (data/detail/jinja.h): attributes and methods, subscripts and
// slices, iteration, and the filters and tests. Internal to data/jinja*.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
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

// Python's str.strip / lstrip / rstrip (chars None: whitespace).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);

// Python's operators (data/jinja_operators.cpp), with int64 and double for int and float: an
// EvalError where Python's int would outgrow int64, never a wrapped value, a float or SIGFPE.
bool is_int(const Value& v);                                           // an int or a bool
Value arithmetic(const std::string& op, const Value& a, const Value& b);  // + - * / // % **
Value negate(const Value& x);                                          // -x
Value absolute(const Value& x);                                        // abs(x)
int64_t python_mod(int64_t x, int64_t y);                              // x % y (y != 0), the sign of y
// Jinja2's int filter: int(x), else int(float(x)) of a string, else `fallback` where both raise.
Value to_int(const Value& x, const Value& fallback);
// Python's float(text) of a template's literal or a string: nullopt where float() raises.
std::optional<double> python_float(std::string_view text);
// Numbers (an int against a float exactly, nan unordered) or strings, as Python orders them.
std::partial_ordering compare(const Value& a, const Value& b);

}  // namespace tg::data::jinja
