// A model's chat template (tokenizer_config.json's "chat_template", or chat_template.jinja /
// chat_template.json beside it) rendered as transformers' apply_chat_template(messages,
// tokenize=False, ...) renders it: Jinja2 under transformers' settings (data/detail/jinja.h) with the
// variables transformers passes: messages, tools and documents (None), add_generation_prompt,
// the special tokens (bos_token, eos_token, ... as strings), raise_exception(msg) (a tg::Error
// with the template's message) and strftime_now(fmt) (the local time).
#pragma once

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

struct ChatTemplateOptions {
  bool add_generation_prompt = false;  // end with the header of an assistant turn
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
  const std::string& source() const { return *source_; }  // the Jinja text (GGUF's tokenizer.chat_template)

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::shared_ptr<const std::string> source_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace tg::data
