#include "examples/common/flags.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "io/number.h"

namespace examples {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string Flags::nearest(const std::string& name) const {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;  // further than this is no suggestion
  for (const auto& n : order_) {
    const size_t d = n.find(name) == 0 || name.find(n) == 0 ? 1 : edit_distance(name, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

Flags& Flags::add(const std::string& name, const std::string& default_value, const std::string& help) {
  flags_[name] = {default_value, default_value, help, false};
  order_.push_back(name);
  return *this;
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'\n" + usage());
    std::string name = arg.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!flags_.count(name)) {
      const std::string guess = nearest(name);
      throw UsageError("unknown flag --" + name + (guess.empty() ? "" : " (did you mean --" + guess + "?)") + "\n" + usage());
    }
    if (eq == std::string::npos) {
      const std::string& d = flags_[name].default_value;
      bool boolean = d == "false" || d == "true";
      if (boolean && (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)) {
        value = "true";  // a bare boolean flag
      } else {
        if (i + 1 >= argc) throw UsageError("flag --" + name + " needs a value\n" + usage());
        value = argv[++i];
      }
    }
    flags_[name].value = value;
    flags_[name].set = true;
  }
  return true;
}

const Flags::Flag& Flags::get(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) throw std::logic_error("flag --" + name + " was never declared");
  return it->second;
}

std::string Flags::str(const std::string& name) const { return get(name).value; }

int64_t Flags::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string& v = get(name).value;
  const std::optional<int64_t> n = tg::io::parse_integer<int64_t>(v);
  const std::string range = min == INT64_MIN && max == INT64_MAX ? ""
                            : max == INT64_MAX ? " of at least " + std::to_string(min)
                                               : " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!n || *n < min || *n > max)
    throw UsageError("--" + name + " wants an integer" + range + ", got '" + v + "'\n" + usage());
  return *n;
}

double Flags::number(const std::string& name, double min, double max) const {
  const std::string& v = get(name).value;
  const std::optional<double> x = tg::io::parse_number(v);
  std::ostringstream range;
  if (min != -HUGE_VAL || max != HUGE_VAL) {
    range << " in [" << min << ", ";
    if (max == HUGE_VAL) range << "inf)";
    else range << max << "]";
  }
  if (!x || *x < min || *x > max)
    throw UsageError("--" + name + " wants a finite number" + range.str() + ", got '" + v + "'\n" + usage());
  return *x;
}

bool Flags::boolean(const std::string& name) const {
  const std::string& v = get(name).value;
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw UsageError("--" + name + " wants true or false, got '" + v + "'\n" + usage());
}

std::vector<std::string> Flags::list(const std::string& name) const {
  std::vector<std::string> out;
  std::stringstream ss(get(name).value);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool Flags::was_set(const std::string& name) const { return get(name).set; }

std::string Flags::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n" << about_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    os << "  --" << name << " (default: " << (f.default_value.empty() ? "\"\"" : f.default_value) << ")\n      "
       << f.help << "\n";
  }
  return os.str();
}

int guarded_main(int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.what();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace examples
