// data/chat_dataset.h: conversations rendered with real chat templates (tests/fixtures/chat_dataset/,
// made by its make_fixtures.py: small tokenizers with the templates' added tokens), labelled only
// in the assistant turns, token by token; the JSONL reader, its dispatch and its errors; and
// Tokenizer::encode_with_cuts, which maps the turns onto tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "data/chat_dataset.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "io/json.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace tg::data;
using tg::test::TempDir;

namespace {

const fs::path kDir = fs::path(TG_TESTS_DIR) / "fixtures" / "chat_dataset";

Tokenizer chat_tokenizer(const std::string& folder) { return Tokenizer::from_pretrained((kDir / folder).string()); }

std::tm fixed_time() {  // 9 Mar 2025, as the chat template fixtures
  std::tm t{};
  t.tm_year = 125, t.tm_mon = 2, t.tm_mday = 9, t.tm_hour = 14, t.tm_min = 5;
  mktime(&t);
  return t;
}

void write(const fs::path& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

// The learned stretches of an example: decoded (byte-level tokenizers decode exactly), or as
// their tokens' strings joined by '|' (sentencepiece-style ones, whose decoder drops spaces).
std::vector<std::string> learned(const Tokenizer& tok, const ChatExample& ex, bool as_tokens = false) {
  EXPECT_EQ(ex.ids.size(), ex.labels.size());
  std::vector<std::string> runs;
  for (size_t t = 0; t < ex.ids.size();) {
    if (ex.labels[t] == kIgnoreIndex) {
      ++t;
      continue;
    }
    std::vector<int32_t> run;
    for (; t < ex.ids.size() && ex.labels[t] != kIgnoreIndex; ++t) {
      EXPECT_EQ(ex.labels[t], ex.ids[t]) << "token " << t;
      run.push_back(ex.ids[t]);
    }
    std::string s;
    if (as_tokens) {
      for (size_t i = 0; i < run.size(); ++i) s += (i ? "|" : "") + tok.id_to_token(run[i]);
    } else {
      s = tok.decode(run);
    }
    runs.push_back(s);
  }
  return runs;
}

// The example, after checking its ids are the whole rendering's, encoded without special tokens.
ChatExample labelled(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  const std::tm now = fixed_time();
  ChatExample ex = tokenize_conversation(tok, messages, &now);
  EXPECT_EQ(ex.ids, tok.encode(tok.chat_template()->render(messages, {}, &now), false));
  return ex;
}

const std::vector<ChatMessage> kSystem = {
    {"system", "You are a terse assistant."}, {"user", "What is 2 + 2?"}, {"assistant", "4."}};
const std::vector<ChatMessage> kMultiTurn = {
    {"user", "Name a colour."}, {"assistant", "Blue."}, {"user", "Another one?"}, {"assistant", "Green, then red."}};
const std::vector<ChatMessage> kEmptyReply = {{"user", "Hi"}, {"assistant", ""}, {"user", "Well?"}, {"assistant", "Yes."}};

using Runs = std::vector<std::string>;

}  // namespace

TEST(ChatDataset, Llama3LearnsEachReplyAndItsEotId) {
  const Tokenizer tok = chat_tokenizer("llama3.2");
  EXPECT_EQ(learned(tok, labelled(tok, kSystem)), (Runs{"4.<|eot_id|>"}));
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn)), (Runs{"Blue.<|eot_id|>", "Green, then red.<|eot_id|>"}));
  EXPECT_EQ(learned(tok, labelled(tok, kEmptyReply)), (Runs{"<|eot_id|>", "Yes.<|eot_id|>"}));
  // The template writes <|begin_of_text|> itself: once, and not learned.
  const ChatExample ex = labelled(tok, kSystem);
  EXPECT_EQ(ex.ids[0], *tok.bos_token_id());
  EXPECT_EQ(std::count(ex.ids.begin(), ex.ids.end(), *tok.bos_token_id()), 1);
  EXPECT_EQ(ex.labels[0], kIgnoreIndex);
}

TEST(ChatDataset, Qwen25LearnsTheReplyImEndAndItsNewline) {
  const Tokenizer tok = chat_tokenizer("qwen2.5");
  EXPECT_EQ(learned(tok, labelled(tok, kSystem)), (Runs{"4.<|im_end|>\n"}));
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn)), (Runs{"Blue.<|im_end|>\n", "Green, then red.<|im_end|>\n"}));
  EXPECT_EQ(learned(tok, labelled(tok, kEmptyReply)), (Runs{"<|im_end|>\n", "Yes.<|im_end|>\n"}));
}

