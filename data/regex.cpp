#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/detail/regex.h"

#include <pcre2.h>

#include <cctype>
#include <chrono>
#include <cstdint>

#include "core/error.h"
#include "core/detail/utf8.h"

namespace tg::data {
namespace {

// Oniguruma's Unicode classes (ONIG_SYNTAX_RUBY, UTF-8), as the body of a bracket class.
constexpr const char* kSpace = "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                               "\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr const char* kHex = "0-9A-Fa-f";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// What one match (one word) may cost: backtracking steps, nesting and (interpreted) heap, so
// that a pattern from a tokenizer.json cannot backtrack without end on some word.
constexpr uint32_t kMatchLimit = 1'000'000, kDepthLimit = 100'000, kHeapLimitKiB = 64 * 1024;
// Matches that each rescan the rest of the text (a(?=a*$)) cost the square of its length in all,
// which no per-match limit sees: find_all's time is bounded too, far above a linear pattern's.
constexpr double kSecondsBase = 1.0, kSecondsPerByte = 2e-6;

// One match-data block and JIT stack per thread, shared by every pattern.
struct ThreadScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() {
    pcre2_jit_stack_assign(context, nullptr, stack);
    pcre2_set_match_limit(context, kMatchLimit);
    pcre2_set_depth_limit(context, kDepthLimit);
    pcre2_set_heap_limit(context, kHeapLimitKiB);
  }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::string Regex::translate(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      const char* body = e == 's' || e == 'S' ? kSpace : e == 'w' || e == 'W' ? kWord : e == 'h' || e == 'H' ? kHex : nullptr;
      const bool negated = e == 'S' || e == 'W' || e == 'H';
      if (e == 'd' || e == 'D') {
        out += e == 'd' ? "\\p{Nd}" : "\\P{Nd}";
      } else if (body && in_class) {
        TG_CHECK(!negated, "tokenizer regex", "\\", std::string(1, e), " inside a bracket class is not supported (in '",
                 p, "')");
        out += body;
      } else if (body) {
        out += negated ? "[^" : "[";
        out += body;
        out += "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == '[' && p.compare(i, 2, "[:") != 0)
        fail("tokenizer regex", "nested bracket classes (Oniguruma set operations) are not supported (in '", p, "')");
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    out += c;
    if (c == '[') {
      in_class = true;
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
    }
  }
  return out;
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  const std::string translated = translate(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Ruby syntax: ^ and $ are line anchors.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  TG_CHECK(code != nullptr, "tokenizer regex", "cannot compile '", pattern, "': ", pcre2_message(error), " at offset ",
           offset, " of its PCRE2 form '", translated, "'");
  auto c = std::make_shared<Code>();
  c->code = code;
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, pcre2_match interprets
  code_ = std::move(c);
}

Regex Regex::literal(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) escaped += '\\';  // ASCII punctuation and spaces; UTF-8 bytes stay whole
    escaped += c;
  }
  return Regex(escaped);
}

void Regex::find_all(std::string_view s, std::vector<Match>& out) const {
  ThreadScratch& t = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const auto begun = std::chrono::steady_clock::now();
  const double budget = kSecondsBase + kSecondsPerByte * static_cast<double>(s.size());
  size_t start = 0;
  for (uint64_t calls = 1; start <= s.size(); ++calls) {
    if (calls % 64 == 0) {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count();
      TG_CHECK(spent <= budget, "tokenizer regex", "matching '", pattern_, "' over ", s.size(), " bytes took more than ",
               budget, " s (at byte ", start, "): its cost grows faster than the text; the tokenizer.json pattern "
               "is unusable on text this long");
    }
    const int rc = pcre2_match(code_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, t.data, t.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    TG_CHECK(rc >= 0, "tokenizer regex", "matching '", pattern_, "' failed: ", pcre2_message(rc),
             rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT
                 ? " (the limit on one match's backtracking: the pattern backtracks catastrophically on this text)"
                 : "");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(t.data);
    out.push_back({ov[0], ov[1]});
    if (ov[1] > ov[0]) {
      start = ov[1];
    } else {  // an empty match: Oniguruma's search resumes one character later
      if (ov[1] >= s.size()) return;
      start = ov[1] + utf8::char_len(static_cast<unsigned char>(s[ov[1]]));
    }
  }
}

bool Regex::search(std::string_view s) const {
  ThreadScratch& t = scratch();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_NO_UTF_CHECK,
                             t.data, t.context);
  TG_CHECK(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "tokenizer regex", "matching '", pattern_, "' failed: ",
           pcre2_message(rc));
  return rc >= 0;
}

}  // namespace tg::data
