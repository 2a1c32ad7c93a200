// Preference data as TRL reads it (data/preference.h): text and conversation rows encoded as
// DPOTrainer encodes them, bad rows named, TRL's truncation, the concatenated batch's layout,
// KTO's mismatched KL rows, GRPO's prompts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/chat_rows.h"
#include "data/preference.h"
#include "tests/test_support.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using data::Completion;
using data::TruncationOptions;
using test::TempDir;

const fs::path kTests = fs::path(TG_TESTS_DIR) / "fixtures";

data::Tokenizer text_tokenizer() { return data::Tokenizer::from_pretrained((kTests / "tokenizers" / "tiny_llama").string()); }
data::Tokenizer chat_tokenizer() { return data::Tokenizer::from_pretrained((kTests / "chat_dataset" / "qwen2.5").string()); }

std::string write(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "rows.jsonl";
  std::ofstream(path) << text;
  return path;
}

std::vector<int32_t> tail(const std::vector<int32_t>& v, size_t from) { return {v.begin() + static_cast<long>(from), v.end()}; }

TEST(PreferenceData, TextPairsAreEncodedAsTrlDoes) {
  TempDir dir;
  const data::Tokenizer tok = text_tokenizer();
  const auto pairs = data::read_preference_jsonl(
      write(dir, R"({"prompt": "Q: sky?\nA:", "chosen": " blue", "rejected": " green</s>"})" "\n"), tok);
  ASSERT_EQ(pairs.size(), 1u);
  const std::vector<int32_t> prompt = tok.encode("Q: sky?\nA:");
  EXPECT_EQ(pairs[0].prompt, prompt);
  EXPECT_EQ(pairs[0].chosen, tail(tok.encode("Q: sky?\nA: blue</s>"), prompt.size()));
  EXPECT_EQ(pairs[0].rejected, tail(tok.encode("Q: sky?\nA: green</s>"), prompt.size()));  // no second EOS
  EXPECT_EQ(pairs[0].chosen.back(), *tok.eos_token_id());
}

TEST(PreferenceData, ConversationsAreRenderedWithTheChatTemplate) {
  TempDir dir;
  const data::Tokenizer tok = chat_tokenizer();
  const auto pairs = data::read_preference_jsonl(write(dir, R"({"prompt": [{"role": "user", "content": "Hi"}],)"
                                                            R"( "chosen": [{"role": "assistant", "content": "Hello!"}],)"
                                                            R"( "rejected": [{"role": "assistant", "content": "Go."}]})"),
                                                 tok);
  const std::vector<data::ChatMessage> prompt = {{"user", "Hi"}};
  const std::vector<data::ChatMessage> chosen = {{"user", "Hi"}, {"assistant", "Hello!"}};
  const std::vector<int32_t> p = tok.encode(tok.apply_chat_template(prompt, {.add_generation_prompt = true, .limits = {}}), false);
  EXPECT_EQ(pairs[0].prompt, p);
  EXPECT_EQ(pairs[0].chosen, tail(tok.encode(tok.apply_chat_template(chosen), false), p.size()));
  EXPECT_NE(tok.decode(pairs[0].chosen).find("Hello!<|im_end|>"), std::string::npos);

  const auto prompts = data::read_prompt_jsonl(write(dir, R"({"prompt": [{"role": "user", "content": "Hi"}], "answer": "a"})"), tok);
  EXPECT_EQ(prompts[0].ids, p);
  EXPECT_EQ(prompts[0].row.at("answer").as_string(), "a");
}

// A conversation's messages are read as the SFT rows' are: a tool call (content null beside
// tool_calls) and the tool's answer reach the template whole; a bad message is named by its field.
TEST(PreferenceData, ConversationMessagesAreReadAsChatRowsAre) {
  TempDir dir;
  const data::Tokenizer tok = chat_tokenizer();
  const std::string prompt = R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, )"
                             R"("tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {}}}]}, )"
                             R"({"role": "tool", "content": "sunny"}])";
  const auto pairs = data::read_preference_jsonl(
      write(dir, R"({"prompt": )" + prompt + R"(, "chosen": [{"role": "assistant", "content": "Sunny."}],)"
                 R"( "rejected": [{"role": "assistant", "content": "Rain."}]})"),
      tok);
  const data::Conversation c = data::conversation_of(json::parse(R"({"messages": )" + prompt + "}"), "row");
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(pairs[0].prompt,
            tok.encode(tok.apply_chat_template(c.messages, {.add_generation_prompt = true, .limits = {}}), false));
  EXPECT_ERROR_HAS(data::read_preference_jsonl(write(dir, R"({"prompt": [{"content": "a"}], "chosen": [], "rejected": []})"),
                                               tok),
                   "read_preference_jsonl", "line 1", "prompt[0].role wants a string");
}

