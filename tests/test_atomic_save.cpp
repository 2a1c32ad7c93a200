// Saves as units (issue 24, findings 1 and 5): concurrent saves to one path, interrupted saves,
// the temporaries they leave, and folders of several files (peft adapters, transformers models)
// that a reader sees whole or not at all. The kill -9 stress test is tests/stress/save_stress.cpp.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/nn.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string text_of(const std::string& path) {
  std::vector<uint8_t> b = io::read_file(path);
  return std::string(b.begin(), b.end());
}

// Puts a file's modification time a minute in the past, as a save that died a while ago left it.
void age(const std::string& path) {
  struct timeval old[2] = {{::time(nullptr) - 60, 0}, {::time(nullptr) - 60, 0}};
  ASSERT_EQ(::utimes(path.c_str(), old), 0);
}

// Every adapter weight of the model holds `value`: which save a folder holds is then plain.
void fill_adapters(nn::Module& model, double value) {
  NoGradGuard no_grad;
  for (auto& [path, l] : peft::lora_layers(model)) {
    fill_(l->lora_A->weight, value);
    fill_(l->lora_B->weight, value);
  }
}

class AtomicSaveTest : public testing::SeededTest {};

// Finding 1: every save wrote "<path>.tmp" with O_TRUNC, so two saves wrote into one file.
TEST_F(AtomicSaveTest, ConcurrentSavesToOnePathLeaveOneCompleteSave) {
  TempDir dir;
  const std::string path = dir / "ckpt.safetensors";
  constexpr int kWriters = 4, kSaves = 8;
  std::vector<std::thread> writers;
  std::atomic<int> errors{0};
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < kSaves; ++i) {
        const double stamp = w * 100 + i;  // every tensor of one save holds its stamp
        try {
          safetensors::save_file({{"a", full({64, 1024}, stamp)}, {"b", full({3}, stamp)}}, path,
                                 {{"stamp", std::to_string(stamp)}});
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  for (auto& t : writers) t.join();
  EXPECT_EQ(errors.load(), 0);
  safetensors::Loaded got = safetensors::load_file_with_metadata(path);
  const double stamp = std::stod(got.metadata.at("stamp"));
  EXPECT_TENSOR_EQ(got.tensors.at("a"), full({64, 1024}, stamp));
  EXPECT_TENSOR_EQ(got.tensors.at("b"), full({3}, stamp));
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"ckpt.safetensors"}) << "temporary files left";
}

TEST_F(AtomicSaveTest, TemporariesOfDeadSavesAreRemovedAndLiveOnesKept) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  // A save that died: its temporary is unlocked and old. One in progress holds its lock.
  const std::string dead = dir / ".m.safetensors.tg-tmp-dead01", live = dir / ".m.safetensors.tg-tmp-live01";
  std::ofstream(dead) << "half a file";
  std::ofstream(live) << "being written";
  age(dead);
  age(live);
  const int fd = ::open(live.c_str(), O_RDONLY);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const std::string other = dir / ".other.safetensors.tg-tmp-dead02";  // another file's: not ours to judge
  std::ofstream(other) << "x";
  age(other);

  safetensors::save_file({{"w", ones({2})}}, path);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  ::close(fd);
}

TEST_F(AtomicSaveTest, FailedSaveKeepsModeAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir / "cfg.json";
  io::write_file_atomic(path, std::string("old"));
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  io::write_file_atomic(path, std::string("new"));
  EXPECT_EQ(text_of(path), "new");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_ERROR_HAS(io::write_file_atomic(dir / "missing/cfg.json", std::string("x")), "cannot create a temporary file",
                   "missing");
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"cfg.json"});
}

