// Chat templates against transformers: every real template of tests/fixtures/chat_templates/ over
// every conversation of its expected.json (make_fixtures.py rendered them with jinja2 configured
// as transformers' apply_chat_template, or with transformers itself), byte for byte, raises
// included; and the Jinja constructs the subset refuses, refused with a tg::Error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "io/json.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using tg::data::ChatMessage;
using tg::data::ChatTemplate;

namespace {

const fs::path kDir = fs::path(TG_TESTS_DIR) / "fixtures" / "chat_templates";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ChatMessage> messages_of(const tg::json::Value& v) {
  std::vector<ChatMessage> out;
  for (const auto& m : v.as_array()) out.push_back({m.at("role").as_string(), m.at("content").as_string()});
  return out;
}

std::tm fixture_time(const std::string& iso) {  // "2025-03-09T14:05:00"
  std::tm t{};
  std::istringstream(iso) >> std::get_time(&t, "%Y-%m-%dT%H:%M:%S");
  mktime(&t);  // fills the weekday and day of the year
  return t;
}

// A template with the special tokens of a small config.
std::string render(const std::string& source, std::vector<ChatMessage> messages = {{"user", "hi"}}, bool agp = false) {
  ChatTemplate t(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  return t.render(messages, {.add_generation_prompt = agp});
}

}  // namespace

TEST(ChatTemplate, RealTemplatesRenderAsTransformers) {
  const tg::json::Value expected = tg::json::parse(read(kDir / "expected.json"));
  const std::tm now = fixture_time(expected.at("now").as_string());
  std::map<std::string, ChatTemplate> templates;
  size_t checked = 0, raised = 0;
  for (const auto& c : expected.at("cases").as_array()) {
    const std::string family = c.at("family").as_string(), conv = c.at("conversation").as_string();
    if (!templates.count(family)) {
      const tg::json::Value config = tg::json::parse(read(kDir / family / "tokenizer_config.json"));
      templates.emplace(family, *ChatTemplate::from_config(config));
    }
    const std::vector<ChatMessage> messages = messages_of(expected.at("conversations").at(conv));
    const bool agp = c.at("add_generation_prompt").as_bool();
    SCOPED_TRACE(family + " / " + conv + (agp ? " / add_generation_prompt" : ""));
    if (const tg::json::Value* err = c.find("error")) {
      EXPECT_ERROR_HAS(templates.at(family).render(messages, {.add_generation_prompt = agp}, &now),
                       "the chat template raised: ", err->as_string().c_str());
      ++raised;
    } else {
      EXPECT_EQ(templates.at(family).render(messages, {.add_generation_prompt = agp}, &now), c.at("text").as_string());
    }
    ++checked;
  }
  EXPECT_GE(templates.size(), 10u);
  EXPECT_EQ(checked, expected.at("cases").size());
  EXPECT_GT(raised, 0u);
}

// Chat data as people have it (issue 47): tools= and messages with tool_calls, tool turns and
// reasoning_content, passed whole as apply_chat_template passes them (expected_tools.json). A
// template that fails on Python's types rather than by raise_exception fails here too.
TEST(ChatTemplate, RealTemplatesRenderToolsAndToolCallsAsTransformers) {
  const tg::json::Value expected = tg::json::parse(read(kDir / "expected_tools.json"));
  const std::tm now = fixture_time(expected.at("now").as_string());
  size_t rendered = 0;
  for (const auto& c : expected.at("cases").as_array()) {
    const std::string family = c.at("family").as_string(), conv = c.at("conversation").as_string();
    const ChatTemplate t = *ChatTemplate::from_config(tg::json::parse(read(kDir / family / "tokenizer_config.json")));
    const tg::json::Value& conversation = expected.at("conversations").at(conv);
    std::vector<ChatMessage> messages;
    for (const auto& m : conversation.at("messages").as_array())
      messages.push_back({m.at("role").as_string(), m.at("content").as_string(), m});
    const bool agp = c.at("add_generation_prompt").as_bool();
    SCOPED_TRACE(family + " / " + conv + (agp ? " / add_generation_prompt" : ""));
    const tg::data::ChatTemplateOptions options{.add_generation_prompt = agp, .tools = conversation.at("tools")};
    if (const tg::json::Value* err = c.find("error")) {
      const std::string got = tg::test::error_of([&] { t.render(messages, options, &now); });
      const bool raised = err->as_string().find("concatenate") == std::string::npos;  // else Python's TypeError
      EXPECT_NE(got.find(raised ? "the chat template raised: " + err->as_string() : std::string()), std::string::npos)
          << got;
      EXPECT_FALSE(got.empty());
    } else {
      EXPECT_EQ(t.render(messages, options, &now), c.at("text").as_string());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 50u);
}

TEST(ChatTemplate, TokenizerReadsTheFolderTemplate) {
  tg::test::TempDir dir;
  const fs::path src = kDir.parent_path() / "tokenizers" / "qwen2";
  fs::copy_file(src / "tokenizer.json", dir.path() / "tokenizer.json");
  tg::json::Value config = tg::json::parse(read(kDir / "qwen2.5" / "tokenizer_config.json"));
  std::ofstream(dir.path() / "tokenizer_config.json") << tg::json::dump(config);
  const auto tok = tg::data::Tokenizer::from_pretrained(dir.path().string());
  ASSERT_NE(tok.chat_template(), nullptr);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  EXPECT_EQ(tok.apply_chat_template(m, {.add_generation_prompt = true}),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // chat_template.jinja beside it wins, as in transformers.
  std::ofstream(dir.path() / "chat_template.jinja") << "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}\n";
  EXPECT_EQ(tg::data::Tokenizer::from_pretrained(dir.path().string()).apply_chat_template(m), "[user]Hi");
  // A list of named templates: "default".
  config.set("chat_template", tg::json::parse(R"([{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ eos_token }}"}])"));
  fs::remove(dir.path() / "chat_template.jinja");
  std::ofstream(dir.path() / "tokenizer_config.json", std::ios::trunc) << tg::json::dump(config);
  EXPECT_EQ(tg::data::Tokenizer::from_pretrained(dir.path().string()).apply_chat_template(m), "D<|im_end|>");
  // None at all.
  EXPECT_ERROR_HAS(tg::data::Tokenizer::from_file((src / "tokenizer.json").string()).apply_chat_template(m),
                   "apply_chat_template", "has no chat template");
}

TEST(ChatTemplate, JinjaSemantics) {
  // Whitespace control: trim_blocks, lstrip_blocks, {%- -%}, {%+, comments, the final newline.
  EXPECT_EQ(render("a  {% if 1 %}b{% endif %}\n  {% if 1 %}\nc\n  {%+ if 1 %}d{% endif %}{% endif %}  {# x #}\n  e {{ 1 }}\n"),
            "a  bc\n  d    e 1");
  EXPECT_EQ(render("x  {%- if 1 -%}  \n y {{- ' z ' -}}  w{% endif %}"), "xy z w");
  // Scopes: a set in a loop lasts one iteration; namespace() carries state out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = i+5 %}{{x}}{% endfor %}{{x}}"), "16171");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  // loop.*, filters in for, break / continue, else.
  EXPECT_EQ(render("{% for x in 'abcd' if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.revindex0 }}{{ '|' if not loop.last }}{% endfor %}"),
            "1a2|2c1|3d0");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  // Python values: str(), repr, tojson, slices by code point, arithmetic.
  EXPECT_EQ(render("{{ [1,'a',None,True,1.5,{'k':(1,2)}] }}|{{ none }}|{{ 1/2 }}|{{ 7//2 }}|{{ -7 % 3 }}|{{ 1e20 }}|{{ 0.1+0.2 }}|{{ x }}"),
            "[1, 'a', None, True, 1.5, {'k': (1, 2)}]|None|0.5|3|2|1e+20|0.30000000000000004|");
  EXPECT_EQ(render("{{ {'b': [1, 'é\"\\n'], 'a': none} | tojson }}|{{ {'b': 1, 'a': []} | tojson(indent=2, sort_keys=true) }}"),
            "{\"b\": [1, \"é\\\"\\n\"], \"a\": null}|{\n  \"a\": [],\n  \"b\": 1\n}");
  EXPECT_EQ(render("{{ 'héllo wörld'[1:4] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}{{ 'héllo'|length }}"), "éllcba35");
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' x y '.split() }}|{{ 'x</t>y'.split('</t>')[-1] }}"),
            "a b|['a', 'b', '', 'c']|['x', 'y']|y");
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') }}",
                   {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}),
            "a, c");
  EXPECT_EQ(render("{{ 'x' in 'xyz' }}{{ 'role' in messages[0] }}{{ 3 in [1, 2] }}{{ messages[5] is defined }}"), "TrueTrueFalseFalse");
  EXPECT_EQ(render("{{ bos_token ~ 1 ~ none }}{{ (1, 'a')[1] }}{{ 'A' if false }}{{ '\\u00e9\\x41\\t' }}"), "<s>1Noneaé\x41\t");
}

