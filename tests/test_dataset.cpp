// data/dataset.h: text, JSONL and token files to rows of ids and labels; packing, padding,
// the seeded order, the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "io/json.h"
#include "tests/test_support.h"

using namespace tg::data;
using tg::test::TempDir;

namespace {

void write(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

// A byte-level BPE without merges: every byte is its own token (id = the byte), EOS 256.
Tokenizer byte_tokenizer(const TempDir& dir) {
  tg::json::Value vocab = tg::json::Value::object();
  const std::string printable = "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";
  int n = 0;
  for (int b = 0; b < 256; ++b) {  // GPT-2's byte alphabet
    const bool p = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t c = p ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    std::string s;
    if (c < 0x80) s += static_cast<char>(c);
    else s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
    vocab.set(s, b);
  }
  tg::json::Value model = tg::json::Value::object();
  model.set("type", "BPE").set("vocab", vocab).set("merges", tg::json::Value::array());
  tg::json::Value eos = tg::json::Value::object();
  eos.set("id", 256).set("content", "<|endoftext|>").set("special", true).set("normalized", false);
  tg::json::Value pre = tg::json::Value::object();
  pre.set("type", "ByteLevel").set("add_prefix_space", false).set("use_regex", true);
  tg::json::Value dec = tg::json::Value::object();
  dec.set("type", "ByteLevel");
  tg::json::Value root = tg::json::Value::object();
  root.set("added_tokens", tg::json::Value::array({eos})).set("pre_tokenizer", pre).set("model", model).set("decoder", dec);
  std::filesystem::create_directories(dir / "tok");
  write(dir / "tok/tokenizer.json", tg::json::dump(root));
  write(dir / "tok/tokenizer_config.json", R"({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})");
  return Tokenizer::from_pretrained(dir / "tok");
}

std::vector<int32_t> read_all(const TokenCorpus& c, bool labels) {
  std::vector<int32_t> out(static_cast<size_t>(c.size()));
  c.read(0, c.size(), labels ? nullptr : out.data(), labels ? out.data() : nullptr);
  return out;
}

std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

TEST(Dataset, JsonlPromptTokensAreLabelledIgnoreAndEachExampleEndsInEos) {
  TempDir dir;
  const Tokenizer tok = byte_tokenizer(dir);
  write(dir / "d.jsonl", "{\"prompt\": \"Q: hi\", \"completion\": \" A: yo\"}\n\n{\"text\": \"doc\"}\n");
  auto c = tokenize_jsonl_file(dir / "d.jsonl", tok);
  ASSERT_EQ(c->examples(), 2);
  std::vector<int32_t> want = bytes("Q: hi A: yo");
  want.push_back(256);
  for (int32_t v : bytes("doc")) want.push_back(v);
  want.push_back(256);
  EXPECT_EQ(read_all(*c, false), want);
  std::vector<int32_t> labels(5, kIgnoreIndex);
  for (int32_t v : bytes(" A: yo")) labels.push_back(v);
  labels.push_back(256);
  for (int32_t v : bytes("doc")) labels.push_back(v);
  labels.push_back(256);
  EXPECT_EQ(read_all(*c, true), labels);
}

std::filesystem::path tokenizer_fixtures() { return std::filesystem::path(TG_TESTS_DIR) / "fixtures" / "tokenizers"; }

// Llama-2's tokenizer (Metaspace, legacy): a completion encoded on its own began with a lone
// "▁" (the issue's 28705) that the text encoded in one piece never has. As TRL: prompt +
// completion encoded together, the prompt's own length not learned.
TEST(Dataset, PromptAndCompletionAreEncodedTogetherAsInferenceSeesThem) {
  TempDir dir;
  const Tokenizer tok = Tokenizer::from_pretrained(tokenizer_fixtures() / "spm_legacy");
  write(dir / "d.jsonl", "{\"prompt\": \"Translate to French: cheese\", \"completion\": \" fromage\"}\n");
  std::vector<std::string> warnings;
  const TextOptions options{.warn = [&](const std::string& w) { warnings.push_back(w); }};
  auto c = tokenize_jsonl_file(dir / "d.jsonl", tok, options);
  std::vector<int32_t> want = tok.encode("Translate to French: cheese fromage");
  want.push_back(*tok.eos_token_id());
  EXPECT_EQ(read_all(*c, false), want);
  const size_t prompt = tok.encode("Translate to French: cheese").size();
  std::vector<int32_t> labels = want;
  std::fill_n(labels.begin(), prompt, kIgnoreIndex);
  EXPECT_EQ(read_all(*c, true), labels);
  EXPECT_TRUE(warnings.empty());
  // The old way's lone piece is not there.
  const auto lone = tok.token_to_id("\xE2\x96\x81");
  ASSERT_TRUE(lone.has_value());
  EXPECT_EQ(std::count(want.begin(), want.end(), *lone), 0);
}

TEST(Dataset, PromptTokensThatAreNotAPrefixWarnOnceWithTheCount) {
  TempDir dir;
  const Tokenizer tok = Tokenizer::from_pretrained(tokenizer_fixtures() / "spm_legacy");
  // A prompt ending in a space: alone it ends in "▁", together the space joins the next word.
  write(dir / "d.jsonl", "{\"prompt\": \"Q: cheese \", \"completion\": \"fromage\"}\n"
                         "{\"text\": \"a document\"}\n"
                         "{\"prompt\": \"Q: bread \", \"completion\": \"pain\"}\n"
                         "{\"prompt\": \"Q: wine\", \"completion\": \" vin\"}\n");
  std::vector<std::string> warnings;
  auto c = tokenize_jsonl_file(dir / "d.jsonl", tok, {.warn = [&](const std::string& w) { warnings.push_back(w); }});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("in 2 of 3 prompt / completion examples (the first at line 1)"), std::string::npos)
      << warnings[0];
  // The labels still start after the prompt's own length, as TRL takes them.
  const std::vector<int32_t> whole = tok.encode("Q: cheese fromage");
  const std::vector<int32_t> labels = read_all(*c, true);
  const size_t prompt = tok.encode("Q: cheese ").size();
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(labels[i], i < prompt ? kIgnoreIndex : whole[i]) << i;
}

TEST(Dataset, JsonlErrorsNameTheFileAndLine) {
  TempDir dir;
  const Tokenizer tok = byte_tokenizer(dir);
  write(dir / "a.jsonl", "{\"text\": \"ok\"}\n{\"prompt\": \"x\"}\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "a.jsonl", tok), "a.jsonl' line 2", "\"prompt\" without \"completion\"");
  write(dir / "b.jsonl", "{\"text\": \"ok\"}\n\n{\"txt\": 1}\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "b.jsonl", tok), "line 3", "neither \"text\" nor");
  write(dir / "c.jsonl", "{\"text\": 5}\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "c.jsonl", tok), "line 1", "\"text\" wants a string");
  write(dir / "d.jsonl", "not json\n");
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "d.jsonl", tok), "d.jsonl' line 1", "json");
}

