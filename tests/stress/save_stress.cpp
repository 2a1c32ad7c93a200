// Stress test of atomic saves (issue 24, finding 1), run by ctest as SaveStress:
//   save_stress <dir>
// 1. Four processes save one checkpoint path over and over while two others load it: every load
//    holds one complete save (all its tensors and its metadata carry one stamp).
// 2. A process saving in a loop is killed with SIGKILL at random moments, 30 times: after each
//    kill the file loads and holds one complete save; the temporaries the kills left are removed
//    by the next save once they are old (here aged by hand instead of waiting).
// Prints "N passed, M failed" and exits non-zero on any failure.
#include <signal.h>
#include <spawn.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "io/safetensors.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tg::safetensors::TensorMap;

void save(const std::string& path, int64_t stamp) {
  tg::safetensors::save_file({{"a", tg::full({256, 1024}, static_cast<double>(stamp))},
                              {"b", tg::full({7}, static_cast<double>(stamp), {.dtype = tg::kInt64})}},
                             path, {{"stamp", std::to_string(stamp)}});
}

// "" when `path` holds one complete save, else what is wrong.
std::string check(const std::string& path) {
  try {
    const auto got = tg::safetensors::load_file_with_metadata(path);
    const double stamp = std::stod(got.metadata.at("stamp"));
    for (const auto& [name, t] : got.tensors)
      for (double v : t.to_vector<double>())
        if (v != stamp) return "tensor '" + name + "' holds " + std::to_string(v) + " in the save stamped " +
                               std::to_string(stamp);
    if (got.tensors.size() != 2) return "the file holds " + std::to_string(got.tensors.size()) + " tensors";
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

bool exited_cleanly(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

size_t temporaries(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tg-tmp-") != std::string::npos;
  return n;
}

int child_saver(const std::string& path, int id, int saves) {
  for (int i = 0; i < saves; ++i) save(path, id * 1000 + i);
  return 0;
}

int child_loader(const std::string& path, int loads) {
  for (int i = 0; i < loads; ++i) {
    const std::string why = check(path);
    if (!why.empty()) {
      std::fprintf(stderr, "load %d: %s\n", i, why.c_str());
      return 1;
    }
  }
  return 0;
}

int child_endless_saver(const std::string& path) {
  for (int64_t i = 0;; ++i) save(path, 500000 + i);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "saver") return child_saver(argv[2], std::stoi(argv[3]), std::stoi(argv[4]));
  if (argc == 4 && std::string(argv[1]) == "loader") return child_loader(argv[2], std::stoi(argv[3]));
  if (argc == 3 && std::string(argv[1]) == "endless") return child_endless_saver(argv[2]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: save_stress <dir>\n");
    return 2;
  }
  const std::string dir = argv[1] + std::string("/save_stress_") + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/ckpt.safetensors";
  int passed = 0, failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ok ? ++passed : ++failed;
    if (!ok) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  };

  // 1. Concurrent savers and loaders.
  save(path, 0);
  std::vector<pid_t> savers, loaders;
  for (int id = 1; id <= 4; ++id) savers.push_back(spawn({"save_stress", "saver", path, std::to_string(id), "12"}));
  for (int i = 0; i < 2; ++i) loaders.push_back(spawn({"save_stress", "loader", path, "40"}));
  for (pid_t p : savers) expect(exited_cleanly(p), "a concurrent saver failed");
  for (pid_t p : loaders) expect(exited_cleanly(p), "a concurrent load saw a broken or mixed file");
  const std::string after = check(path);
  expect(after.empty(), "after concurrent saves: " + after);
  expect(temporaries(dir) == 0, "concurrent saves left " + std::to_string(temporaries(dir)) + " temporaries");

  // 2. SIGKILL at random moments of a save loop.
  std::mt19937 rng(12345);
  for (int kill = 0; kill < 30; ++kill) {
    pid_t p = spawn({"save_stress", "endless", path});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 60)(rng)));
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
    const std::string why = check(path);
    expect(why.empty(), "after kill " + std::to_string(kill) + ": " + why);
  }
  const size_t left = temporaries(dir);
  std::printf("the kills left %zu temporaries\n", left);
  for (const auto& e : fs::directory_iterator(dir)) {  // as if they were a minute old
    struct timeval old[2] = {{::time(nullptr) - 60, 0}, {::time(nullptr) - 60, 0}};
    ::utimes(e.path().c_str(), old);
  }
  save(path, 1);
  expect(temporaries(dir) == 0, "the next save left " + std::to_string(temporaries(dir)) + " old temporaries");
  expect(check(path).empty(), "the last save does not load");

  fs::remove_all(dir);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
