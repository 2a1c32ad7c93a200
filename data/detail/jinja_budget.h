// What a render may spend: a chat template comes with an untrusted model folder and is a program.
// Its nesting (the parse tree, the evaluator, the values it walks) and its work, lists and text
// (data/chat_template.h's ChatTemplateLimits) are bounded here. Internal to data/jinja*.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"
#include "data/detail/jinja.h"

namespace tg::data::jinja {

// Levels of nesting a template and its values may reach. Jinja2 stops sooner or near it (Python's
// compiler at 100 nested blocks and 200 parentheses, its recursion near 1000 calls); a level costs
// a few kilobytes of stack at most, so 256 fit any thread's.
inline constexpr int kMaxDepth = 256;

// One level of recursion (an expression in an expression, a list in a list) on this thread: an
// EvalError past kMaxDepth instead of a stack overflow.
class Nested {
 public:
  Nested();
  ~Nested();
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

// The render running on this thread, which the builtins reach without it passing through their
// Python-shaped signatures: what it may still spend, and the namespaces it made (the one mutable
// value, which can hold itself: emptied when the render ends, so that no cycle outlives it).
class Budget {
 public:
  explicit Budget(const ChatTemplateLimits& limits);
  ~Budget();
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  // Charges to this thread's render (free outside one): an EvalError naming the limit past it.
  static void steps(int64_t n);
  static void text(size_t bytes);  // a builtin going through `bytes` of text: a step each 64
  static void items(int64_t n);    // a list of n items about to be built
  static void bytes(int64_t n);    // n bytes of text about to be built
  static void append(std::string& out, std::string_view piece);  // bytes(piece), then out += piece
  static void adopt(const Value& ns);  // a namespace() this render made

 private:
  static void charge(int64_t& used, int64_t limit, int64_t n, const char* name, const char* what);
  ChatTemplateLimits limits_;
  int64_t steps_ = 0, items_ = 0, bytes_ = 0;
  std::vector<Value> namespaces_;
  Budget* outer_;
};

}  // namespace tg::data::jinja