TEST(PreferenceData, BadRowsAreNamed) {
  TempDir dir;
  const data::Tokenizer tok = text_tokenizer();
  auto pairs_of = [&](const std::string& rows) { return data::read_preference_jsonl(write(dir, rows), tok); };
  const std::string ok = R"({"prompt": "a", "chosen": " b", "rejected": " c"})" "\n";
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"prompt": "a", "chosen": " b"})"), "read_preference_jsonl", "line 2",
                   "has no \"rejected\"");
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"prompt": "a", "chosen": " b", "rejected": " b"})"), "line 2",
                   "\"chosen\" equals \"rejected\"");
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"prompt": "a", "chosen": "", "rejected": " c"})"), "line 2", "\"chosen\" is empty");
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"prompt": "a", "chosen": 3, "rejected": " c"})"), "line 2",
                   "\"chosen\" wants a string", "got int");
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"chosen": "a b", "rejected": "a c"})"), "line 2", "has no \"prompt\"",
                   "implicit-prompt");
  EXPECT_ERROR_HAS(pairs_of(ok + R"({"prompt": [{"role": "user", "content": "a"}], "chosen": " b", "rejected": " c"})"),
                   "line 2", "\"prompt\" wants a string, as the file's first row has");
  EXPECT_ERROR_HAS(pairs_of(R"({"prompt": [{"role": "user", "content": "a"}], "chosen": [{"role": "assistant", "content": "b"}],)"
                            R"( "rejected": [{"role": "assistant", "content": "c"}]})"),
                   "holds conversations but the tokenizer", "has no chat template");
  EXPECT_ERROR_HAS(pairs_of(""), "holds no rows");
  auto unpaired_of = [&](const std::string& rows) { return data::read_unpaired_jsonl(write(dir, rows), tok); };
  EXPECT_ERROR_HAS(unpaired_of(R"({"prompt": "a", "completion": " b", "label": 1})"), "read_unpaired_jsonl", "line 1",
                   "\"label\" wants true (desirable) or false, got int");
  EXPECT_ERROR_HAS(unpaired_of(R"({"prompt": "a", "completion": " b"})"), "\"label\" wants true", "got nothing");
  EXPECT_EQ(unpaired_of(R"({"prompt": "a", "completion": " b", "label": false})").at(0).label, false);
  EXPECT_ERROR_HAS(data::read_prompt_jsonl(write(dir, R"({"prompt": ""})"), tok), "read_prompt_jsonl", "is empty");
}

TEST(PreferenceData, TruncationIsTrls) {
  const std::vector<int32_t> prompt = {1, 2, 3}, completion = {4, 5, 6, 7, 8};
  Completion c = data::truncated(prompt, completion, {.max_length = 6});
  EXPECT_EQ(c.ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(c.prompt_tokens, 3);
  EXPECT_EQ(c.predicted(), 3);
  c = data::truncated(prompt, completion, {.max_length = 6, .truncation_mode = "keep_end"});
  EXPECT_EQ(c.ids, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(c.prompt_tokens, 1);
  c = data::truncated(prompt, completion, {.max_length = 0, .max_prompt_length = 2, .max_completion_length = 3});
  EXPECT_EQ(c.ids, (std::vector<int32_t>{2, 3, 4, 5, 6}));  // the prompt's end, the completion's start
  EXPECT_EQ(c.prompt_tokens, 2);
  EXPECT_TRUE(data::truncated(prompt, completion, {.max_length = 3}).ids.empty());  // the prompt fills it: dropped

  const std::vector<data::PreferencePair> pairs = {{{1, 2, 3}, {4, 5}, {6}}, {{1, 2, 3, 4, 5}, {6}, {7}}};
  const data::PreferenceDataset ds(pairs, {.max_length = 5});
  EXPECT_EQ(ds.rows(), 1);
  EXPECT_EQ(ds.dropped(), 1);
  EXPECT_EQ(ds.longest(), 5);
  EXPECT_ERROR_HAS(data::PreferenceDataset(pairs, {.truncation_mode = "left"}), "PreferenceDataset", "truncation_mode");
}

TEST(PreferenceData, ABatchIsTheChosenRowsThenTheRejectedRightPadded) {
  const std::vector<data::PreferencePair> pairs = {{{1, 2}, {3, 4, 5}, {6}}, {{7}, {8}, {9, 10}}};
  const data::PreferenceDataset ds(pairs, {}, /*pad_id=*/0);
  const std::vector<int64_t> rows = {1, 0};
  const data::PreferenceBatch b = ds.rows_batch(rows, Device::cpu());
  EXPECT_EQ(b.ids.shape(), Shape({4, 5}));
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 0, 0, 0,  1, 2, 3, 4, 5,  7, 9, 10, 0, 0,  1, 2, 6, 0, 0}));
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{-100, 8, -100, -100, -100,  -100, -100, 3, 4, 5,
                                                                 -100, 9, 10, -100, -100,  -100, -100, 6, -100, -100}));
  EXPECT_EQ(b.completion_tokens, (std::vector<int64_t>{1, 3, 2, 1}));
  EXPECT_EQ(b.rows, rows);
  // the seeded order: the same batches for the same seed
  EXPECT_EQ(ds.batch_rows(3, 1, 7), ds.batch_rows(3, 1, 7));
}

TEST(PreferenceData, KtoKlRowsPairEachPromptWithThePreviousRowsCompletion) {
  const std::vector<data::UnpairedExample> ex = {{{1, 2}, {3}, true}, {{4}, {5, 6}, false}, {{7}, {8}, true}};
  const data::UnpairedPreferenceDataset ds(ex);
  EXPECT_EQ(ds.desirable(), 2);
  const std::vector<int64_t> rows = {0, 1, 2};
  const data::UnpairedBatch b = ds.rows_batch(rows, Device::cpu());
  EXPECT_EQ(b.desirable, (std::vector<bool>{true, false, true}));
  // (x0, y2), (x1, y0), (x2, y1)
  EXPECT_EQ(b.kl_ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 8, 4, 3, 0, 7, 5, 6}));
  EXPECT_EQ(b.kl_labels.to_vector<int64_t>(), (std::vector<int64_t>{-100, -100, 8, -100, 3, -100, -100, 5, 6}));
}

}  // namespace
}  // namespace tg