TEST(ChatDataset, Qwen3KeepsTheEmptyThinkBlockOnlyInTheLastTurn) {
  // Qwen3 writes "<think>\n\n</think>\n\n" into a reply after the last user message only: an
  // earlier turn rendered last has it, the whole conversation does not.
  const Tokenizer tok = chat_tokenizer("qwen3");
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn)),
            (Runs{"Blue.<|im_end|>\n", "<think>\n\n</think>\n\nGreen, then red.<|im_end|>\n"}));
  EXPECT_EQ(learned(tok, labelled(tok, kSystem)), (Runs{"<think>\n\n</think>\n\n4.<|im_end|>\n"}));
  EXPECT_EQ(learned(tok, labelled(tok, kEmptyReply)), (Runs{"<|im_end|>\n", "<think>\n\n</think>\n\nYes.<|im_end|>\n"}));
}

TEST(ChatDataset, GemmaLearnsTheModelTurnsOfASentencepieceTokenizer) {
  // The sentencepiece-style normalizer prepends "▁" to every piece between added tokens, so a
  // turn's first token ("B" of "model\nBlue.") is not what "Blue." encodes to alone.
  const Tokenizer tok = chat_tokenizer("gemma3");
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn), true),
            (Runs{"B|l|u|e|.|<end_of_turn>|▁\n", "G|re|en|,|▁the|n|▁re|d|.|<end_of_turn>|▁\n"}));
  EXPECT_EQ(learned(tok, labelled(tok, kSystem), true), (Runs{"4|.|<end_of_turn>|▁\n"}));
}

TEST(ChatDataset, MistralLearnsTheReplyAndEos) {
  const Tokenizer tok = chat_tokenizer("mistral0.3");
  // " Blue." after [/INST] is a piece of its own, normalized to "▁▁Blue.".
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn), true), (Runs{"▁|▁B|l|u|e|.|</s>", "▁|▁|G|re|en|,|▁the|n|▁re|d|.|</s>"}));
  EXPECT_EQ(learned(tok, labelled(tok, {{"user", "Hi"}, {"assistant", ""}}), true), (Runs{"▁|▁|</s>"}));
}

TEST(ChatDataset, Phi35LearnsTheFinalEndoftextOnlyAfterTheLastTurn) {
  // Phi-3.5 ends a conversation (no generation prompt) with <|endoftext|>: an earlier turn rendered
  // last has it, the whole conversation has it only after the last.
  const Tokenizer tok = chat_tokenizer("phi3.5");
  // <|assistant|> and <|end|> take the newline after them (rstrip), so a reply is a piece of its own.
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn), true),
            (Runs{"▁B|l|u|e|.|<|end|>", "▁|G|re|en|,|▁the|n|▁re|d|.|<|end|>|<|endoftext|>"}));
  EXPECT_EQ(learned(tok, labelled(tok, kSystem), true), (Runs{"▁|4|.|<|end|>|<|endoftext|>"}));
}

TEST(ChatDataset, GenerationBlocksMarkTheTurns) {
  const Tokenizer tok = chat_tokenizer("generation");
  ASSERT_TRUE(tok.chat_template()->has_generation_blocks());
  EXPECT_EQ(learned(tok, labelled(tok, kMultiTurn)), (Runs{"Blue.<|im_end|>", "Green, then red.<|im_end|>"}));
  EXPECT_EQ(learned(tok, labelled(tok, kSystem)), (Runs{"4.<|im_end|>"}));
}

