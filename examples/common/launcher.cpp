#include "examples/common/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.h"

namespace examples {
namespace fs = std::filesystem;

namespace {

// The ranks, for the SIGTERM handler: a launcher told to stop stops its ranks (they would
// otherwise keep their GPUs).
std::vector<pid_t>* g_ranks = nullptr;
void forward_sigterm(int) {
  if (g_ranks)
    for (pid_t p : *g_ranks)
      if (p > 0) kill(p, SIGTERM);
}

// The exit status a shell would report.
int status_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

[[noreturn]] void exec_rank(int rank, int nproc, const std::string& id_file, const std::string& program,
                            const std::vector<std::string>& args) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 0);
  setenv("MASTER_PORT", "29500", 0);
  setenv("TG_DIST_INIT_FILE", id_file.c_str(), 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (rank > 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(program.c_str(), argv.data());
  std::fprintf(stderr, "launch: cannot run '%s' as rank %d: %s\n", program.c_str(), rank, std::strerror(errno));
  _exit(127);
}

}  // namespace

std::string self_executable() { return fs::read_symlink("/proc/self/exe").string(); }

int launch_ranks(int nproc, const std::string& program, const std::vector<std::string>& args) {
  TG_CHECK(nproc >= 1, "launch", "--nproc wants at least 1, got ", nproc);
  std::string dir = (fs::temp_directory_path() / "tapegrad-launch-XXXXXX").string();
  TG_CHECK(mkdtemp(dir.data()) != nullptr, "launch", "cannot make a temporary folder for the NCCL id: ", std::strerror(errno));
  const std::string id_file = dir + "/nccl.id";
  std::fflush(stdout), std::fflush(stderr);
  std::vector<pid_t> ranks;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    TG_CHECK(pid >= 0, "launch", "fork failed for rank ", r, ": ", std::strerror(errno));
    if (pid == 0) exec_rank(r, nproc, id_file, program, args);
    ranks.push_back(pid);
  }
  // Ctrl-C goes to the whole process group: the ranks stop themselves, the launcher collects them.
  struct sigaction ignore = {}, previous = {}, forward = {}, previous_term = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &previous);
  g_ranks = &ranks;
  forward.sa_handler = forward_sigterm;
  sigaction(SIGTERM, &forward, &previous_term);
  int result = 0;
  for (size_t left = ranks.size(); left > 0;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;  // a forwarded SIGTERM: go on collecting
    if (pid < 0) break;
    --left;
    for (auto& p : ranks)
      if (p == pid) p = 0;
    if (status_code(status) != 0 && result == 0) {
      result = status_code(status);
      std::fprintf(stderr, "launch: a rank exited with status %d; stopping the others\n", result);
      for (pid_t p : ranks)
        if (p > 0) kill(p, SIGTERM);
    }
  }
  sigaction(SIGINT, &previous, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
  g_ranks = nullptr;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return result;
}

}  // namespace examples
