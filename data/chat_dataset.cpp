#include "data/chat_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "core/parallel.h"
#include "io/json.h"

namespace tg::data {
namespace {

// Where two renderings part, quoted: "at byte 40: \"<|im_start|>user\" against \"[INST] You ar\"".
std::string difference(std::string_view a, std::string_view b) {
  const size_t at = static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  auto quote = [&](std::string_view s) { return json::dump(json::Value(std::string(s.substr(at, 24)))); };
  return "at byte " + std::to_string(at) + ": " + quote(a) + " against " + quote(b);
}

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm when{};
  localtime_r(&t, &when);
  return when;
}

// A template whose {% generation %} blocks are all empty marks no assistant token: every label
// would be -100, and the training learn nothing.
void check_generation_blocks(const ChatTemplate& chat_template, const char* op, const std::string& where,
                             const std::string& name) {
  TG_CHECK(!chat_template.generation_blocks_are_empty(), op, where, "the chat template of '", name,
           "' marks assistant turns with {% generation %} blocks that are all empty: not one token would be learned");
}

}  // namespace

std::vector<std::pair<size_t, size_t>> assistant_spans(const ChatTemplate& chat_template,
                                                       std::span<const ChatMessage> messages, const std::tm& now,
                                                       const std::string& name, std::string& rendered,
                                                       const json::Value& tools) {
  const char* op = "assistant_spans";
  TG_CHECK(std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }), op,
           "the conversation (", messages.size(), " messages) has no assistant turn: nothing to learn");
  std::vector<std::pair<size_t, size_t>> spans;
  if (chat_template.has_generation_blocks()) {
    check_generation_blocks(chat_template, op, "", name);
    rendered = chat_template.render(messages, {.tools = tools}, &now, spans);
    TG_CHECK(std::any_of(spans.begin(), spans.end(), [](const auto& s) { return s.first < s.second; }), op,
             "the chat template of '", name, "' has {% generation %} blocks, but ",
             spans.empty() ? "none was rendered" : "they rendered nothing", " for this conversation's assistant turns");
    return spans;
  }
  rendered = chat_template.render(messages, {.tools = tools}, &now);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    auto refuse = [&](const std::string& why) {
      fail(op, "the chat template of '", name, "' renders assistant turn messages[", i, "] so that its tokens cannot be "
           "found: ", why, " (a template that marks assistant turns with {% generation %} blocks gives them directly)");
    };
    const std::string head =
        chat_template.render(messages.first(i), {.add_generation_prompt = true, .tools = tools}, &now);
    const std::string with_turn = chat_template.render(messages.first(i + 1), {.tools = tools}, &now);
    if (!std::string_view(rendered).starts_with(head))
      refuse("messages[:" + std::to_string(i) + "] with add_generation_prompt does not begin the whole conversation's "
             "rendering, " + difference(head, rendered));
    if (!std::string_view(with_turn).starts_with(head))
      refuse("messages[:" + std::to_string(i + 1) + "] does not begin as messages[:" + std::to_string(i) +
             "] with add_generation_prompt, " + difference(head, with_turn));
    const std::string_view turn = std::string_view(with_turn).substr(head.size());
    const std::string_view rest = std::string_view(rendered).substr(head.size());
    // The longest stretch of the turn that continues the conversation: a turn may lose what the
    // template writes into the last turn only (Qwen3's empty think block, Phi-3.5's final EOS).
    size_t from = 0, kept = 0;
    for (size_t d = 0; d < turn.size() && kept < turn.size() - d; ++d) {
      const std::string_view t = turn.substr(d);
      const size_t n = static_cast<size_t>(std::mismatch(t.begin(), t.end(), rest.begin(), rest.end()).first - t.begin());
      if (n > kept) from = d, kept = n;
    }
    const std::string_view content = trimmed(messages[i].content);
    if (kept == 0 || turn.substr(from, kept).find(content) == std::string_view::npos)
      refuse("the whole conversation's rendering does not hold the turn as messages[:" + std::to_string(i + 1) +
             "] renders it, " + difference(turn, rest));
    if (!spans.empty() && head.size() < spans.back().second)
      refuse("it begins before the previous assistant turn ends");
    spans.emplace_back(head.size(), head.size() + kept);
  }
  return spans;
}

