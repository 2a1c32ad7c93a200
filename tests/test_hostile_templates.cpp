// A chat template from a hub's model folder is an untrusted program (issue 47): its nesting, its
// arithmetic at int64's edges, the work and memory one render may take, and what it renders where
// Jinja2 would render something else. Expected strings are Jinja2 3.1.6's under transformers'
// settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "data/chat_template.h"
#include "io/json.h"
#include "tests/test_support.h"

namespace {

using tg::data::ChatMessage;
using tg::data::ChatTemplate;

std::string render(const std::string& source, std::vector<ChatMessage> messages = {{"user", "hi"}},
                   const tg::data::ChatTemplateLimits& limits = {}) {
  return ChatTemplate(source, {{"eos_token", "</s>"}}).render(messages, {.limits = limits});
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
  EXPECT_EQ(render(deep_lists(1000000, "{{ ns.x|length }}"), {}, {.steps = 40000000, .items = 5000000}), "1");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x }}")), "line 1", "more than 256 levels of nesting");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x|tojson }}")), "more than 256 levels of nesting");
  EXPECT_ERROR_HAS(render(deep_lists(1000, "{{ ns.x == ns.y }}")), "more than 256 levels of nesting");
  // A chain of bound methods, each holding a dict holding the one before.
  EXPECT_EQ(render("{% set ns = namespace(f=1) %}{% for i in range(100000) %}{% set ns.f = {'a': ns.f}.get %}{% endfor %}ok"),
            "ok");
  // Filters calling filters by name.
  EXPECT_ERROR_HAS(render("{{ ['a']|map(" + repeat("'map', ", 1000) + "'upper')|list }}"), "more than 256 levels of nesting");
}

// Python's int at int64's edges: the result Python gives where int64 holds it (INT64_MIN % -1 was
// SIGFPE), a tg::Error where Python's int would grow (2 ** 63 was a float, -INT64_MIN wrapped).
TEST(HostileTemplate, IntegersAtInt64sEdgesFollowPythonOrRaise) {
  const std::string min = "(-9223372036854775807 - 1)", max = "9223372036854775807";
  const std::vector<std::pair<std::string, std::string>> as_jinja2 = {
      {min + " % -1", "0"},
      {min + " // 3", "-3074457345618258603"},  // found by fuzz_chat_template's seed: x - x % y wrapped
      {"-9223372036854775807 // -2", "4611686018427387903"},
      {"7 // -2", "-4"},
      {"7 % -3", "-2"},
      {"-7.5 // 2", "-4.0"},
      {"-7.5 % 2", "0.5"},
      {"-1e-20 % 1.0", "1.0"},
      {"-5 % (1e308 * 10)", "inf"},
      {"(-2) ** 63", "-9223372036854775808"},
      {"3 ** 39", "4052555153018976267"},
      {"2 ** -1", "0.5"},
      {"1 ** 1000000000000000000", "1"},  // by squaring: a loop of 10^18 multiplications before
      {"(-1) ** 1000000000000000001", "-1"},
      {"4611686018427387904 * -2", "-9223372036854775808"},
      {"9223372036854775807 / 3", "3.0744573456182584e+18"},  // correctly rounded, as Python's int division
      {"9007199254740993 == 9007199254740992.0", "False"},      // compared exactly, not as doubles
      {"9007199254740993 > 9007199254740992.0", "True"},
      {max + " < 9223372036854775808.0", "True"},
      {min + " is divisibleby(-1)", "True"},
      {"'9223372036854775807'|int", max},
      {"'  -0012  '|int", "-12"},
      {"'+4_2'|int", "42"},
      {"'42.23'|int", "42"},  // Jinja2's int(float(x)) for a string int() refuses
      {"'-.5e1'|int", "-5"},
      {"'1e400'|int", "0"},
      {"'nan'|int", "0"},
      {"'1__0'|int", "0"},
      {"9.2e18|int", "9200000000000000000"},
      {"'abcdef'[::9223372036854775807]", "a"},
      {"'abcdef'[::" + min + "]", "f"},
      {"[1, 2, 3][" + min + ":]", "[1, 2, 3]"},
      {"[1, 2, 3][9223372036854775807::-1]", "[3, 2, 1]"},
      {"range(" + min + ", 9223372036854775807, 9223372036854775807)|list", "[-9223372036854775808, -1, 9223372036854775806]"},
      {"range(9223372036854775807, " + min + ", -9223372036854775807)|list", "[9223372036854775807, 0, -9223372036854775807]"},
      {"range(100000)|length", "100000"},
  };
  for (const auto& [expr, want] : as_jinja2) EXPECT_EQ(render("{{ " + expr + " }}"), want) << expr;
  const std::vector<std::pair<std::string, std::string>> raises = {
      {"-" + min, "-(-9223372036854775808) is outside int64"},
      {min + "|abs", "-(-9223372036854775808) is outside int64"},
      {min + " // -1", "-9223372036854775808 // -1 is outside int64"},
      {"2 ** 63", "2 ** 63 is outside int64"},
      {max + " + 1", "9223372036854775807 + 1 is outside int64"},
      {"4611686018427387904 * 2", "4611686018427387904 * 2 is outside int64"},
      {"1e30|int", "int(1e+30) is outside int64"},
      {"'99999999999999999999'|int", "int('99999999999999999999') is outside int64"},
      {"(1e308 * 10)|int", "cannot convert float infinity to integer"},
      {"10.0 ** 400", "10.0 ** 400.0: the result is out of range"},
      {"0 ** -1", "0.0 cannot be raised to a negative power"},
      {"(-8) ** 0.5", "complex number"},
      {"1 // 0", "integer division or modulo by zero"},
      {"1.0 % 0", "float modulo by zero"},
      {"range(100001)|length", "range() of 100001 items: ranges larger than 100000 are blocked"},
      {"'12'|int(base=16)", "int(base=...) is not supported"},
  };
  for (const auto& raise : raises)  // not a structured binding: clang's lambdas in the macro cannot capture one
    EXPECT_ERROR_HAS(render("{{ " + raise.first + " }}"), "line 1", raise.second.c_str());
}