TEST(Dataset, TextDocumentsAreSplitAtTheSeparatorWithEosAfterEach) {
  TempDir dir;
  const Tokenizer tok = byte_tokenizer(dir);
  write(dir / "t.txt", "one\n\ntwo\n\n\n\nthree");
  auto c = tokenize_text_file(dir / "t.txt", tok, {.separator = "\n\n"});
  EXPECT_EQ(c->examples(), 3);
  std::vector<int32_t> want;
  for (const char* d : {"one", "two", "three"}) {
    for (int32_t v : bytes(d)) want.push_back(v);
    want.push_back(256);
  }
  EXPECT_EQ(read_all(*c, false), want);
  EXPECT_EQ(tokenize_text_file(dir / "t.txt", tok)->examples(), 1);
}

TEST(Dataset, AFileThatIsNotTextIsAnErrorUnlessAllowed) {
  TempDir dir;
  const Tokenizer tok = byte_tokenizer(dir);
  write(dir / "bin.txt", std::string("line\nok\xff\xfe", 9));
  EXPECT_ERROR_HAS(tokenize_text_file(dir / "bin.txt", tok), "bin.txt' is not text", "invalid UTF-8 (byte 0xff) at byte 7, line 2");
  // Allowed, each invalid byte reads as U+FFFD (3 bytes each here), then EOS.
  EXPECT_EQ(tokenize_text_file(dir / "bin.txt", tok, {.allow_binary = true})->size(), 7 + 2 * 3 + 1);
  write(dir / "nul.jsonl", std::string("{\"text\": \"a\"}\n\0", 15));
  EXPECT_ERROR_HAS(tokenize_jsonl_file(dir / "nul.jsonl", tok), "a NUL byte at byte 14, line 2");
  EXPECT_FALSE(text_problem("plain text, café 東京").has_value());
}

