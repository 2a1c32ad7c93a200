// Hostile files and values on the real-model path (issue 39): each class fixed at its root and
// checked here by the case that found it. Files that are not regular (a FIFO, a device), sizes
// and ids taken from a file without a bound, invalid UTF-8 inside tokenizer.json, a regex whose
// cost grows with the square of the text, integers parsed without range checks, token files
// truncated while in use, an NCCL id file others could write.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "core/detail/utf8.h"
#include "core/limits.h"
#include "core/memory.h"
#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/detail/regex.h"
#include "data/tokenizer.h"
#include "distributed/init.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/file.h"
#include "io/json.h"
#include "io/number.h"
#include "io/safetensors.h"
#include "nn/generation/generation.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "tests/test_support.h"
#include "train/checkpoint.h"

namespace tg::test {
namespace {
namespace fs = std::filesystem;

void write(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

// ---- one bounded reader

TEST(HostileFiles, AFifoOrADeviceIsAnErrorNotAnEndlessRead) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const std::string fifo_message = "'" + (dir / "fifo") + "' is not a regular file (a FIFO)";
  EXPECT_ERROR_HAS(io::read_file(dir / "fifo"), fifo_message.c_str());
  EXPECT_ERROR_HAS(io::read_file("/dev/zero"), "'/dev/zero' is not a regular file (a device)");
  io::Folder folder(dir.str());
  EXPECT_ERROR_HAS(folder.read("fifo"), "is not a regular file (a FIFO)");
  // A tokenizer folder whose tokenizer.json is a FIFO: an error, where it blocked forever.
  fs::create_directories(dir / "tok");
  ASSERT_EQ(::mkfifo((dir / "tok/tokenizer.json").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(data::Tokenizer::from_pretrained(dir / "tok"), "is not a regular file (a FIFO)");
  ASSERT_EQ(::mkfifo((dir / "sp.model").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(data::Tokenizer::from_file(dir / "sp.model"), "no file");
  // The other files a folder or a flag names, each of which blocked forever at fef9b57.
  fs::create_directories(dir / "tok2");
  fs::copy_file(fs::path(TG_TESTS_DIR) / "fixtures/tokenizers/gpt2/tokenizer.json", dir / "tok2/tokenizer.json");
  ASSERT_EQ(::mkfifo((dir / "tok2/tokenizer_config.json").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(data::Tokenizer::from_pretrained(dir / "tok2"), "tokenizer_config.json' is not a regular file (a FIFO)");
  ASSERT_EQ(::mkfifo((dir / "generation_config.json").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(nn::GenerationConfig::from_pretrained(dir.str()), "generation_config.json' is not a regular file (a FIFO)");
  fs::create_directories(dir / "adapter");
  ASSERT_EQ(::mkfifo((dir / "adapter/adapter_config.json").c_str(), 0600), 0);
  nn::Linear layer(2, 2);
  EXPECT_ERROR_HAS(peft::load_adapter(layer, dir / "adapter"), "adapter_config.json' is not a regular file (a FIFO)");
  ASSERT_EQ(::mkfifo((dir / train::kTrainingStateFile).c_str(), 0600), 0);  // lora_finetune --resume
  optim::AdamW opt(layer.named_trainable_parameters(), {});
  EXPECT_ERROR_HAS(train::load_training_state(dir / train::kTrainingStateFile, layer, opt),
                   "training_state.safetensors' is not a regular file (a FIFO)");
}

TEST(HostileFiles, AFileOverItsKindsLimitIsAnError) {
  TempDir dir;
  write(dir / "f", std::string(20, 'x'));
  EXPECT_ERROR_HAS(io::read_file(dir / "f", 10), "holds 20 bytes, more than the 10");
  EXPECT_EQ(io::read_file(dir / "f", 20).size(), 20u);
}

// ---- tokenizer.json: UTF-8, ids, sizes

// A BPE tokenizer.json over `vocab` (a JSON object) with these extra top-level members.
std::string tokenizer_json(const std::string& vocab, const std::string& extra = "") {
  return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []})" + (extra.empty() ? "" : ", " + extra) + "}";
}

std::string load_error(const TempDir& dir, const std::string& json) {
  write(dir / "tokenizer.json", json);
  return error_of([&] { data::Tokenizer::from_file(dir / "tokenizer.json"); });
}

TEST(HostileFiles, InvalidUtf8InAJsonStringIsAnErrorWithItsOffset) {
  for (const char* bad : {"\"\xff\"", "\"a\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\xE2\x82\""})
    EXPECT_ERROR_HAS(json::parse(bad), "invalid UTF-8 in string");
  EXPECT_EQ(json::parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string(), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  TempDir dir;
  EXPECT_NE(load_error(dir, tokenizer_json("{\"a\xff\": 0}")).find("invalid UTF-8"), std::string::npos);
}

// Issue 47: utf8::next decoded a truncated character with the bytes after it (past the end of a
// view, or the next character's), so invalid text reached the model as other characters.
TEST(HostileFiles, InvalidUtf8DecodesAsReplacementCharactersNeverPastItsEnd) {
  const std::string euro = "\xE2\x82\xAC";
  size_t i = 0;
  EXPECT_EQ(utf8::next(std::string_view(euro).substr(0, 2), i), 0xFFFDu);  // was U+20AC, its third byte read
  EXPECT_EQ(i, 2u);
  // Decoding character by character agrees with repair(): one U+FFFD a maximal invalid subpart.
  for (const std::string bad : {"a\xE2\x82", "\xff\xfe", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82x\xE2\x82\xAC"}) {
    std::string decoded;
    for (size_t k = 0; k < bad.size();) utf8::append(decoded, utf8::next(bad, k));
    EXPECT_EQ(decoded, utf8::repair(bad)) << json::dump(json::Value(utf8::repair(bad)));
  }
  EXPECT_EQ(utf8::invalid_at("caf\xC3"), "invalid UTF-8 (byte 0xc3) at byte 3");
  EXPECT_EQ(utf8::invalid_at("caf\xC3\xA9"), "");
  // A cut inside a character handed the tokenizer's pipeline (PCRE2 without its UTF check) a truncated one.
  const auto tok = data::Tokenizer::from_file(fs::path(__FILE__).parent_path() / "fixtures" / "tokenizers" / "qwen2" / "tokenizer.json");
  std::vector<data::Tokenizer::TokenCut> where;
  EXPECT_ERROR_HAS(tok.encode_with_cuts("caf\xC3\xA9!", std::vector<size_t>{4}, where), "encode_with_cuts", "cut 0 at byte 4",
                   "inside a UTF-8 character");
  EXPECT_EQ(tok.encode_with_cuts("caf\xC3\xA9!", std::vector<size_t>{3, 5}, where), tok.encode("caf\xC3\xA9!", false));
}

TEST(HostileFiles, TokenizerIdsAreRangeCheckedWhereTheyAreParsed) {
  TempDir dir;
  auto has = [&](const std::string& json, const std::string& part) {
    const std::string e = load_error(dir, json);
    EXPECT_NE(e.find(part), std::string::npos) << "message: " << e << "\nmissing: " << part;
  };
  // A 60-byte file whose one id would size a dense table of 2^31 entries (64 GB).
  has(tokenizer_json(R"({"a": 2147483646})"), "model vocab has 1 tokens but ids up to 2147483646");
  has(tokenizer_json(R"({"a": 2147483648})"), "outside the ids [0, 2^31 - 1)");
  has(tokenizer_json(R"({"a": -1})"), "outside the ids");
  has(tokenizer_json(R"({"a": 1.5})"), "wants an integer id");
  const std::string ab = R"({"a": 0, "b": 1})";
  auto added = [&](const std::string& tokens) { return tokenizer_json(ab, "\"added_tokens\": [" + tokens + "]"); };
  // Added token ids are tokenizers' own (Tokenizer.AddedTokenIdsAreThoseTokenizersGives): one
  // listed as 2^32 was truncated to 0, one listed as INT32_MAX overflowed (`id + 1`).
  has(added(R"({"id": 4294967296, "content": "<x>"})"), "added token '<x>' id is 4294967296, outside the ids [0, 2^32)");
  write(dir / "tokenizer.json", added(R"({"id": 2147483647, "content": "<x>"})"));
  EXPECT_EQ(data::Tokenizer::from_file(dir / "tokenizer.json").vocab_size(), 3);
  has(tokenizer_json(ab, R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
      {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [7]}}})"),
      "post_processor adds id 7, which is neither in the vocabulary nor an added token");
  has(tokenizer_json(ab, R"("post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 9], "sep": ["[SEP]", 1]})"),
      "post_processor adds id 9");
}

TEST(HostileFiles, OneCharacterFieldsAreOneCharacter) {
  TempDir dir;
  const std::string ab = R"({"a": 0, "b": 1})";
  // An empty Metaspace replacement looped forever in decode.
  EXPECT_NE(load_error(dir, tokenizer_json(ab, R"("decoder": {"type": "Metaspace", "replacement": ""})"))
                .find("decoder Metaspace replacement wants one character, got ''"),
            std::string::npos);
  EXPECT_NE(load_error(dir, tokenizer_json(ab, R"("pre_tokenizer": {"type": "Metaspace", "replacement": ""})"))
                .find("pre_tokenizer Metaspace replacement wants one character"),
            std::string::npos);
  EXPECT_NE(load_error(dir, tokenizer_json(ab, R"("decoder": {"type": "Strip", "content": " ", "start": -1, "stop": 0})"))
                .find("decoder Strip start is -1"),
            std::string::npos);
}

TEST(HostileFiles, ARegexWhoseCostGrowsWithTheSquareOfTheTextEndsInBoundedTime) {
  // a(?=a*$): each match rescans the rest, 39 s at 400k characters before.
  const data::Regex re("a(?=a*$)");
  const std::string text(400000, 'a');
  std::vector<data::Match> out;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ERROR_HAS(re.find_all(text, out), "matching 'a(?=a*$)' over 400000 bytes took more than", "grows faster");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  // A linear pattern on the same text is not stopped.
  std::vector<data::Match> words;
  data::Regex("a+").find_all(text, words);
  EXPECT_EQ(words.size(), 1u);
}

// Found by fuzz_sentencepiece: a model with an empty piece made sentencepiece's trie builder
// throw an exception of its own through the loader (std::terminate).
TEST(HostileFiles, ASentencepieceModelItsLibraryCannotBuildIsAnError) {
  TempDir dir;
  const std::string model("\x0a\x0e\x0a\x05\x3c\x75\x6e\x6b\x3e\x15\x00\x00\x00\x00\x18\x02\x0a\x0c\x0a\x0a\x00\x02\x00\x00\x00\x00\x00\x00\x3e\x15", 30);
  write(dir / "tokenizer.model", model);
  EXPECT_ERROR_HAS(data::Tokenizer::from_file(dir / "tokenizer.model"), "cannot load the sentencepiece model");
}

// ---- integers and numbers from text

TEST(HostileFiles, NumbersFromTextAreCheckedWholeAndInRange) {
  EXPECT_EQ(io::parse_integer<int>("4294967297"), std::nullopt);
  EXPECT_EQ(io::parse_integer<int64_t>("2abc"), std::nullopt);
  EXPECT_EQ(io::parse_integer<int64_t>(" 2"), std::nullopt);
  EXPECT_EQ(io::parse_integer<int64_t>(""), std::nullopt);
  EXPECT_EQ(io::parse_integer<uint64_t>("-1"), std::nullopt);
  EXPECT_EQ(io::parse_integer<int64_t>("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(io::parse_number("nan"), std::nullopt);
  EXPECT_EQ(io::parse_number("inf"), std::nullopt);
  EXPECT_EQ(io::parse_number("1e400"), std::nullopt);
  EXPECT_EQ(io::parse_number("2.5e-3"), 2.5e-3);
  EXPECT_EQ(io::parse_integer<uint64_t>("ffffffffffffffff", 16), UINT64_MAX);
  EXPECT_EQ(io::parse_integer<uint64_t>("0x1f", 16), std::nullopt);
  EXPECT_EQ(io::parse_integers<int64_t>("4x512x32000", 'x'), (std::vector<int64_t>{4, 512, 32000}));
  EXPECT_EQ(io::parse_integers<int64_t>("4x", 'x'), std::nullopt);
  EXPECT_EQ(io::parse_integers<int64_t>("4x 5", 'x'), std::nullopt);
  EXPECT_ERROR_HAS(io::checked_integer<int64_t>("12", 0, 10, "op", "'f' metadata n"),
                   "op: 'f' metadata n='12' is not an integer in [0, 10]");

  examples::Flags flags("p", "");
  flags.add("nproc", "1", "").add("alpha", "16", "").add("clip", "1", "").add("threads", "0", "");
  const char* argv[] = {"p", "--nproc", "4294967297", "--alpha", "inf", "--clip", "nan", "--threads", "2abc"};
  ASSERT_TRUE(flags.parse(9, const_cast<char**>(argv)));
  auto usage_error = [](auto&& f) {
    try {
      f();
    } catch (const examples::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(usage_error([&] { flags.integer("nproc", 1, 1024); }).find("--nproc wants an integer in [1, 1024], got '4294967297'"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { flags.number("alpha"); }).find("--alpha wants a finite number, got 'inf'"), std::string::npos);
  EXPECT_NE(usage_error([&] { flags.number("clip", 0); }).find("--clip wants a finite number in [0, inf), got 'nan'"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { flags.integer("threads", 0, 4096); }).find("--threads wants an integer in [0, 4096], got '2abc'"),
            std::string::npos);
}

// A misspelt --device or --dtype is an error naming what it got, never a silent CPU or float32 run.
TEST(HostileFiles, DeviceAndDtypeFlagsNameWhatTheyGot) {
  examples::Flags flags("p", "");
  flags.add("device", "cpu", "").add("dtype", "f32", "");
  const char* argv[] = {"p", "--device", "gpu", "--dtype", "fp16"};
  ASSERT_TRUE(flags.parse(5, const_cast<char**>(argv)));
  auto usage_error = [](auto&& f) {
    try {
      f();
    } catch (const examples::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(usage_error([&] { examples::device_flag(flags); }).find("--device wants cpu, cuda or auto, got 'gpu'"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { examples::dtype_flag(flags); }).find("--dtype wants f32 or bf16, got 'fp16'"),
            std::string::npos);
  examples::Flags defaults("p", "");
  defaults.add("device", "cpu", "").add("dtype", "bf16", "");
  const char* none[] = {"p"};
  ASSERT_TRUE(defaults.parse(1, const_cast<char**>(none)));
  EXPECT_EQ(examples::device_flag(defaults), Device::cpu());
  EXPECT_EQ(examples::dtype_flag(defaults), kBFloat16);
}

TEST(HostileFiles, CheckpointMetadataIsParsedCheckedBeforeAnythingLoads) {
  TempDir dir;
  nn::Linear layer(2, 2);
  optim::AdamW opt(layer.named_trainable_parameters(), {});
  const std::vector<float> before = layer.weight.to_vector<float>();
  auto with_step = [&](const std::string& step) {
    safetensors::TensorMap tensors;
    for (const auto& [name, p] : layer.named_trainable_parameters()) tensors["param/" + name] = p * 2.0;
    safetensors::save_file(tensors, dir / "ckpt.safetensors", {{"step", step}, {"rng_seed", "0"}, {"rng_offset", "0"}});
    return error_of([&] { train::load_training_state(dir / "ckpt.safetensors", layer, opt); });
  };
  EXPECT_NE(with_step("2abc").find("metadata step='2abc' is not an integer in [0, 9223372036854775807]"), std::string::npos);
  EXPECT_NE(with_step("99999999999999999999").find("step='99999999999999999999'"), std::string::npos);
  EXPECT_NE(with_step("-3").find("step='-3'"), std::string::npos);
  EXPECT_EQ(layer.weight.to_vector<float>(), before) << "a bad field leaves the model as it was";
}

// A chat template's number past int64 (an index `.N` threw std::out_of_range: "error: stoll").
TEST(HostileFiles, ATemplatesNumberPastInt64IsASyntaxError) {
  EXPECT_ERROR_HAS(data::ChatTemplate("{{ messages.99999999999999999999 }}", {}),
                   "line 1: the index .99999999999999999999 is out of range");
  EXPECT_ERROR_HAS(data::ChatTemplate("{{ 99999999999999999999 }}", {}), "the number 99999999999999999999 is out of range");
}

// ---- datasets

// Issue 47: a padded dataset of seq 1e9 made its batch's rows (16 GB a row) before anything said
// no: seq is bounded where the dataset is made, a batch's rows by the host's memory before they
// are allocated.
TEST(HostileFiles, AnAbsurdSequenceOrBatchIsRefusedBeforeItIsAllocated) {
  const auto corpus = data::corpus_from_examples({std::vector<int32_t>(10, 1), std::vector<int32_t>(5, 2)});
  for (const data::Layout layout : {data::Layout::Pad, data::Layout::Pack, data::Layout::PackSeparate})
    EXPECT_ERROR_HAS(data::SequenceDataset(corpus, 1'000'000'000, layout), "seq 1000000000 is above 16777216");
  const data::SequenceDataset rows(corpus, kMaxContext, data::Layout::Pad);
  const size_t in_use = memory_stats().bytes_in_use;
  EXPECT_ERROR_HAS(rows.batch(0, kMaxBatch, 0, Device::cpu()), "SequenceDataset::batch",
                   "1048576 rows of 16777216 tokens take", "more than the host's");
  EXPECT_ERROR_HAS(rows.rows_batch(1, 2, Device::cpu()), "2 rows from row 1 reach outside the 2 rows");
  EXPECT_ERROR_HAS(rows.rows_batch(1, INT64_MAX, Device::cpu()), "reach outside");  // first + n overflowed
  EXPECT_EQ(memory_stats().bytes_in_use, in_use);
}

TEST(HostileFiles, SequenceDatasetBatchChecksItsIndexAndSize) {
  data::SequenceDataset rows(data::corpus_from_examples({std::vector<int32_t>(64, 1)}), 4, data::Layout::Pack);
  EXPECT_ERROR_HAS(rows.batch(-1, 2, 0, Device::cpu()), "batch index -1 of 2 rows is outside");
  EXPECT_ERROR_HAS(rows.batch(0, -2, 0, Device::cpu()), "batch_size must be at least 1, got -2");
  EXPECT_ERROR_HAS(rows.batch(0, 0, 0, Device::cpu()), "batch_size must be at least 1, got 0");
  EXPECT_ERROR_HAS(rows.batch(INT64_MAX / 2, 4, 0, Device::cpu()), "is outside [0, ");  // index * size overflowed
  EXPECT_EQ(rows.batch(3, 4, 0, Device::cpu()).ids.size(0), 4);
}

TEST(HostileFiles, ATokenFileTruncatedWhileInUseIsAnErrorNotSigbus) {
  TempDir dir;
  data::write_token_file(dir / "t.bin", std::vector<int32_t>(4096, 7));
  auto corpus = data::open_token_file(dir / "t.bin");
  fs::resize_file(dir / "t.bin", 1024 + 100);  // another process rewrote it
  std::vector<int32_t> ids(64);
  EXPECT_ERROR_HAS(corpus->read(2000, 64, ids.data(), nullptr), "ended early: it was truncated after it was opened");
  EXPECT_ERROR_HAS(corpus->read(4090, 64, ids.data(), nullptr), "outside the 4096");
  ASSERT_EQ(::mkfifo((dir / "f.bin").c_str(), 0600), 0);
  EXPECT_ERROR_HAS(data::open_token_file(dir / "f.bin"), "is not a regular file");
}

// ---- the NCCL id file

TEST(HostileFiles, TheNcclIdFileIsPrivateAndOnlyAPrivateOneIsRead) {
  TempDir dir;
  const std::string file = dir / "id";
  EXPECT_EQ(distributed::share_through_file({.rank = 0, .world_size = 2, .init_file = file}, [] { return std::string("id"); }),
            "id");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // One another user could have written (readable and writable by all) is not trusted.
  ::chmod(file.c_str(), 0666);
  EXPECT_ERROR_HAS(distributed::share_through_file({.rank = 1, .world_size = 2, .init_file = file}, [] { return std::string(); },
                                                   std::chrono::milliseconds(200)),
                   "only they can read: not an NCCL id to trust");
  // Nor a folder others may write into (as /tmp itself).
  fs::create_directories(dir / "open");
  ::chmod((dir / "open").c_str(), 0777);
  EXPECT_ERROR_HAS(distributed::share_through_file({.rank = 0, .world_size = 2, .init_file = dir / "open/id"},
                                                   [] { return std::string("x"); }),
                   "which is writable by others");
}

// ---- memory

TEST(HostileFiles, DeallocateNeverThrows) {
  // Storage is freed in destructors, also while an exception unwinds (--grad-accum 2^40 ended in SIGABRT).
  const Device cpu = Device::cpu();
  static_assert(noexcept(tg::deallocate(cpu, nullptr, 0)));
}

}  // namespace
}  // namespace tg::test
