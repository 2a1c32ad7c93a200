#include "data/text_pattern.h"

#include "core/detail/utf8.h"
#include "data/detail/regex.h"

namespace tg::data {

TextPattern::TextPattern(const std::string& pattern) : regex_(std::make_shared<const Regex>(pattern)) {}

bool TextPattern::search(std::string_view text) const {
  return utf8::is_valid(text) ? regex_->search(text) : regex_->search(utf8::repair(text));
}

const std::string& TextPattern::pattern() const { return regex_->pattern(); }

}  // namespace tg::data
