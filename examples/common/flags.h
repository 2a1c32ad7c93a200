// Command-line flags for the examples: --name value or --name=value, each declared with a
// default and a help line. An unknown flag (with the nearest declared one suggested, also for
// transformers' / peft's / TRL's names: --learning_rate -> --lr) or a bad value throws
// UsageError; guarded_main prints its message and a pointer to --help, not the whole list.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace examples {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Flags {
 public:
  explicit Flags(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  Flags& add(const std::string& name, const std::string& default_value, const std::string& help);
  // Parses argv; returns false when --help was asked (usage() has the text).
  bool parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  // UsageError naming the flag unless its value is an integer in [min, max] (io/number.h).
  int64_t integer(const std::string& name, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  // A finite number in [min, max]: NaN and infinity mean nothing to any flag.
  double number(const std::string& name, double min = -HUGE_VAL, double max = HUGE_VAL) const;
  bool boolean(const std::string& name) const;
  // A comma-separated list.
  std::vector<std::string> list(const std::string& name) const;
  bool was_set(const std::string& name) const;
  std::string usage() const;
  // The declared flag closest to `name`: ours for a transformers / peft / TRL name ("lr" for
  // "learning_rate", "dtype bf16" for "bf16"), the same with "-" for "_", or one a prefix or a few
  // typos away; "" when none is close.
  std::string nearest(const std::string& name) const;
  // Every flag's name and value, in declaration order.
  const std::vector<std::string>& names() const { return order_; }

 private:
  struct Flag {
    std::string value, default_value, help;
    bool set = false;
  };
  const Flag& get(const std::string& name) const;
  std::string program_, about_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
};

// The line after a usage error's message.
extern const char* const kSeeHelp;

// Runs run(argc, argv): a UsageError prints the message and kSeeHelp (exit 2), any other
// exception "error: <what>" (exit 1).
int guarded_main(int argc, char** argv, int (*run)(int, char**));

}  // namespace examples
