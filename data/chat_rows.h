// A row of chat data as people have it, read into what a chat template takes (what
// apply_chat_template is given): the messages as given and the tool definitions.
//   {"messages": [{"role", "content", ...}], "tools": [...]}: the OpenAI / transformers layout;
//     a message may carry tool_calls, reasoning_content, tool_call_id, name (the template reads
//     what it knows), content null; "tools" is a list of JSON schemas (or that list as a JSON text).
//   {"conversations": [{"from", "value"}], "system": "...", "tools": ...}: ShareGPT, roles mapped as
//     the usual converters map them: human -> user, gpt -> assistant, system, tool and observation
//     -> tool, function_call -> an assistant turn whose value (JSON {"name", "arguments"} or a list of
//     them) becomes its tool_calls.
#pragma once

#include <string>
#include <vector>

#include "data/chat_template.h"
#include "io/json.h"

namespace tg::data {

// What becomes of a conversation's system messages: kept, merged into the first user turn (its
// text, a blank line, the user's: for templates that refuse a system role, such as Gemma 2's), or
// dropped.
enum class SystemMessage { Keep, Merge, Drop };

struct Conversation {
  std::vector<ChatMessage> messages;
  json::Value tools;  // null: none
  bool has_system() const;
};

// The conversation of a row; tg::Error naming `where` (the file and line) and the field otherwise.
Conversation conversation_of(const json::Value& row, const std::string& where, SystemMessage system = SystemMessage::Keep);
// A row's list of messages (its `field`: "messages", or a preference row's "chosen"), each as the
// "messages" layout keeps it, whole for the template; tg::Error from `op` naming `where` and the
// field otherwise.
std::vector<ChatMessage> messages_of(const json::Value& list, const char* op, const std::string& where,
                                     const std::string& field);
// Whether a row holds a conversation in either layout ("messages" or "conversations").
bool is_conversation_row(const json::Value& row);

}  // namespace tg::data
