#include "train/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.h"

namespace tg::train {
namespace {

namespace fs = std::filesystem;

// The holds of this process, by folder: flock conflicts between two descriptors of one process too.
std::mutex holds_mutex;
std::map<std::string, std::weak_ptr<OutputDirLock>>& holds() {
  static std::map<std::string, std::weak_ptr<OutputDirLock>> h;
  return h;
}

// The pid a lock file records ("" when unreadable).
std::string recorded_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
  pid.erase(std::remove_if(pid.begin(), pid.end(), [](char c) { return c < '0' || c > '9'; }), pid.end());
  return pid;
}

const char* const kRunFiles[] = {"log.csv", "log.jsonl", "loss.svg", "adapter_model.safetensors",
                                 "adapter_config.json", "model.safetensors", "model.safetensors.index.json"};

}  // namespace

std::shared_ptr<OutputDirLock> OutputDirLock::acquire(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TG_CHECK(!ec, "Trainer", "cannot create output_dir '", dir, "': ", ec.message());
  const std::string key = fs::weakly_canonical(fs::path(dir)).string();
  std::lock_guard<std::mutex> guard(holds_mutex);
  if (auto held = holds()[key].lock()) return held;
  const std::string path = (fs::path(dir) / kLockFile).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TG_CHECK(fd >= 0, "Trainer", "cannot open the lock file '", path, "': ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = recorded_pid(fd);
    ::close(fd);
    TG_CHECK(err == EWOULDBLOCK, "Trainer", "cannot lock '", path, "': ", std::strerror(err));
    fail("Trainer", "output_dir '", dir, "' is in use by another run (", pid.empty() ? "its pid unknown" : "pid " + pid,
         ", holding ", kLockFile, "): wait for it to end, or write to another output_dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  const bool recorded = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  if (!recorded) ::close(fd);
  TG_CHECK(recorded, "Trainer", "cannot write the lock file '", path, "': ", std::strerror(errno));
  std::shared_ptr<OutputDirLock> lock(new OutputDirLock(key, fd));
  holds()[key] = lock;
  return lock;
}

OutputDirLock::~OutputDirLock() {
  std::lock_guard<std::mutex> guard(holds_mutex);
  holds().erase(key_);
  ::close(fd_);  // releases the flock
}

std::vector<std::string> previous_run_files(const std::string& dir, const std::vector<std::string>& also) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool checkpoint = name.rfind("checkpoint-", 0) == 0 && entry.is_directory(ec);
    if (checkpoint || std::find(std::begin(kRunFiles), std::end(kRunFiles), name) != std::end(kRunFiles) ||
        std::find(also.begin(), also.end(), name) != also.end())
      found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

void remove_run_files(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / name, ec);
    TG_CHECK(!ec, "Trainer", "overwrite_output_dir: cannot remove '", (fs::path(dir) / name).string(), "': ",
             ec.message());
  }
}

void prepare_fresh_output_dir(const std::string& dir, bool overwrite_output_dir) {
  const std::vector<std::string> found = previous_run_files(dir);
  if (found.empty()) return;
  if (overwrite_output_dir) return remove_run_files(dir, found);
  fail("Trainer", "output_dir '", dir, "' holds another run's files (", name_list(found, 8),
       "): set overwrite_output_dir to remove ",
       "them and start afresh, or resume_from_checkpoint (\"latest\") to continue that run");
}

}  // namespace tg::train
