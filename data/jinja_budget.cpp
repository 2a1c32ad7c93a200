#include "data/detail/jinja_budget.h"

#include "data/detail/jinja_builtins.h"

namespace tg::data::jinja {
namespace {

thread_local int depth = 0;

}  // namespace

Nested::Nested() {
  if (depth == kMaxDepth) eval_fail("more than ", kMaxDepth, " levels of nesting (of expressions, or of lists and dicts in a value)");
  ++depth;
}

Nested::~Nested() { --depth; }

}  // namespace tg::data::jinja
