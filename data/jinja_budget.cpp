#include "data/detail/jinja_budget.h"

#include "data/detail/jinja_builtins.h"

namespace tg::data::jinja {
namespace {

thread_local int depth = 0;
thread_local Budget* current = nullptr;

}  // namespace

Nested::Nested() {
  if (depth == kMaxDepth) eval_fail("more than ", kMaxDepth, " levels of nesting (of expressions, or of lists and dicts in a value)");
  ++depth;
}

Nested::~Nested() { --depth; }

Budget::Budget(const ChatTemplateLimits& limits) : limits_(limits), outer_(current) { current = this; }

Budget::~Budget() {
  current = outer_;
  for (const Value& ns : namespaces_) Dict().swap(ns.namespace_items());  // what it holds freed, a cycle through it cut
}

void Budget::charge(int64_t& used, int64_t limit, int64_t n, const char* name, const char* what) {
  if (n > limit - used)
    eval_fail("the render went over ChatTemplateLimits::", name, ": more than ", limit, " ", what,
              " (a runaway loop? ChatTemplateOptions::limits raises it)");
  used += n;
}

void Budget::steps(int64_t n) {
  if (current) charge(current->steps_, current->limits_.steps, n, "steps", "steps (nodes evaluated, items and text gone through)");
}

void Budget::text(size_t bytes) { steps(1 + static_cast<int64_t>(bytes / 64)); }

void Budget::items(int64_t n) {
  if (current) charge(current->items_, current->limits_.items, n, "items", "list items built");
}

void Budget::bytes(int64_t n) {
  if (current) charge(current->bytes_, current->limits_.bytes, n, "bytes", "bytes of text built");
}

void Budget::append(std::string& out, std::string_view piece) {
  bytes(static_cast<int64_t>(piece.size()));
  out += piece;
}

void Budget::adopt(const Value& ns) {
  if (current) current->namespaces_.push_back(ns);
}

}  // namespace tg::data::jinja