TEST(ChatDataset, EveryTemplateLearnsEachTurnOfUnicodeAndWhitespaceReplies) {
  const std::vector<ChatMessage> unicode = {{"user", "Grüße, 世界! 🙂"}, {"assistant", "日本語で答えます。🚀 naïve"}};
  const std::vector<ChatMessage> spaces = {{"user", "  spaced  "},
                                           {"assistant", "\n\n  indented reply\n"},
                                           {"user", "ok"},
                                           {"assistant", " the tokenizer "}};
  for (const char* folder : {"llama3.2", "qwen2.5", "qwen3", "gemma2", "gemma3", "mistral0.3", "phi3.5", "generation"}) {
    const Tokenizer tok = chat_tokenizer(folder);
    EXPECT_EQ(learned(tok, labelled(tok, unicode)).size(), 1u) << folder;
    EXPECT_EQ(learned(tok, labelled(tok, spaces)).size(), 2u) << folder;
  }
  const Tokenizer llama = chat_tokenizer("llama3.2");  // Llama trims the replies
  EXPECT_EQ(learned(llama, labelled(llama, spaces)), (Runs{"indented reply<|eot_id|>", "the tokenizer<|eot_id|>"}));
  EXPECT_EQ(learned(llama, labelled(llama, unicode)), (Runs{"日本語で答えます。🚀 naïve<|eot_id|>"}));
  const Tokenizer qwen = chat_tokenizer("qwen2.5");  // Qwen2.5 keeps them as they are
  EXPECT_EQ(learned(qwen, labelled(qwen, spaces)),
            (Runs{"\n\n  indented reply\n<|im_end|>\n", " the tokenizer <|im_end|>\n"}));
}

TEST(ChatDataset, ATokenAcrossATurnsEdgeIsLearned) {
  // A generation block that begins inside a word: " token" + "izer and" encodes " tokenizer" as
  // one token, which is learned (transformers' masks count a token that overlaps the turn).
  TempDir dir;
  const fs::path folder = dir / "tok";
  fs::create_directories(folder);
  fs::copy_file(kDir / "qwen2.5" / "tokenizer.json", folder / "tokenizer.json");
  write(folder / "tokenizer_config.json",
        R"({"eos_token": "<|im_end|>", "chat_template": "{% for m in messages %}{% if m.role == 'assistant' %})"
        R"({% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"})");
  const Tokenizer tok = Tokenizer::from_pretrained(folder.string());
  EXPECT_EQ(learned(tok, labelled(tok, {{"user", " token"}, {"assistant", "izer and"}})), (Runs{" tokenizer and"}));
}

// Issue 47: a conversation of which no token is learned (every label -100) trained on nothing
// without a word; it is an error naming the file and row, before any row where the template alone
// tells (its {% generation %} blocks all empty).
TEST(ChatDataset, AConversationWithNothingToLearnIsAnErrorNamingItsRow) {
  TempDir dir;
  const fs::path folder = dir / "tok";
  fs::create_directories(folder);
  fs::copy_file(kDir / "qwen2.5" / "tokenizer.json", folder / "tokenizer.json");
  auto tokenizer_with = [&](const std::string& assistant_turn) {
    tg::json::Value config = tg::json::Value::object();
    config.set("eos_token", "<|im_end|>");
    config.set("chat_template", "{% for m in messages %}{% if m.role == 'assistant' %}" + assistant_turn +
                                    "{% else %}{{ m.content }}{% endif %}{% endfor %}");
    write(folder / "tokenizer_config.json", tg::json::dump(config));
    return Tokenizer::from_pretrained(folder.string());
  };
  const std::tm now = fixed_time();
  const std::vector<ChatMessage> turn = {{"user", "Hi"}, {"assistant", "Hello."}};
  const std::string row = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
  write(dir / "chat.jsonl", row + "\n" + row + "\n");

  const Tokenizer empty = tokenizer_with("{{ m.content }}{% generation %}{% endgeneration %}");
  EXPECT_ERROR_HAS(tokenize_conversation(empty, turn, &now), "{% generation %} blocks that are all empty",
                   "not one token would be learned");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "chat.jsonl", empty), "chat.jsonl': the chat template", "all empty");
  // Blocks that render nothing for this conversation: the row is named.
  const Tokenizer blank = tokenizer_with("{{ m.content }}{% generation %}{{ '' }}{% endgeneration %}");
  EXPECT_ERROR_HAS(tokenize_conversation(blank, turn, &now), "{% generation %} blocks, but they rendered nothing");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "chat.jsonl", blank), "chat.jsonl' line 1", "rendered nothing");
  // A block that holds only the start of a special token marks no token of its own.
  const Tokenizer split = tokenizer_with("{{ m.content }}{% generation %}<|im{% endgeneration %}_end|>");
  EXPECT_ERROR_HAS(tokenize_conversation(split, turn, &now), "not one token of the conversation's assistant turns is learned",
                   "every label would be -100");
}

