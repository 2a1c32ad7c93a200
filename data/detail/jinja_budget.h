// What a render may spend: a chat template comes with an untrusted model folder and is a program.
// Its nesting (the parse tree, the evaluator, the values it walks) is bounded here. Internal to
// data/jinja*.
#pragma once

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

}  // namespace tg::data::jinja