TEST(Dataset, TokenFilesRoundTripInBothWidthsMemoryMapped) {
  TempDir dir;
  const std::vector<int32_t> narrow = {0, 1, 65535, 7}, wide = {0, 70000, 3};
  write_token_file(dir / "n.bin", narrow);
  write_token_file(dir / "w.bin", wide);
  EXPECT_EQ(std::filesystem::file_size(dir / "n.bin"), 1024u + 2 * narrow.size());
  EXPECT_EQ(std::filesystem::file_size(dir / "w.bin"), 1024u + 4 * wide.size());
  EXPECT_EQ(read_all(*open_token_file(dir / "n.bin"), false), narrow);
  EXPECT_EQ(read_all(*open_token_file(dir / "w.bin"), true), wide);
  write(dir / "raw.bin", std::string("\x01\x00\x02\x00\x03\x01", 6));  // nanoGPT: headerless uint16
  EXPECT_EQ(read_all(*open_token_file(dir / "raw.bin", TokenWidth::U16), false), (std::vector<int32_t>{1, 2, 259}));
  EXPECT_ERROR_HAS(open_token_file(dir / "raw.bin"), "no llm.c header");
  write(dir / "odd.bin", "abc");
  EXPECT_ERROR_HAS(open_token_file(dir / "odd.bin", TokenWidth::U16), "not a whole number of 2-byte tokens");
  std::filesystem::resize_file(dir / "n.bin", 1024 + 4);
  EXPECT_ERROR_HAS(open_token_file(dir / "n.bin"), "its header counts 4 tokens, the file holds 2");
}

TEST(Dataset, PackedRowsAreConsecutiveWindowsAndAnEpochVisitsEachOnce) {
  std::vector<int32_t> ids(103);
  for (int i = 0; i < 103; ++i) ids[i] = i;
  SequenceDataset ds(corpus_from_examples({ids}), 10, Layout::Pack);
  ASSERT_EQ(ds.rows(), 10);
  std::set<int64_t> firsts;
  for (int64_t b = 0; b < 5; ++b) {
    Batch batch = ds.batch(b, 2, /*seed=*/3, tg::Device::cpu());
    std::vector<int64_t> v = batch.ids.to_vector<int64_t>();
    ASSERT_EQ(v.size(), 20u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(v[r * 10] % 10, 0);
      for (int t = 1; t < 10; ++t) EXPECT_EQ(v[r * 10 + t], v[r * 10] + t);
      firsts.insert(v[r * 10]);
    }
    EXPECT_EQ(batch.targets, 18);
  }
  EXPECT_EQ(firsts.size(), 10u) << "one epoch draws every row once";
  EXPECT_EQ(ds.batch(7, 3, 3, tg::Device::cpu()).ids.to_vector<int64_t>(),
            ds.batch(7, 3, 3, tg::Device::cpu()).ids.to_vector<int64_t>());
  std::vector<int64_t> seed3, seed4;
  for (int64_t b = 0; b < 5; ++b) {
    for (int64_t v : ds.batch(b, 2, 3, tg::Device::cpu()).ids.to_vector<int64_t>()) seed3.push_back(v);
    for (int64_t v : ds.batch(b, 2, 4, tg::Device::cpu()).ids.to_vector<int64_t>()) seed4.push_back(v);
  }
  EXPECT_NE(seed3, seed4) << "another seed, another order";
}

TEST(Dataset, PaddedRowsArePaddedWithIgnoredLabelsAndLongExamplesCut) {
  auto c = corpus_from_examples({{5, 6, 7}, {1, 2, 3, 4, 5, 6}}, {{-100, 6, 7}, {1, 2, 3, 4, 5, 6}});
  SequenceDataset ds(c, 4, Layout::Pad, /*pad_id=*/9);
  EXPECT_EQ(ds.rows(), 2);
  EXPECT_EQ(ds.truncated(), 1);
  Batch b = ds.rows_batch(0, 2, tg::Device::cpu());
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 9, 1, 2, 3, 4}));
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{-100, 6, 7, -100, 1, 2, 3, 4}));
  EXPECT_EQ(b.targets, 2 + 3);
}

