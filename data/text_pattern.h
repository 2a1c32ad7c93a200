// A regular expression searched for in text, in the syntax of the tokenizers' patterns (PCRE2,
// with Oniguruma's Unicode \s \w \d: close to Python's re), bounded in time: GRPO's regex reward.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace tg::data {

class Regex;

class TextPattern {
 public:
  // tg::Error naming the pattern and why it cannot be compiled.
  explicit TextPattern(const std::string& pattern);
  // Whether the pattern matches somewhere in `text` (invalid UTF-8 is repaired first, as Python's
  // errors="replace").
  bool search(std::string_view text) const;
  const std::string& pattern() const;

 private:
  std::shared_ptr<const Regex> regex_;
};

}  // namespace tg::data
