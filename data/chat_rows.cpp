#include "data/chat_rows.h"

#include <algorithm>

#include "core/error.h"

namespace tg::data {
namespace {

constexpr const char* kOp = "tokenize_chat_jsonl_file";

// "tools": a list of definitions, or that list as a JSON text (LLaMA-Factory's ShareGPT files).
json::Value tools_of(const json::Value& row, const std::string& where) {
  const json::Value* t = row.find("tools");
  if (!t || t->is_null()) return {};
  json::Value tools = *t;
  if (t->is_string()) {
    try {
      tools = json::parse(t->as_string());
    } catch (const Error& e) {
      fail(kOp, where, ": \"tools\" is a string that is not JSON: ", e.what());
    }
  }
  TG_CHECK(tools.is_array(), kOp, where, ": \"tools\" wants a list of tool definitions, got ",
           json::Value::type_name(tools.type()));
  for (size_t i = 0; i < tools.size(); ++i)
    TG_CHECK(tools.as_array()[i].is_object(), kOp, where, ": tools[", i, "] wants an object (a JSON schema), got ",
             json::Value::type_name(tools.as_array()[i].type()));
  return tools.size() ? tools : json::Value();  // an empty list renders as no tools, as in Python
}

// One message of the "messages" layout, kept whole for the template.
ChatMessage message_of(const json::Value& m, const char* op, const std::string& where, const std::string& field) {
  TG_CHECK(m.is_object(), op, where, ": ", field, " wants an object {\"role\", \"content\"}, got ",
           json::Value::type_name(m.type()));
  const json::Value* role = m.find("role");
  TG_CHECK(role && role->is_string(), op, where, ": ", field, ".role wants a string, got ",
           role ? json::Value::type_name(role->type()) : "nothing");
  const json::Value* content = m.find("content");
  const bool calls = m.find("tool_calls") && !m.at("tool_calls").is_null();
  TG_CHECK((content && content->is_string()) || (calls && (!content || content->is_null())), op, where, ": ", field,
           ".content wants a string (null only beside tool_calls), got ",
           content ? json::Value::type_name(content->type()) : "nothing");
  if (calls)
    TG_CHECK(m.at("tool_calls").is_array(), op, where, ": ", field, ".tool_calls wants a list, got ",
             json::Value::type_name(m.at("tool_calls").type()));
  if (const json::Value* r = m.find("reasoning_content"); r && !r->is_null())
    TG_CHECK(r->is_string(), op, where, ": ", field, ".reasoning_content wants a string, got ",
             json::Value::type_name(r->type()));
  return {role->as_string(), content && content->is_string() ? content->as_string() : "", m};
}

// A ShareGPT function_call value: {"name", "arguments"} or a list of them, as JSON text.
json::Value tool_calls_of(const std::string& value, const std::string& where, const std::string& field) {
  json::Value calls;
  try {
    calls = json::parse(value);
  } catch (const Error& e) {
    fail(kOp, where, ": ", field, " is a function_call whose value is not JSON: ", e.what());
  }
  if (calls.is_object()) calls = json::Value::array({calls});
  TG_CHECK(calls.is_array() && calls.size() > 0, kOp, where, ": ", field,
           " is a function_call whose value wants {\"name\", \"arguments\"} or a list of them");
  json::Value out = json::Value::array();
  for (const json::Value& c : calls.as_array()) {
    TG_CHECK(c.is_object() && c.find("name") && c.at("name").is_string(), kOp, where, ": ", field,
             " is a function_call without a \"name\" string");
    json::Value function = json::Value::object().set("name", c.at("name"));
    function.set("arguments", c.find("arguments") ? c.at("arguments") : json::Value::object());
    out.push_back(json::Value::object().set("type", "function").set("function", function));
  }
  return out;
}

std::vector<ChatMessage> sharegpt_messages(const json::Value& row, const std::string& where) {
  const json::Value& list = row.at("conversations");
  TG_CHECK(list.is_array(), kOp, where, ": \"conversations\" wants a list of {\"from\", \"value\"}, got ",
           json::Value::type_name(list.type()));
  std::vector<ChatMessage> out;
  if (const json::Value* s = row.find("system"); s && !s->is_null()) {
    TG_CHECK(s->is_string(), kOp, where, ": \"system\" wants a string, got ", json::Value::type_name(s->type()));
    if (!s->as_string().empty()) out.push_back({"system", s->as_string()});
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const json::Value& m = list.as_array()[i];
    const std::string field = "conversations[" + std::to_string(i) + "]";
    TG_CHECK(m.is_object(), kOp, where, ": ", field, " wants an object {\"from\", \"value\"}, got ",
             json::Value::type_name(m.type()));
    for (const char* key : {"from", "value"}) {
      const json::Value* v = m.find(key);
      TG_CHECK(v && v->is_string(), kOp, where, ": ", field, ".", key, " wants a string, got ",
               v ? json::Value::type_name(v->type()) : "nothing");
    }
    const std::string& from = m.at("from").as_string();
    const std::string& value = m.at("value").as_string();
    if (from == "function_call") {
      json::Value msg = json::Value::object().set("role", "assistant").set("content", "");
      msg.set("tool_calls", tool_calls_of(value, where, field));
      out.push_back({"assistant", "", msg});
      continue;
    }
    const std::string role = from == "human" || from == "user"        ? "user"
                             : from == "gpt" || from == "assistant"   ? "assistant"
                             : from == "system"                       ? "system"
                             : from == "tool" || from == "observation" ? "tool"
                                                                       : "";
    TG_CHECK(!role.empty(), kOp, where, ": ", field, ".from is \"", from, "\", wants human, gpt, system, tool, ",
             "function_call or observation (ShareGPT's roles)");
    out.push_back({role, value});
  }
  return out;
}

// The system messages merged into the first user turn, or dropped.
void apply_system(std::vector<ChatMessage>& messages, SystemMessage system, const std::string& where) {
  if (system == SystemMessage::Keep) return;
  std::string text;
  std::vector<ChatMessage> rest;
  for (ChatMessage& m : messages) {
    if (m.role != "system") {
      rest.push_back(std::move(m));
      continue;
    }
    text += (text.empty() ? "" : "\n\n") + m.content;
  }
  messages = std::move(rest);
  if (system == SystemMessage::Drop || text.empty()) return;
  auto user = std::find_if(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "user"; });
  TG_CHECK(user != messages.end(), kOp, where, ": system_message merge: the conversation has no user turn to merge ",
           "the system message into");
  user->content = text + "\n\n" + user->content;
  if (user->message.is_object()) user->message.set("content", user->content);
}

}  // namespace