TEST(ChatDataset, EncodeWithCutsPlacesOffsetsBetweenAndInsideTokens) {
  const Tokenizer tok = chat_tokenizer("qwen2.5");
  const std::string text = "<|im_start|> the tokenizer<|im_end|>";
  const std::vector<int32_t> ids = tok.encode(text, false);
  ASSERT_EQ(ids.size(), 4u);  // <|im_start|>, " the", " tokenizer", <|im_end|>
  // Between tokens, and inside " tokenizer" (20) and <|im_end|> (30).
  const std::vector<size_t> cuts = {0, 12, 16, 20, 26, 30, text.size()};
  const std::vector<std::pair<size_t, size_t>> want = {{0, 0}, {1, 1}, {2, 2}, {2, 3}, {3, 3}, {3, 4}, {4, 4}};
  std::vector<Tokenizer::TokenCut> where;
  EXPECT_EQ(tok.encode_with_cuts(text, cuts, where), ids);
  ASSERT_EQ(where.size(), cuts.size());
  for (size_t i = 0; i < cuts.size(); ++i) {
    EXPECT_EQ(where[i].before, want[i].first) << "cut at byte " << cuts[i];
    EXPECT_EQ(where[i].after, want[i].second) << "cut at byte " << cuts[i];
  }
  EXPECT_ERROR_HAS(tok.encode_with_cuts(text, std::vector<size_t>{5, 3}, where), "encode_with_cuts", "ascending");
}

TEST(ChatDataset, RefusesWhatCannotBeLearned) {
  const std::tm now = fixed_time();
  EXPECT_ERROR_HAS(tokenize_conversation(chat_tokenizer("qwen2.5"), std::vector<ChatMessage>{{"user", "Hi"}}, &now),
                   "no assistant turn");
  // Gemma-2 raises on a system message.
  EXPECT_ERROR_HAS(tokenize_conversation(chat_tokenizer("gemma2"), kSystem, &now), "System role not supported");
  // Mistral v0.3 moves the system message to the last user turn: the earlier turns render
  // differently once more follow, so their tokens cannot be told.
  const std::vector<ChatMessage> moved = {{"system", "Be brief."}, {"user", "Hi"},     {"assistant", "Hello."},
                                          {"user", "Bye"},         {"assistant", "Bye."}};
  EXPECT_ERROR_HAS(tokenize_conversation(chat_tokenizer("mistral0.3"), moved, &now), "mistral0.3",
                   "assistant turn messages[2]", "does not begin the whole conversation's rendering", "at byte",
                   "{% generation %}");
}

// Issue 47: a message's invalid UTF-8 (a row built in C++, a character cut short) reached the
// template, whose string methods decoded past it; it is refused where it enters, by field and byte.
TEST(ChatDataset, InvalidUtf8InAMessageIsAnErrorNamingItsFieldAndByte) {
  const std::tm now = fixed_time();
  const Tokenizer tok = chat_tokenizer("qwen2.5");
  std::vector<ChatMessage> m = {{"user", "Hi"}, {"assistant", "It costs 5 \xE2\x82"}};
  EXPECT_ERROR_HAS(tokenize_conversation(tok, m, &now), "messages[1].content is not text",
                   "invalid UTF-8 (byte 0xe2) at byte 11");
  m[1].content = "Fine.";
  m[0].role = "us\xff";
  EXPECT_ERROR_HAS(tok.apply_chat_template(m), "apply_chat_template", "messages[0].role is not text", "(byte 0xff) at byte 2");
  // What the template saw: the euro sign's first two bytes and the string's end as one character.
  const ChatTemplate last("{{ messages[0].content[-1] }}", {});
  EXPECT_ERROR_HAS(last.render(std::vector<ChatMessage>{{"user", "5 \xE2\x82"}}), "messages[0].content is not text");
}

TEST(ChatDataset, JsonlFileWithMessagesIsReadAsConversations) {
  TempDir dir;
  const Tokenizer tok = chat_tokenizer("qwen2.5");
  write(dir / "chat.jsonl",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Name a colour.\"}, {\"role\": \"assistant\", \"content\": "
        "\"Blue.\"}], \"id\": 7}\n\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be terse.\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, "
        "{\"role\": \"assistant\", \"content\": \"4.\"}]}\n");
  for (const auto& corpus : {tokenize_jsonl_file(dir / "chat.jsonl", tok), tokenize_chat_jsonl_file(dir / "chat.jsonl", tok)}) {
    ASSERT_EQ(corpus->examples(), 2);
    for (int64_t e = 0; e < 2; ++e) {
      const auto [b, end] = corpus->example(e);
      ChatExample ex;
      ex.ids.resize(static_cast<size_t>(end - b));
      ex.labels.resize(ex.ids.size());
      corpus->read(b, end - b, ex.ids.data(), ex.labels.data());
      EXPECT_EQ(learned(tok, ex), (Runs{e == 0 ? "Blue.<|im_end|>\n" : "4.<|im_end|>\n"}));
    }
  }
}