TEST(ChatTemplate, UnsupportedConstructsAreErrors) {
  EXPECT_ERROR_HAS(render("{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}"), "chat template", "line 1", "macro", "not supported");
  EXPECT_ERROR_HAS(render("{% filter upper %}x{% endfilter %}"), "filter", "not supported");
  EXPECT_ERROR_HAS(render("{% raw %}x{% endraw %}"), "raw", "not supported");
  EXPECT_ERROR_HAS(render("{% set x %}y{% endset %}"), "block assignments");
  EXPECT_ERROR_HAS(render("{{ 'x' | wordwrap(3) }}"), "the filter 'wordwrap' is not supported");
  EXPECT_ERROR_HAS(render("{{ 'x' is escaped }}"), "the test 'escaped' is not supported");
  EXPECT_ERROR_HAS(render("{{ 'x'.zfill(3) }}"), "str.zfill is not supported");
  EXPECT_ERROR_HAS(render("{{ '%s' % 1 }}"), "string formatting is not supported");
  EXPECT_ERROR_HAS(render("{{ 1 < 2 < 3 }}"), "chained comparisons");
  EXPECT_ERROR_HAS(render("\n{% if x %}"), "line 2", "unexpected end of template", "endif");
  EXPECT_ERROR_HAS(render("{{ missing + 'x' }}"), "'missing' (undefined)");
  EXPECT_ERROR_HAS(render("{{ messages[0].content.nothing.deeper }}"), "has no attribute 'deeper'");
  EXPECT_ERROR_HAS(render("{{ 'a' + 1 }}"), "unsupported operand types for +: a str and a int");
  EXPECT_ERROR_HAS(render("{% set m = messages[0] %}{% set m.role = 'x' %}"), "only a namespace() can be changed");
  EXPECT_ERROR_HAS(render("{{ raise_exception('Conversation roles must alternate') }}"), "apply_chat_template",
                   "the chat template raised: Conversation roles must alternate");
}