bool Conversation::has_system() const {
  return std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "system"; });
}

std::vector<ChatMessage> messages_of(const json::Value& list, const char* op, const std::string& where,
                                     const std::string& field) {
  TG_CHECK(list.is_array(), op, where, ": \"", field, "\" wants a list of {\"role\", \"content\"}, got ",
           json::Value::type_name(list.type()));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i)
    out.push_back(message_of(list.as_array()[i], op, where, field + "[" + std::to_string(i) + "]"));
  return out;
}

bool is_conversation_row(const json::Value& row) {
  return row.is_object() && (row.find("messages") != nullptr || row.find("conversations") != nullptr);
}

Conversation conversation_of(const json::Value& row, const std::string& where, SystemMessage system) {
  TG_CHECK(row.is_object(), kOp, where, " wants an object, got ", json::Value::type_name(row.type()));
  Conversation c;
  c.tools = tools_of(row, where);
  if (row.find("conversations") && !row.find("messages")) {
    c.messages = sharegpt_messages(row, where);
  } else {
    const json::Value* list = row.find("messages");
    TG_CHECK(list, kOp, where, " has no \"messages\" (the first row has: every row of the file is a conversation)");
    c.messages = messages_of(*list, kOp, where, "messages");
  }
  apply_system(c.messages, system, where);
  return c;
}

}  // namespace tg::data
