// Python's operators on a template's values, with int64 and double for Python's int and float:
// what Python gives wherever those hold it, an EvalError naming the operation where Python's int
// would outgrow int64 (never a wrapped value, a float in its place, or SIGFPE).
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <compare>
#include <limits>

#include "core/detail/utf8.h"
#include "data/detail/jinja_budget.h"
#include "data/detail/jinja_builtins.h"
#include "io/number.h"

namespace tg::data::jinja {
namespace {

[[noreturn]] void overflow(int64_t x, const char* op, int64_t y) {
  eval_fail("integer overflow: ", x, " ", op, " ", y, " is outside int64 (Python's int would grow)");
}

// x / y correctly rounded, as Python divides ints: a double of each would round twice past 2^53.
double true_divide(int64_t x, int64_t y) {
  const bool negative = (x < 0) != (y < 0);
  const uint64_t a = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const uint64_t b = y < 0 ? 0 - static_cast<uint64_t>(y) : static_cast<uint64_t>(y);
  if (a == 0) return negative ? -0.0 : 0.0;
  // a shifted to bit 127 over b leaves a quotient of at least 63 bits; a remainder sets its last
  // bit, below the rounding position, so that the one rounding to double is the right one.
  const int shift = __builtin_clzll(a) + 64;
  const unsigned __int128 n = static_cast<unsigned __int128>(a) << shift;
  const unsigned __int128 q = (n / b) | (n % b != 0 ? 1 : 0);
  const double r = std::ldexp(static_cast<double>(q), -shift);
  return negative ? -r : r;
}

int64_t int_power(int64_t x, int64_t y) {  // y >= 0, by squaring: 1 ** 10**18 takes 60 steps
  int64_t result = 1, base = x;
  for (int64_t e = y;; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow(x, "**", y);
    if (e <= 1) return result;
    if (__builtin_mul_overflow(base, base, &base)) overflow(x, "**", y);
  }
}

// Python's float ** float, which raises where C's pow returns inf, nan or a pole.
double float_power(double x, double y) {
  if (x == 0 && y < 0) eval_fail("0.0 cannot be raised to a negative power");
  if (x < 0 && std::isfinite(x) && std::isfinite(y) && y != std::floor(y))
    eval_fail("a negative number to a fractional power is a complex number in Python, which templates lack");
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
    eval_fail(Value(x).repr(), " ** ", Value(y).repr(), ": the result is out of range");
  return r;
}

Value int_arithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool overflowed = op == "+"   ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                          : op == "*" ? __builtin_mul_overflow(x, y, &r)
                                      : false;
  if (overflowed) overflow(x, op.c_str(), y);
  if (op == "+" || op == "-" || op == "*") return Value(r);
  if (op == "/") {
    if (y == 0) eval_fail("division by zero");
    return Value(true_divide(x, y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) eval_fail("integer division or modulo by zero");
    if (op == "//" && x == std::numeric_limits<int64_t>::min() && y == -1) overflow(x, "//", y);
    if (op == "%") return Value(python_mod(x, y));
    const int64_t q = x / y;  // toward zero; x - x % y could overflow
    return Value(x % y != 0 && (x % y < 0) != (y < 0) ? q - 1 : q);
  }
  if (y < 0) return Value(float_power(static_cast<double>(x), static_cast<double>(y)));  // 2 ** -1 is 0.5
  return Value(int_power(x, y));
}

Value float_arithmetic(const std::string& op, double x, double y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(float_power(x, y));
  if (op == "/") {
    if (y == 0) eval_fail("float division by zero");
    return Value(x / y);
  }
  if (y == 0) eval_fail(op == "//" ? "float floor division by zero" : "float modulo by zero");
  // Python's divmod: fmod's remainder takes the divisor's sign, the quotient is rounded from (x - mod) / y.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y, div -= 1;
  } else {
    mod = std::copysign(0.0, y);
  }
  if (op == "%") return Value(mod);
  if (div == 0) return Value(std::copysign(0.0, x / y));
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1;
  return Value(floor_div);
}

// An int against a float exactly, as Python compares them: no rounding of the int to a double.
std::partial_ordering compare_int_float(int64_t i, double d) {
  if (std::isnan(d)) return std::partial_ordering::unordered;
  if (d >= 0x1p63) return std::partial_ordering::less;
  if (d < -0x1p63) return std::partial_ordering::greater;
  const double whole = std::trunc(d);
  const auto t = static_cast<int64_t>(whole);
  if (i != t) return i <=> t;
  return 0.0 <=> d - whole;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A Python digitpart from s[i] (digits, single underscores between them) appended to `out`; its end.
size_t digit_part(std::string_view s, size_t i, std::string& out) {
  while (i < s.size() && is_digit(s[i])) {
    out += s[i++];
    if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) ++i;
  }
  return i;
}

// Python's int(text) in base 10; nullopt where int() raises.
std::optional<int64_t> python_int(std::string_view text) {
  const size_t from = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  std::string digits = from && text[0] == '-' ? "-" : "";
  const size_t sign = digits.size();
  if (digit_part(text, from, digits) != text.size() || digits.size() == sign) return std::nullopt;
  const std::optional<int64_t> v = io::parse_integer<int64_t>(digits);
  if (!v) eval_fail("int('", text, "') is outside int64 (Python's int would grow)");
  return v;
}

Value float_to_int(double d) {  // Python's int(d) of a finite float
  const double t = std::trunc(d);
  if (t < -0x1p63 || t >= 0x1p63) eval_fail("int(", Value(d).repr(), ") is outside int64 (Python's int would grow)");
  return Value(static_cast<int64_t>(t));
}

// 'ab' * n, [x] * n: the whole size paid for before any of it is built ('a' * 10**12).
Value repeat(const Value& seq, int64_t n) {
  if (length(seq) == 0) n = 0;  // '' * 10**18 is '' at once, not 10^18 appends of nothing
  int64_t total = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    Budget::bytes(__builtin_mul_overflow(static_cast<int64_t>(s.size()), n, &total) ? INT64_MAX : total);
    std::string out;
    out.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const List& xs = seq.as_list();
  Budget::items(__builtin_mul_overflow(static_cast<int64_t>(xs.size()), n, &total) ? INT64_MAX : total);
  List out;
  out.reserve(static_cast<size_t>(total));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), xs.begin(), xs.end());
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