TEST(Dataset, PackSeparateRowsHoldWholeExamplesWithTheirOwnPositions) {
  // Examples of 5, 2, 7, 3, 4, 1 and 9 tokens (the last cut to 8) into rows of 8, best fit
  // decreasing: [9->8], [7, 1], [5, 3], [4, 2] (corpus order within a row). Labels: an example's
  // first token is not predicted from the one before (-100); padding: pad_id, -100, position 0.
  std::vector<std::vector<int32_t>> ex;
  int32_t next = 1;
  for (int n : {5, 2, 7, 3, 4, 1, 9}) {
    ex.emplace_back();
    for (int t = 0; t < n; ++t) ex.back().push_back(next++);
  }
  SequenceDataset ds(corpus_from_examples(ex), 8, Layout::PackSeparate, /*pad_id=*/0);
  EXPECT_EQ(ds.layout(), Layout::PackSeparate);
  ASSERT_EQ(ds.rows(), 4);
  EXPECT_EQ(ds.truncated(), 1);
  Batch b = ds.rows_batch(0, 4, tg::Device::cpu());
  ASSERT_TRUE(b.position_ids.defined());
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{23, 24, 25, 26, 27, 28, 29, 30,   // the 9, cut
                                                               8, 9, 10, 11, 12, 13, 14, 22,    // 7, 1
                                                               1, 2, 3, 4, 5, 15, 16, 17,       // 5, 3
                                                               6, 7, 18, 19, 20, 21, 0, 0}));   // 2, 4, padding
  EXPECT_EQ(b.position_ids.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7,
                                                                        0, 1, 2, 3, 4, 5, 6, 0,
                                                                        0, 1, 2, 3, 4, 0, 1, 2,
                                                                        0, 1, 0, 1, 2, 3, 0, 0}));
  const std::vector<int64_t> labels = b.labels.to_vector<int64_t>(), ids = b.ids.to_vector<int64_t>(),
                             pos = b.position_ids.to_vector<int64_t>();
  int64_t targets = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool starts = pos[i] == 0;  // a document's first token or padding
    EXPECT_EQ(labels[i], starts ? -100 : ids[i]) << i;
    targets += i % 8 != 0 && !starts;
  }
  EXPECT_EQ(b.targets, targets);
  EXPECT_EQ(targets, 7 + 6 + 6 + 4);
  // Drawn in the seeded order like any layout, with the positions of the rows drawn.
  Batch drawn = ds.batch(1, 2, 5, tg::Device::cpu());
  ASSERT_TRUE(drawn.position_ids.defined());
  EXPECT_EQ(drawn.position_ids.shape(), drawn.ids.shape());
}

TEST(Dataset, PackSeparateSplitsByExamplesAndPacksEachPart) {
  std::vector<std::vector<int32_t>> ex;
  for (int i = 0; i < 10; ++i) ex.push_back(std::vector<int32_t>(3 + i % 4, i));
  SequenceDataset ds(corpus_from_examples(ex), 12, Layout::PackSeparate, /*pad_id=*/99);
  auto [val, train] = ds.split(0.3);  // examples 7, 8, 9 validate
  std::multiset<int64_t> seen_val, seen_train;
  for (int64_t v : val.rows_batch(0, val.rows(), tg::Device::cpu()).ids.to_vector<int64_t>()) seen_val.insert(v);
  for (int64_t v : train.rows_batch(0, train.rows(), tg::Device::cpu()).ids.to_vector<int64_t>()) seen_train.insert(v);
  for (int i = 0; i < 10; ++i) {
    const size_t n = static_cast<size_t>(3 + i % 4);
    EXPECT_EQ(seen_val.count(i), i >= 7 ? n : 0u) << i;
    EXPECT_EQ(seen_train.count(i), i < 7 ? n : 0u) << i;
  }
  EXPECT_EQ(val.rows(), 2);  // 6 + 3 + 4 tokens in rows of 12
}

