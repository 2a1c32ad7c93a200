#include "data/chat_template.h"

#include <filesystem>

#include "core/detail/utf8.h"
#include "core/error.h"
#include "data/detail/jinja.h"
#include "io/file.h"

namespace tg::data {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  const std::vector<uint8_t> bytes = io::read_file(p.string(), io::kMaxConfigBytes);
  return std::string(bytes.begin(), bytes.end());
}

// A "chat_template" value: a string, or a list of named templates of which "default" is used.
std::string template_source(const json::Value& v, const std::string& where) {
  if (v.is_string()) return v.as_string();
  TG_CHECK(v.is_array(), "chat template", where, " chat_template wants a string or a list of {name, template}, got ",
           json::Value::type_name(v.type()));
  for (const json::Value& t : v.as_array()) {
    TG_CHECK(t.is_object() && t.find("name") && t.find("template"), "chat template", where,
             " chat_template list entries want {\"name\", \"template\"}");
    if (t.at("name").as_string("name") == "default") return t.at("template").as_string("template");
  }
  fail("chat template", where, " has named chat templates but none called \"default\"");
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::from_config(const json::Value& config, const std::string& dir) {
  std::string source;
  if (!dir.empty() && fs::exists(fs::path(dir) / "chat_template.jinja")) {
    source = read_text(fs::path(dir) / "chat_template.jinja");
  } else if (!dir.empty() && fs::exists(fs::path(dir) / "chat_template.json")) {
    const fs::path p = fs::path(dir) / "chat_template.json";
    const json::Value j = json::parse(read_text(p));
    TG_CHECK(j.is_object() && j.find("chat_template"), "chat template", "'", p.string(), "' has no \"chat_template\"");
    source = template_source(j.at("chat_template"), tg::detail::cat("'", p.string(), "'"));
  } else if (const json::Value* t = config.find("chat_template"); t && !t->is_null()) {
    source = template_source(*t, "tokenizer_config.json");
  } else {
    return std::nullopt;
  }
  // transformers' special_tokens_map: the tokens that are set, as strings.
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const json::Value* v = config.find(key);
    if (!v || v->is_null()) continue;
    if (v->is_object() && v->find("content")) v = &v->at("content");
    TG_CHECK(v->is_string(), "chat template", "tokenizer_config.json ", key, " wants a string or {\"content\": ...}");
    tokens.emplace_back(key, v->as_string());
  }
  return ChatTemplate(source, std::move(tokens));
}

ChatTemplate::ChatTemplate(const std::string& source, std::vector<std::pair<std::string, std::string>> special_tokens)
    : template_(std::make_shared<const jinja::Template>(source)), special_tokens_(std::move(special_tokens)) {}

bool ChatTemplate::has_generation_blocks() const {
  return template_->generation_blocks() != jinja::GenerationBlocks::None;
}

bool ChatTemplate::generation_blocks_are_empty() const {
  return template_->generation_blocks() == jinja::GenerationBlocks::Empty;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options,
                                 const std::tm* now) const {
  std::vector<std::pair<size_t, size_t>> generation;
  return render(messages, options, now, generation);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options,
                                 const std::tm* now, std::vector<std::pair<size_t, size_t>>& generation) const {
  using jinja::Value;
  jinja::List msgs;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    // Checked where text enters: the template's string methods and the tokenizer read code points.
    for (const auto& [field, text] : {std::pair{"role", &m.role}, std::pair{"content", &m.content}}) {
      const std::string bad = utf8::invalid_at(*text);
      TG_CHECK(bad.empty(), "apply_chat_template", "messages[", i, "].", field, " is not text: ", bad);
    }
    msgs.push_back(Value::dict({{"role", Value(m.role)}, {"content", Value(m.content)}}));
  }
  std::tm when{};
  if (now) {
    when = *now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &when);
  }
  jinja::Dict vars = {{"messages", Value::list(std::move(msgs))},
                      {"tools", Value::none()},
                      {"documents", Value::none()},
                      {"add_generation_prompt", Value(options.add_generation_prompt)}};
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, Value(v));
  vars.emplace_back("raise_exception", Value::function("raise_exception", [](const Value&, jinja::Args& a) -> Value {
                      fail("apply_chat_template", "the chat template raised: ",
                           a.positional.empty() ? std::string() : a.positional[0].str());
                    }));
  vars.emplace_back("strftime_now", Value::function("strftime_now", [when](const Value&, jinja::Args& a) {
                      TG_CHECK(a.positional.size() == 1 && a.positional[0].is_string(), "chat template",
                               "strftime_now wants one format string");
                      return Value(jinja::strftime(a.positional[0].as_string(), when));
                    }));
  generation.clear();
  return template_->render(vars, options.limits, &generation);
}

}  // namespace tg::data
