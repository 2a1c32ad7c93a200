// A chat template from a hub's model folder is an untrusted program (issue 47): its nesting, its
// arithmetic at int64's edges, the work and memory one render may take, and what it renders where
// Jinja2 would render something else. Expected strings are Jinja2 3.1.6's under transformers'
// settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols).
#include <gtest/gtest.h>

#include <string>

#include "data/chat_template.h"
#include "tests/test_support.h"

namespace {

using tg::data::ChatMessage;
using tg::data::ChatTemplate;

std::string render(const std::string& source, std::vector<ChatMessage> messages = {{"user", "hi"}}) {
  return ChatTemplate(source, {{"eos_token", "</s>"}}).render(messages);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// `n` levels of open ... close around `inner`.
std::string nest(const std::string& open, const std::string& inner, const std::string& close, int n) {
  return repeat(open, n) + inner + repeat(close, n);
}

// Two lists nested `levels` deep (a multiple of 1000), built in a loop, then `use`d.
std::string deep_lists(int levels, const std::string& use) {
  return "{% set ns = namespace(x=[], y=[]) %}{% for i in range(" + std::to_string(levels / 1000) +
         ") %}{% for j in range(1000) %}{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}{% endfor %}" + use;
}

}  // namespace

// Each of these overflowed the stack of the parser, the evaluator or a destructor.
TEST(HostileTemplate, NestingPastItsLimitIsAnErrorNotAStackOverflow) {
  const int n = 100000;
  for (const std::string& deep : {"{{ " + nest("(", "1", ")", n) + " }}", "{{ " + nest("[", "", "]", n) + " }}",
                                  nest("{% if 1 %}", "x", "{% endif %}", n), "{{ " + repeat("not ", n) + "1 }}",
                                  "{{ " + repeat("-", n) + "1 }}", "{{ 'a'" + repeat("|upper", n) + " }}",
                                  "{{ 1" + repeat(" + 1", n) + " }}", "{{ messages" + repeat(".x", n) + " }}",
                                  "{{ 1" + repeat(" if 1 else 1", n) + " }}"})
    EXPECT_ERROR_HAS(render(deep), "chat template", "line 1", "nests more than 256 levels deep");
  // Below the limit, as Jinja2 (whose compiler stops at 100 nested blocks, 200 parentheses).
  EXPECT_EQ(render("{{ " + nest("(", "1", ")", 200) + " }}"), "1");
  EXPECT_EQ(render(nest("{% if 1 %}", "x", "{% endif %}", 99)), "x");
  EXPECT_EQ(render("{{ 1" + repeat(" + 1", 250) + " }}"), "251");
  // Long chains are no nesting: ~ is one node of its operands, elif a flat list, as in Jinja2.
  EXPECT_EQ(render("{{ 'a'" + repeat(" ~ 'a'", n - 1) + " }}"), std::string(n, 'a'));
  EXPECT_EQ(render("{% if 0 %}" + repeat("{% elif 0 %}", n) + "{% elif 1 %}e{% endif %}"), "e");
  // A value nested a million levels deep is built and freed; walking it is an error where Python's
  // recursion stops too (repr, tojson).
  EXPECT_EQ(render(deep_lists(1000000, "{{ ns.x|length }}")), "1");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x }}")), "line 1", "more than 256 levels of nesting");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x|tojson }}")), "more than 256 levels of nesting");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x == ns.y }}")), "more than 256 levels of nesting");
  // A chain of bound methods, each holding a dict holding the one before.
  EXPECT_EQ(render("{% set ns = namespace(f=1) %}{% for i in range(100000) %}{% set ns.f = {'a': ns.f}.get %}{% endfor %}ok"),
            "ok");
  // Filters calling filters by name.
  EXPECT_ERROR_HAS(render("{{ ['a']|map(" + repeat("'map', ", 1000) + "'upper')|list }}"), "more than 256 levels of nesting");
}