std::optional<double> python_float(std::string_view text) {
  const bool minus = !text.empty() && text[0] == '-';
  std::string_view rest = text.substr(!text.empty() && (text[0] == '+' || minus) ? 1 : 0);
  auto named = [&](std::string_view name) {
    return rest.size() == name.size() &&
           std::equal(rest.begin(), rest.end(), name.begin(), [](char a, char b) { return (a | 0x20) == b; });
  };
  if (named("inf") || named("infinity")) return minus ? -HUGE_VAL : HUGE_VAL;
  if (named("nan")) return std::nan("");
  std::string whole, fraction, exponent;
  size_t i = digit_part(rest, 0, whole);
  if (i < rest.size() && rest[i] == '.') i = digit_part(rest, i + 1, fraction);
  if (whole.empty() && fraction.empty()) return std::nullopt;
  if (i < rest.size() && (rest[i] == 'e' || rest[i] == 'E')) {
    ++i;
    if (i < rest.size() && (rest[i] == '+' || rest[i] == '-')) exponent += rest[i++];
    const size_t digits_at = i;
    i = digit_part(rest, i, exponent);
    if (i == digits_at) return std::nullopt;
  }
  if (i != rest.size()) return std::nullopt;
  const std::string number = (minus ? "-" : "") + whole + "." + fraction + (exponent.empty() ? "" : "e" + exponent);
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc::result_out_of_range) return value;
  // Out of range: Python's float is inf past the largest double, 0 below the smallest. Which one
  // is the power of ten of the first significant digit (the exponent saturates: it only decides a sign).
  const std::string digits = whole + fraction;
  const auto first = static_cast<int64_t>(digits.find_first_not_of('0'));
  const int64_t exp = exponent.empty() ? 0 : io::parse_integer<int64_t>(exponent[0] == '+' ? exponent.substr(1) : exponent)
                                                 .value_or(exponent[0] == '-' ? -(int64_t{1} << 40) : int64_t{1} << 40);
  const bool huge = exp + static_cast<int64_t>(whole.size()) - 1 - first > 0;
  return huge ? (minus ? -HUGE_VAL : HUGE_VAL) : (minus ? -0.0 : 0.0);
}