TEST(Dataset, SplitTakesTheLastRowsForValidation) {
  std::vector<int32_t> ids(100);
  for (int i = 0; i < 100; ++i) ids[i] = i;
  SequenceDataset ds(corpus_from_examples({ids}), 10, Layout::Pack);
  auto [val, train] = ds.split(0.2);
  EXPECT_EQ(val.rows(), 2);
  EXPECT_EQ(train.rows(), 8);
  EXPECT_EQ(val.rows_batch(0, 1, tg::Device::cpu()).ids.to_vector<int64_t>()[0], 80);
  for (int64_t b = 0; b < 8; ++b) EXPECT_LT(train.batch(b, 1, 0, tg::Device::cpu()).ids.to_vector<int64_t>()[0], 80);
  EXPECT_ERROR_HAS(ds.split(1.0), "fraction must be in (0, 1)");
  EXPECT_ERROR_HAS(SequenceDataset(corpus_from_examples({ids}), 1, Layout::Pack), "seq must be at least 2");
}

// Batches drawn from many threads at once (the shared permutation behind a mutex) are those
// drawn alone; scripts/tsan-check.sh runs this under ThreadSanitizer.
TEST(Dataset, BatchesFromManyThreadsAtOnceAreThoseDrawnAlone) {
  std::vector<int32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 251);
  const SequenceDataset rows(corpus_from_examples({ids}), 16, Layout::Pack);
  std::vector<std::vector<int64_t>> want;
  for (int64_t b = 0; b < 64; ++b) want.push_back(rows.batch(b, 8, 3, tg::Device::cpu()).ids.to_vector<int64_t>());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      for (int64_t b = 0; b < 64; ++b) {
        const int64_t i = (b * 5 + k) % 64;  // threads in different epochs at once
        if (rows.batch(i, 8, 3, tg::Device::cpu()).ids.to_vector<int64_t>() != want[static_cast<size_t>(i)]) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace

// Issue 47: what cutting examples at seq loses (learned tokens, examples left with none), and TRL's
// keep_end, which keeps a long prompt's reply.
TEST(Dataset, TruncationReportCountsWhatTheCutLosesAndKeepEndKeepsTheEnd) {
  std::vector<int32_t> ids0, labels0;
  for (int32_t t = 1; t <= 10; ++t) ids0.push_back(t), labels0.push_back(t > 6 ? t : kIgnoreIndex);  // a long prompt
  const auto corpus = corpus_from_examples({ids0, {11, 12, 13}}, {labels0, {11, 12, 13}});
  for (Layout layout : {Layout::Pad, Layout::PackSeparate}) {
    SCOPED_TRACE(layout == Layout::Pad ? "pad" : "pack-separate");
    const TruncationReport start = SequenceDataset(corpus, 6, layout).truncation_report();
    EXPECT_EQ(start.examples, 2);
    EXPECT_EQ(start.cut, 1);
    EXPECT_EQ(start.longest, 10);
    EXPECT_EQ(start.longest_example, 0);
    EXPECT_EQ(start.learned, 6);  // 4 of the first, 2 of the second (its first token predicts nothing)
    EXPECT_EQ(start.lost, 4);
    EXPECT_EQ(start.emptied, 1);
    const TruncationReport end = SequenceDataset(corpus, 6, layout, 0, Truncation::KeepEnd).truncation_report();
    EXPECT_EQ(end.lost, 0);
    EXPECT_EQ(end.emptied, 0);
  }
  const Batch kept = SequenceDataset(corpus, 6, Layout::Pad, 0, Truncation::KeepEnd).rows_batch(0, 1, tg::Device::cpu());
  EXPECT_EQ(kept.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(kept.labels.to_vector<int64_t>(), (std::vector<int64_t>{kIgnoreIndex, kIgnoreIndex, 7, 8, 9, 10}));
  const TruncationReport packed = SequenceDataset(corpus, 6, Layout::Pack).truncation_report();
  EXPECT_EQ(packed.cut, 0);
  EXPECT_EQ(packed.learned, 6);  // 12 of the 13 tokens make 2 rows: 7..10 and 11, 12 learned
}