// One render's work, list items and text are bounded (ChatTemplateLimits): each of these hung, or
// grew until the process ran out of memory.
TEST(HostileTemplate, ARenderHasABudgetOfStepsItemsAndBytes) {
  const std::string steps = "ChatTemplateLimits::steps", items = "ChatTemplateLimits::items", bytes = "ChatTemplateLimits::bytes";
  EXPECT_ERROR_HAS(render("{{ 'a' * 10**12 }}"), "line 1", bytes.c_str(), "more than 67108864 bytes of text built");
  EXPECT_ERROR_HAS(render("{{ ([1] * 10**12)|length }}"), items.c_str(), "more than 1000000 list items built");
  EXPECT_ERROR_HAS(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), items.c_str());
  EXPECT_ERROR_HAS(render("{% set s = 'a' * 1000000 %}{{ s.replace('a', s) }}"), bytes.c_str());
  EXPECT_ERROR_HAS(render("{% set s = 'a' * 1000000 %}{{ s|replace('a', s) }}"), bytes.c_str());
  EXPECT_ERROR_HAS(render("{{ [1]|tojson(indent=10**12) }}"), bytes.c_str());
  EXPECT_ERROR_HAS(render("{{ [('a' * 1000000)] * 100 }}"), bytes.c_str());
  EXPECT_ERROR_HAS(render("{% for i in range(100000) %}{{ 'a' * 1000 }}{% endfor %}"), bytes.c_str());  // the output
  // The limits are the caller's (ChatTemplateOptions::limits): work, here a loop in a loop, and
  // s[i] over a long string, which walks to the i-th character each time.
  const tg::data::ChatTemplateLimits small{.steps = 100000, .items = 1000, .bytes = 1000};
  EXPECT_ERROR_HAS(render("{% set xs = range(1000) %}{% for i in xs %}{% for j in xs %}{% endfor %}{% endfor %}", {}, {.steps = 100000}),
                   steps.c_str(), "more than 100000 steps");
  EXPECT_ERROR_HAS(render("{% for i in range(100000) %}{{ messages[0].content[i] }}{% endfor %}", {{"user", std::string(100000, 'a')}},
                          {.steps = 100000}),
                   steps.c_str());
  std::string names;  // 5000 names in one scope: each set and lookup looks through them
  for (int i = 0; i < 5000; ++i) names += "{% set v" + std::to_string(i) + " = 1 %}";
  EXPECT_ERROR_HAS(render(names, {}, {.steps = 100000}), steps.c_str());
  EXPECT_ERROR_HAS(render("{{ range(1001)|list }}", {}, small), items.c_str(), "more than 1000 list items built");
  EXPECT_ERROR_HAS(render("{{ 'a' * 1001 }}", {}, small), bytes.c_str(), "more than 1000 bytes");
  EXPECT_EQ(render("{{ 'a' * 500 }}", {}, small), std::string(500, 'a'));  // built, then output: 1000 bytes
  // Nothing is built for nothing: '' * 10**18 appended nothing 10^18 times.
  EXPECT_EQ(render("{{ '' * 10**18 }}{{ [] * 10**18 }}{{ 'ab'[-1] }}"), "[]b");
  // A namespace that holds itself is freed with the render (the leak checker's case).
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.f = {'a': ns}.get %}ok"), "ok");
}

