// Conversations as training data, as TRL's SFTTrainer reads a "messages" dataset with
// assistant_only_loss: each conversation rendered with the tokenizer's chat template, encoded
// without special tokens (the template writes bos_token itself), and every token labelled -100
// but those of the assistant turns.
//
//   // chat.jsonl: {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
//   auto corpus = tg::data::tokenize_jsonl_file("chat.jsonl", tok);  // sees "messages", reads it here
//
// The assistant turns are found in the rendered text. A template with {% generation %} blocks
// marks them (transformers' return_assistant_tokens_mask). Otherwise turn i is what rendering
// messages[:i + 1] adds to messages[:i] rendered with add_generation_prompt: the reply and the
// template's end of turn (<|eot_id|>, <|im_end|>\n), which the model must learn to write. Both
// renderings must begin the whole conversation's; a turn may lose a start that the template
// writes only into the last turn (Qwen3's empty <think> block). A template that renders earlier
// turns differently once more follow (Mistral's system message moves to the last user turn) is a
// tg::Error naming it: its turns cannot be told apart. A token that straddles a turn's edge is
// learned, as transformers' masks count a token that overlaps the turn.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/chat_rows.h"
#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace tg::data {

// The [begin, end) bytes of each assistant turn in `rendered`, the template's rendering of the
// whole conversation (add_generation_prompt false), in order. name: the template's folder, for
// errors. tg::Error for a conversation without an assistant turn, or one the template renders
// so that the turns cannot be found.
// tools: apply_chat_template's tools= (null: none).
std::vector<std::pair<size_t, size_t>> assistant_spans(const ChatTemplate& chat_template,
                                                       std::span<const ChatMessage> messages, const std::tm& now,
                                                       const std::string& name, std::string& rendered,
                                                       const json::Value& tools = {});

struct ChatExample {
  std::vector<int32_t> ids, labels;  // labels: the id inside an assistant turn, else kIgnoreIndex
};
// now: the time the template's strftime_now reads (nullptr: the current local time).
ChatExample tokenize_conversation(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                  const std::tm* now = nullptr, const json::Value& tools = {});

// A conversation a line, as data/chat_rows.h reads it ({"messages": [...], "tools": [...]} or
// ShareGPT's {"conversations": [...]}); options.system_message says what becomes of system
// messages. Errors name the file, the line and the field; a row the template refuses while it
// has a system message says how system_message helps.
std::shared_ptr<const TokenCorpus> tokenize_chat_jsonl_file(const std::string& path, const Tokenizer& tokenizer,
                                                            const TextOptions& options = {});
// Whether a file holds conversations, as tokenize_jsonl_file decides it: a .jsonl file whose first
// non-blank line is an object with "messages" or "conversations" (such data packs as Layout::PackSeparate by
// default: lora_finetune --layout auto).
bool holds_conversations(const std::string& path);
// The rows of read_jsonl_objects as above (tokenize_jsonl_file's path for a "messages" file).
std::shared_ptr<const TokenCorpus> tokenize_chat_rows(std::span<const JsonlRow> rows, const Tokenizer& tokenizer,
                                                      const std::string& path, const TextOptions& options = {});

}  // namespace tg::data