Value to_int(const Value& x, const Value& fallback) {
  switch (x.kind()) {
    case Value::Kind::Undefined: eval_fail("int of ", describe(x));
    case Value::Kind::Int:
    case Value::Kind::Bool: return Value(x.as_int());
    case Value::Kind::Float: {
      const double d = x.as_float();
      if (std::isinf(d)) eval_fail("cannot convert float infinity to integer");
      return std::isnan(d) ? fallback : float_to_int(d);  // int(nan) raises ValueError: the default
    }
    case Value::Kind::String: {
      const std::string text = strip(x.as_string(), Value::none(), true, true);
      for (size_t i = 0; i < text.size();) {
        const char32_t c = utf8::next(text, i);
        if (c >= 0x80 && utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND)
          eval_fail("int of '", text, "': digits other than 0-9 are not supported by tapegrad's Jinja subset");
      }
      if (const std::optional<int64_t> i = python_int(text)) return Value(*i);
      const std::optional<double> d = python_float(text);
      return d && std::isfinite(*d) ? float_to_int(*d) : fallback;  // int(float('inf')) raises: the default
    }
    default: return fallback;  // int(None), int([]) raise TypeError: the default
  }
}

bool is_int(const Value& v) { return v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool; }

int64_t python_mod(int64_t x, int64_t y) {
  if (y == -1) return 0;  // INT64_MIN % -1 traps in C++
  const int64_t m = x % y;
  return m != 0 && (m < 0) != (y < 0) ? m + y : m;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) eval_fail("'", op, "' on ", describe(a.is_undefined() ? a : b));
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      Budget::bytes(static_cast<int64_t>(a.as_string().size() + b.as_string().size()));
      return Value(a.as_string() + b.as_string());
    }
    if (a.kind() == Value::Kind::List && b.kind() == Value::Kind::List) {
      Budget::items(static_cast<int64_t>(a.as_list().size() + b.as_list().size()));
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out), a.is_tuple());
    }
  }
  const bool sequence_times_int = (is_int(b) && (a.is_string() || a.kind() == Value::Kind::List)) ||
                                  (is_int(a) && (b.is_string() || b.kind() == Value::Kind::List));
  if (op == "*" && sequence_times_int) return repeat(is_int(a) ? b : a, std::max<int64_t>(0, (is_int(a) ? a : b).as_int()));
  if (!a.is_number() || !b.is_number())
    eval_fail("unsupported operand types for ", op, ": ", describe(a), " and ", describe(b));
  if (is_int(a) && is_int(b)) return int_arithmetic(op, a.as_int(), b.as_int());
  return float_arithmetic(op, a.as_float(), b.as_float());
}

Value negate(const Value& x) {
  if (!x.is_number()) eval_fail("unary - on ", describe(x));
  if (x.kind() == Value::Kind::Float) return Value(-x.as_float());
  if (x.as_int() == std::numeric_limits<int64_t>::min()) eval_fail("integer overflow: -(", x.as_int(), ") is outside int64");
  return Value(-x.as_int());
}

Value absolute(const Value& x) {
  if (!x.is_number()) eval_fail("abs wants a number, got ", describe(x));
  if (x.kind() == Value::Kind::Float) return Value(std::fabs(x.as_float()));
  return x.as_int() < 0 ? negate(x) : Value(x.as_int());
}

std::partial_ordering compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const bool ai = is_int(a), bi = is_int(b);
    if (ai && bi) return a.as_int() <=> b.as_int();
    if (!ai && !bi) return a.as_float() <=> b.as_float();
    return ai ? compare_int_float(a.as_int(), b.as_float()) : 0 <=> compare_int_float(b.as_int(), a.as_float());
  }
  if (a.is_string() && b.is_string()) return a.as_string() <=> b.as_string();  // UTF-8's order is code points'
  eval_fail("'<' between ", describe(a), " and ", describe(b), " is not supported");
}

}  // namespace tg::data::jinja
