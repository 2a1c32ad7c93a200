// The regular expressions of tokenizer.json (pre-tokenizer and normalizer patterns), through
// PCRE2 with its JIT. Hugging Face tokenizers compiles them with Oniguruma, whose \s, \w, \d
// and \h differ from PCRE2's: those are rewritten to Oniguruma's Unicode classes first, so
// the same pattern matches the same text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tg::data {

struct Match {
  size_t start, end;  // byte offsets
};

class Regex {
 public:
  // tg::Error naming the pattern and PCRE2's reason when it cannot be compiled.
  explicit Regex(const std::string& oniguruma_pattern);
  // A literal string (tokenizer.json's {"String": ...} patterns).
  static Regex literal(std::string_view text);

  // The non-overlapping matches in `s` (valid UTF-8), left to right, as Oniguruma's search
  // finds them (an empty match moves the search on by one character). Bounded: tg::Error when
  // one match passes PCRE2's match / depth / heap limits, or the search runs longer than
  // 1 s + 2 us a byte of `s` (a pattern whose matches each rescan the rest of the text).
  void find_all(std::string_view s, std::vector<Match>& out) const;
  bool search(std::string_view s) const;  // any match
  const std::string& pattern() const { return pattern_; }

  // The PCRE2 pattern a given Oniguruma pattern becomes (for tests and error messages).
  static std::string translate(const std::string& oniguruma_pattern);

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;
};

}  // namespace tg::data