// The defaults leave every real template room: a 200-turn conversation of 100 KB renders within a
// hundredth of each limit.
TEST(HostileTemplate, RealTemplatesRenderALongConversationWithinAHundredthOfTheBudget) {
  std::vector<ChatMessage> conversation;
  for (int i = 0; i < 200; ++i) conversation.push_back({i % 2 ? "assistant" : "user", std::string(500, 'x') + " turn " + std::to_string(i)});
  const tg::data::ChatTemplateLimits defaults, hundredth{defaults.steps / 100, defaults.items / 100, defaults.bytes / 100};
  const std::filesystem::path dir = std::filesystem::path(TG_TESTS_DIR) / "fixtures" / "chat_templates";
  size_t rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_directory()) continue;
    std::ifstream in(entry.path() / "tokenizer_config.json");
    std::stringstream config;
    config << in.rdbuf();
    const ChatTemplate t = *ChatTemplate::from_config(tg::json::parse(config.str()));
    EXPECT_GT(t.render(conversation, {.limits = hundredth}).size(), 100000u) << entry.path();
    ++rendered;
  }
  EXPECT_GE(rendered, 10u);
}

// What rendered something other than Jinja2 without a word: a break outside a loop ended the
// output there, escapes past Unicode made bytes no text has, a long strftime_now format gave an
// empty string (%z and %Z the C library's zone), and a number literal past 64 bits was a bare
// std::out_of_range. Each is now Jinja2's result, or a tg::Error naming the line.
TEST(HostileTemplate, RendersAsJinja2OrRefusesByLine) {
  EXPECT_ERROR_HAS(render("a\n{% break %}b"), "line 2", "'break' outside a loop");
  EXPECT_ERROR_HAS(render("{% if true %}{% continue %}{% endif %}"), "'continue' outside a loop");
  EXPECT_ERROR_HAS(render("{% for x in [1] %}{% else %}{% break %}{% endfor %}"), "'break' outside a loop");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in [] %}{% else %}{% break %}{% endfor %}{{ a }}{% endfor %}done"), "done");
  EXPECT_ERROR_HAS(render("{{ '\\U00110000' }}"), "illegal Unicode character");
  EXPECT_ERROR_HAS(render("{{ '\\ud800' }}"), "a lone surrogate");
  EXPECT_EQ(render("{{ '\\U0010FFFF'|length }}"), "1");

  std::tm now{};
  now.tm_year = 125, now.tm_mon = 2, now.tm_mday = 9, now.tm_hour = 14, now.tm_min = 5;
  mktime(&now);
  auto at_now = [&](const std::string& source) {
    return ChatTemplate(source, {}).render(std::vector<ChatMessage>{}, {}, &now);
  };
  EXPECT_EQ(at_now("{{ strftime_now('%d %b %Y') }}"), "09 Mar 2025");
  EXPECT_EQ(at_now("{{ strftime_now('x' * 600)|length }}|{{ strftime_now('%Y' * 200)|length }}"), "600|800");
  EXPECT_EQ(at_now("{{ strftime_now('[%z|%Z] %%z %-d%') }}"), "[|] %z 9%");
  EXPECT_EQ(at_now("{{ strftime_now('%99999999999d') }}"), "");
  EXPECT_ERROR_HAS(at_now("{{ strftime_now('%f') }}"), "%f (microseconds) is not supported");

  EXPECT_ERROR_HAS(render("\n{{ messages.99999999999999999999 }}"), "line 2", "the integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_ERROR_HAS(render("{{ 9223372036854775808 }}"), "the integer 9223372036854775808 does not fit in 64 bits");
  EXPECT_ERROR_HAS(render("{{ 007 }}"), "unexpected '7'");  // Jinja2's lexer: 00, then 7
  EXPECT_EQ(render("{{ -9223372036854775808 }}|{{ 1e400 }}|{{ -1e400 }}|{{ 1e-400 }}|{{ 0x_1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_0.5 }}"),
            "-9223372036854775808|inf|-inf|0.0|31|15|5|10.5");
  EXPECT_EQ(render("{{ -2 ** 2 }}|{{ -5|abs }}|{{ 2 - -3 }}|{{ messages.0.role }}"), "4|5|5|user");
}
