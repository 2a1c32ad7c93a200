// tokenizer.json normalizers: Sequence, Prepend, Replace, NFC / NFD / NFKC / NFKD, Strip.
#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "data/detail/hf_pipeline.h"
#include "data/detail/regex.h"
#include "core/detail/utf8.h"

namespace tg::data::hf {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);  // tokenizers prepends nothing to an empty string
  }

 private:
  std::string prefix_;
};

// Every match of the pattern becomes `content`.
class Replace : public Normalizer {
 public:
  Replace(const json::Value& pattern, std::string content) : content_(std::move(content)) {
    if (const json::Value* str = pattern.find("String")) literal_ = str->as_string("Replace pattern");
    else regex_ = std::make_unique<Regex>(field(pattern, "Regex", "normalizer Replace pattern").as_string("Regex"));
    TG_CHECK(regex_ || !literal_.empty(), "tokenizer.json", "normalizer Replace has an empty pattern");
  }
  void normalize(std::string& s) const override {
    std::string out;
    size_t last = 0;
    bool replaced = false;
    auto replace = [&](size_t start, size_t end) {
      out.append(s, last, start - last).append(content_);
      last = end;
      replaced = true;
    };
    if (regex_) {
      std::vector<Match> matches;
      regex_->find_all(s, matches);
      for (const Match& m : matches) replace(m.start, m.end);
    } else {
      for (size_t at = s.find(literal_); at != std::string::npos; at = s.find(literal_, last))
        replace(at, at + literal_.size());
    }
    if (!replaced) return;
    out.append(s, last, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_, content_;
  std::unique_ptr<Regex> regex_;
};

// Unicode normalization forms through utf8proc (ASCII is the same in every form).
class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& s) const override {
    bool ascii = true;
    for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                            static_cast<utf8proc_ssize_t>(s.size()), &out,
                                            static_cast<utf8proc_option_t>(options_ | UTF8PROC_STABLE));
    TG_CHECK(n >= 0, "tokenizer normalizer", "Unicode normalization failed: ", utf8proc_errmsg(n));
    s.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

// Strips Unicode white space from either end.
class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t begin = 0, end = s.size();
    while (left_ && begin < end) {
      size_t i = begin;
      if (!utf8::is_white_space(utf8::next(s, i))) break;
      begin = i;
    }
    while (right_ && end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!utf8::is_white_space(utf8::next(s, i))) break;
      end = start;
    }
    s = s.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json::Value& v) {
  if (v.is_null()) return nullptr;
  const std::string& type = type_of(v, "normalizer");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : field(v, "normalizers", "normalizer Sequence").as_array("normalizers"))
      if (auto n = make_normalizer(p)) parts.push_back(std::move(n));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(field(v, "prepend", "normalizer Prepend").as_string("prepend"));
  if (type == "Replace")
    return std::make_unique<Replace>(field(v, "pattern", "normalizer Replace"),
                                     field(v, "content", "normalizer Replace").as_string("content"));
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Strip") return std::make_unique<Strip>(bool_field(v, "strip_left", true), bool_field(v, "strip_right", true));
  unsupported("normalizer", type);
}

}  // namespace tg::data::hf