ChatExample tokenize_conversation(const Tokenizer& tok, std::span<const ChatMessage> messages, const std::tm* now,
                                  const json::Value& tools) {
  const ChatTemplate* chat_template = tok.chat_template();
  TG_CHECK(chat_template, "tokenize_conversation", "'", tok.name_or_path(), "' has no chat template (no chat_template in "
           "tokenizer_config.json, no chat_template.jinja) to render conversations with");
  const std::tm when = now ? *now : local_now();
  std::string rendered;
  std::vector<std::pair<size_t, size_t>> spans = assistant_spans(*chat_template, messages, when, tok.name_or_path(), rendered, tools);
  std::sort(spans.begin(), spans.end());
  std::vector<size_t> cuts;
  for (const auto& [b, e] : spans) {
    TG_CHECK(cuts.empty() || b >= cuts.back(), "tokenize_conversation", "the chat template of '", tok.name_or_path(),
             "' marks overlapping {% generation %} blocks");
    cuts.push_back(b);
    cuts.push_back(e);
  }
  std::vector<Tokenizer::TokenCut> where;
  ChatExample ex;
  ex.ids = tok.encode_with_cuts(rendered, cuts, where);
  ex.labels.assign(ex.ids.size(), kIgnoreIndex);
  for (size_t s = 0; s < spans.size(); ++s) {
    if (spans[s].first == spans[s].second) continue;  // an empty block holds no token
    const Tokenizer::TokenCut& end = where[2 * s + 1];
    // A turn that ends partway into a special token matched the next turn's start only by its
    // first characters ("<|" of Phi-3.5's final <|endoftext|> and of <|user|>): not the turn's.
    const size_t last = end.after > end.before && tok.is_special(ex.ids[end.before]) ? end.before : end.after;
    for (size_t t = where[2 * s].before; t < last; ++t) ex.labels[t] = ex.ids[t];
  }
  TG_CHECK(std::any_of(ex.labels.begin(), ex.labels.end(), [](int32_t l) { return l != kIgnoreIndex; }), "tokenize_conversation",
           "not one token of the conversation's assistant turns is learned with the chat template of '", tok.name_or_path(),
           "' (every label would be -100)");
  return ex;
}

std::shared_ptr<const TokenCorpus> tokenize_chat_rows(std::span<const JsonlRow> rows, const Tokenizer& tok,
                                                      const std::string& path, const TextOptions& options) {
  const char* op = "tokenize_chat_jsonl_file";
  TG_CHECK(tok.chat_template(), op, "'", path, "' holds conversations (\"messages\"), but '", tok.name_or_path(),
           "' has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja)");
  TG_CHECK(!rows.empty(), op, "'", path, "' holds no examples");
  check_generation_blocks(*tok.chat_template(), op, "'" + path + "': ", tok.name_or_path());  // before any row is rendered
  std::vector<Conversation> conversations;
  for (const JsonlRow& row : rows) conversations.push_back(conversation_of(row.value, row.where, options.system_message));
  const std::tm now = local_now();  // one time for every rendering: a date in a system prompt cannot move
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<std::vector<int32_t>> ids(rows.size()), labels(rows.size());
  std::vector<std::string> errors(rows.size());
  parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      try {
        ChatExample ex = tokenize_conversation(tok, conversations[i].messages, &now, conversations[i].tools);
        ids[i] = std::move(ex.ids);
        labels[i] = std::move(ex.labels);
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    }
  });
  for (int64_t i = 0; i < n; ++i)  // the first bad line, whichever thread met it
    TG_CHECK(errors[i].empty(), op, rows[i].where, ": ", errors[i],
             conversations[i].has_system() ? " (the conversation has a system message, which some templates refuse or "
                                             "move: system_message \"merge\" puts its text before the first user "
                                             "turn's, \"drop\" leaves it out)"
                                           : "");
  return corpus_from_examples(std::move(ids), std::move(labels));
}

bool holds_conversations(const std::string& path) {
  if (std::filesystem::path(path).extension() != ".jsonl") return false;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json::Value row = json::parse(line);
      return is_conversation_row(row);
    } catch (const Error&) {
      return false;  // not JSON: whoever reads the file says so
    }
  }
  return false;
}

std::shared_ptr<const TokenCorpus> tokenize_chat_jsonl_file(const std::string& path, const Tokenizer& tok,
                                                            const TextOptions& options) {
  return tokenize_chat_rows(read_jsonl_objects(path, options, "tokenize_chat_jsonl_file"), tok, path, options);
}

}  // namespace tg::data