TEST(ChatDataset, JsonlErrorsNameTheFileLineAndField) {
  TempDir dir;
  const Tokenizer tok = chat_tokenizer("qwen2.5");
  const std::string ok = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
  auto refused = [&](const std::string& second_line, auto... parts) {
    write(dir / "bad.jsonl", ok + "\n" + second_line + "\n");
    EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "bad.jsonl", tok), "bad.jsonl' line 2", parts...);
  };
  refused(R"({"text": "plain"})", "no \"messages\"");
  refused(R"({"messages": "Hi"})", "\"messages\" wants a list", "got string");
  refused(R"({"messages": [{"role": "user"}]})", "messages[0].content wants a string", "got nothing");
  refused(R"({"messages": [{"role": "user", "content": null}]})", "messages[0].content wants a string", "got null");
  refused(R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": []}]})", "messages[0] has \"tool_calls\"");
  refused(R"({"messages": [{"role": "user", "content": "Hi"}], "tools": []})", "\"tools\"");
  refused(R"({"messages": [{"role": "user", "content": "Hi"}]})", "no assistant turn");
  // A text file read as JSONL whose later row holds messages is named as such.
  write(dir / "mixed.jsonl", "{\"text\": \"a\"}\n" + ok + "\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "mixed.jsonl", tok), "line 2", "only when the first row");
  // A tokenizer without a chat template.
  const Tokenizer plain = Tokenizer::from_pretrained((kDir.parent_path() / "tokenizers" / "qwen2").string());
  write(dir / "chat.jsonl", ok + "\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "chat.jsonl", plain), "chat.jsonl' holds conversations", "no chat template");
}

TEST(ChatDataset, LabelsMatchTransformers) {
  // expected.json: check_transformers.py's labels, made with transformers on the GPU machine.
  const fs::path file = kDir / "expected.json";
  if (!fs::exists(file)) GTEST_SKIP() << "no " << file << ": run tests/fixtures/chat_dataset/check_transformers.py";
  std::ifstream in(file, std::ios::binary);
  const tg::json::Value expected = tg::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  const std::tm now = fixed_time();
  std::map<std::string, Tokenizer> tokenizers;
  for (const tg::json::Value& c : expected.at("cases").as_array()) {
    const std::string folder = c.at("folder").as_string(), what = folder + " " + c.at("conversation").as_string();
    if (!tokenizers.count(folder)) tokenizers.emplace(folder, chat_tokenizer(folder));
    const Tokenizer& tok = tokenizers.at(folder);
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages").as_array()) messages.push_back({m.at("role").as_string(), m.at("content").as_string()});
    if (c.find("error")) {
      EXPECT_THROW(tokenize_conversation(tok, messages, &now), tg::Error) << what;
      continue;
    }
    auto ints = [](const tg::json::Value& v) {
      std::vector<int32_t> out;
      for (const auto& x : v.as_array()) out.push_back(static_cast<int32_t>(x.as_int()));
      return out;
    };
    EXPECT_EQ(tok.chat_template()->render(messages, {}, &now), c.at("rendered").as_string()) << what;
    const ChatExample ex = tokenize_conversation(tok, messages, &now);
    EXPECT_EQ(ex.ids, ints(c.at("ids"))) << what;
    // One difference by design: the script learns every token a turn's span touches, so where a
    // turn's text ends in the first characters of the next special token ("<|" of Phi-3.5's
    // <|endoftext|> against <|user|>), it learns that token too; tokenize_conversation does not.
    const std::vector<int32_t> want = ints(c.at("labels"));
    ASSERT_EQ(ex.labels.size(), want.size()) << what;
    for (size_t t = 0; t < want.size(); ++t) {
      if (ex.labels[t] == want[t]) continue;
      EXPECT_TRUE(ex.labels[t] == -100 && tok.is_special(want[t]) && t > 0 && want[t - 1] != -100)
          << what << ": token " << t << " is labelled " << ex.labels[t] << ", transformers' script " << want[t];
    }
  }
}