TEST_F(AtomicSaveTest, FolderIsSwappedInWholeAndKeepsOtherFiles) {
  TempDir dir;
  const std::string folder = dir / "out";
  auto save = [&](const std::string& a, const std::string& b) {
    io::write_folder_atomic(folder, [&](io::FolderWriter& w) {
      w.write("a.txt", a);
      w.write("b.txt", b);
    }, [](const std::string& name) { return name == "stale.txt"; });
  };
  io::write_folder_atomic(folder + "/", [&](io::FolderWriter& w) { w.write("a.txt", "a0"); });  // a trailing slash
  EXPECT_EQ(text_of(folder + "/a.txt"), "a0");
  save("a1", "b1");
  EXPECT_EQ(fs::status(folder).permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                fs::perms::others_exec);
  std::ofstream(folder + "/README.md") << "mine";
  fs::create_directories(folder + "/sub");
  std::ofstream(folder + "/sub/notes.txt") << "deep";
  fs::create_symlink("README.md", folder + "/link.md");
  std::ofstream(folder + "/stale.txt") << "dropped by the next save";

  // A save that fails part way leaves the old folder exactly as it was, and no temporary.
  EXPECT_ERROR_HAS(io::write_folder_atomic(folder, [&](io::FolderWriter& w) {
    w.write("a.txt", "a2");
    fail("test", "simulated crash between the files");
  }), "simulated crash");
  EXPECT_EQ(text_of(folder + "/a.txt"), "a1");
  EXPECT_EQ(text_of(folder + "/b.txt"), "b1");
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"out"});

  // A reader that opened the folder before a save reads the old files or fails, never the new.
  io::Folder before(folder);
  EXPECT_EQ(text_of(folder + "/a.txt"), "a1");
  save("a2", "b2");
  EXPECT_THROW(before.read("b.txt"), Error);
  EXPECT_EQ(text_of(folder + "/a.txt"), "a2");
  EXPECT_EQ(text_of(folder + "/b.txt"), "b2");
  EXPECT_EQ(text_of(folder + "/README.md"), "mine");
  EXPECT_EQ(text_of(folder + "/sub/notes.txt"), "deep");
  EXPECT_EQ(fs::read_symlink(folder + "/link.md"), "README.md");
  EXPECT_FALSE(fs::exists(folder + "/stale.txt"));
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"out"}) << "the old folder is left beside the new";

  // The process working inside the folder stays in it (the new one).
  const fs::path cwd = fs::current_path();
  fs::current_path(folder);
  save("a3", "b3");
  EXPECT_EQ(text_of("a.txt"), "a3");
  fs::current_path(cwd);
}

// Finding 5: save_adapter renamed its two files one after the other; when the second failed (or
// the process died between them) the new weights sat beside the old adapter_config.json and
// loaded silently with the old lora_alpha. Here the second write of the old code fails (its
// fixed temporary path is taken); whatever a save does, a load sees one save's pair.
TEST_F(AtomicSaveTest, AdapterFolderNeverMixesTwoSaves) {
  TempDir dir;
  const std::string folder = dir / "adapter";
  nn::LlamaForCausalLM model(test::micro_llama(), gen);
  peft::LoraConfig c;
  c.r = 2;
  c.lora_alpha = 4;
  peft::apply_lora(model, c, gen);
  fill_adapters(model, 0.25);
  peft::save_adapter(model, folder, c);

  fs::create_directory(folder + "/adapter_config.json.tmp");
  peft::LoraConfig c2 = c;
  c2.lora_alpha = 32;
  fill_adapters(model, 0.5);
  try {
    peft::save_adapter(model, folder, c2);
  } catch (const Error&) {
  }
  nn::LlamaForCausalLM fresh(test::micro_llama(), gen);
  const peft::LoraConfig got = peft::load_adapter(fresh, folder, gen);
  const double weight = peft::lora_layers(fresh)[0].second->lora_A->weight.to_vector<double>()[0];
  EXPECT_TRUE((got.lora_alpha == 4 && weight == 0.25) || (got.lora_alpha == 32 && weight == 0.5))
      << "lora_alpha " << got.lora_alpha << " beside weights " << weight;
}

TEST_F(AtomicSaveTest, SavePretrainedSwapsLayoutsWholeAndKeepsTokenizer) {
  TempDir dir;
  const std::string folder = dir / "model";
  nn::LlamaForCausalLM model(test::micro_llama(), gen);
  nn::save_pretrained(model, folder, {.max_shard_bytes = 600});
  EXPECT_TRUE(fs::exists(folder + "/model.safetensors.index.json"));
  std::ofstream(folder + "/tokenizer.json") << "{}";
  nn::save_pretrained(model, folder);  // one file now: the shards and the index go, the tokenizer stays
  EXPECT_EQ(entries(folder), (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  auto back = nn::from_pretrained_llama(folder);
  EXPECT_TENSOR_EQ(back->lm_head->weight, model.lm_head->weight);
}

}  // namespace
}  // namespace tg::test
