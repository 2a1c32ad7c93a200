// A model's chat template (tokenizer_config.json's "chat_template", or chat_template.jinja /
// chat_template.json beside it) rendered as transformers' apply_chat_template(messages,
// tokenize=False, ...) renders it: Jinja2 under transformers' settings (data/detail/jinja.h) with the
// variables transformers passes: messages, tools and documents (None), add_generation_prompt,
// the special tokens (bos_token, eos_token, ... as strings), raise_exception(msg) (a tg::Error
// with the template's message) and strftime_now(fmt) (the local time).
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/json.h"

namespace tg::data {

struct ChatMessage {
  std::string role, content;
};

// What one rendering may spend, since a template is a program from the model's folder: past a
// limit, a tg::Error naming it. The real templates of tests/fixtures/chat_templates render a
// 200-turn conversation (100 KB) within a hundredth of each; all the steps take seconds, all the
// items some 150 MB.
struct ChatTemplateLimits {
  int64_t steps = 10'000'000;  // nodes evaluated, loop iterations, list items and 64-byte runs of text gone through
  int64_t items = 1'000'000;   // list items built (range() alone: 100000 each, as in transformers' sandbox)
  int64_t bytes = 64 << 20;    // bytes of text built, the output included
};

struct ChatTemplateOptions {
  bool add_generation_prompt = false;  // end with the header of an assistant turn
  ChatTemplateLimits limits;
};

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // The template and special tokens of a tokenizer_config.json (and chat_template.jinja /
  // chat_template.json in `dir`, which transformers prefers); nullopt when there is none.
  // "chat_template" is a string or a list of {"name", "template"}, whose "default" is used.
  static std::optional<ChatTemplate> from_config(const json::Value& config, const std::string& dir = "");
  // special_tokens: name -> text, e.g. {"bos_token", "<s>"}.
  ChatTemplate(const std::string& source, std::vector<std::pair<std::string, std::string>> special_tokens);

  // now: the time strftime_now reads (nullptr: the current local time).
  std::string render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options = {},
                     const std::tm* now = nullptr) const;
  // Also where each {% generation %} block's output lies ([begin, end) bytes), as transformers'
  // return_assistant_tokens_mask finds assistant turns.
  std::string render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, const std::tm* now,
                     std::vector<std::pair<size_t, size_t>>& generation) const;
  bool has_generation_blocks() const;
  // Every {% generation %} block is empty: a template that marks no assistant token.
  bool generation_blocks_are_empty() const;

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace tg::data
