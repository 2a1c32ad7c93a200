#include "distributed/init.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "io/file.h"
#include "io/number.h"
#ifdef TG_WITH_NCCL
#include "core/cuda/runtime.h"
#include "distributed/detail/nccl_communicator.h"
#endif

namespace tg::distributed {
namespace fs = std::filesystem;
namespace {

constexpr const char* kOp = "distributed::init";

int int_variable(const Environment& env, const std::string& name, std::optional<int> fallback) {
  const auto v = env(name);
  if (!v) {
    TG_CHECK(fallback.has_value(), kOp, name, " is not set: start the ranks with --nproc N, examples/launch or torchrun, "
             "which set RANK, WORLD_SIZE and LOCAL_RANK");
    return *fallback;
  }
  const std::optional<int> n = io::parse_integer<int>(*v);
  TG_CHECK(n.has_value(), kOp, name, "='", *v, "' is not an integer in [0, 2^31)");
  return *n;
}

std::string errno_text() { return std::strerror(errno); }

// The folder of the id file must be this user's and writable by no one else (not /tmp itself):
// another user could otherwise put an id there, or replace ours between the write and the read.
void check_private_folder(const std::string& dir, const std::string& file) {
  struct stat st {};
  TG_CHECK(::lstat(dir.c_str(), &st) == 0, kOp, "cannot stat '", dir, "', the folder of the NCCL id file '", file,
           "': ", errno_text());
  TG_CHECK(S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 022) == 0, kOp, "the NCCL id file '", file,
           "' is in '", dir, "', which is ", !S_ISDIR(st.st_mode) ? "not a folder" : st.st_uid != ::geteuid()
           ? "another user's" : "writable by others", ": give TG_DIST_INIT_FILE a path in a folder only you can write");
}

// The torchrun case: a folder of this user's in the temporary directory, made private.
std::string private_temp_folder() {
  const std::string dir = (fs::temp_directory_path() / ("tapegrad-" + std::to_string(::geteuid()))).string();
  if (::mkdir(dir.c_str(), 0700) != 0)
    TG_CHECK(errno == EEXIST, kOp, "cannot make the folder '", dir, "' for the NCCL id: ", errno_text());
  return dir;
}

// About when this process started (static initialisation): launchers start the ranks together.
const auto process_start = fs::file_time_type::clock::now();

}  // namespace

Environment process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

bool launched(const Environment& env) { return env("WORLD_SIZE").has_value(); }

LaunchInfo launch_info(const Environment& env) {
  LaunchInfo info;
  info.world_size = int_variable(env, "WORLD_SIZE", std::nullopt);
  TG_CHECK(info.world_size >= 1, kOp, "WORLD_SIZE=", info.world_size, " wants at least 1");
  info.rank = int_variable(env, "RANK", std::nullopt);
  TG_CHECK(info.rank >= 0 && info.rank < info.world_size, kOp, "RANK=", info.rank, " is not in [0, WORLD_SIZE=",
           info.world_size, ")");
  info.local_rank = int_variable(env, "LOCAL_RANK", info.rank);
  TG_CHECK(info.local_rank >= 0, kOp, "LOCAL_RANK=", info.local_rank, " wants at least 0");
  if (auto file = env("TG_DIST_INIT_FILE")) {
    info.init_file = *file;
  } else if (info.world_size > 1) {
    const auto addr = env("MASTER_ADDR"), port = env("MASTER_PORT");
    TG_CHECK(addr && port, kOp, "WORLD_SIZE=", info.world_size, " wants TG_DIST_INIT_FILE, or MASTER_ADDR and ",
             "MASTER_PORT, to name the file that hands out rank 0's NCCL id");
    info.init_file = (fs::path(private_temp_folder()) / ("nccl-" + *addr + "-" + *port + "-" +
                                                          env("TORCHELASTIC_RUN_ID").value_or("none") + ".id"))
                         .string();
  }
  return info;
}

std::string share_through_file(const LaunchInfo& info, const std::function<std::string()>& make,
                               std::chrono::milliseconds timeout) {
  TG_CHECK(!info.init_file.empty(), kOp, "WORLD_SIZE=", info.world_size, " wants an id file");
  check_private_folder(fs::path(info.init_file).parent_path().empty() ? "." : fs::path(info.init_file).parent_path().string(),
                       info.init_file);
  if (info.rank == 0) {
    std::string bytes = make();
    io::write_file_atomic(info.init_file, bytes, 0600);  // a temporary made with O_EXCL, 0600, renamed
    return bytes;
  }
  const auto oldest = process_start - std::chrono::seconds(60);  // older: a crashed run's
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::error_code ec;
    const auto written = fs::last_write_time(info.init_file, ec);
    if (!ec && written >= oldest) {
      struct stat st {};
      TG_CHECK(::lstat(info.init_file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                   (st.st_mode & 077) == 0,
               kOp, "'", info.init_file, "' is not a file of this user's that only they can read: not an NCCL id to trust");
      const std::vector<uint8_t> bytes = io::read_file(info.init_file, 4096);  // complete: written by a rename
      if (!bytes.empty()) return std::string(bytes.begin(), bytes.end());
    }
    TG_CHECK(std::chrono::steady_clock::now() < deadline, kOp, "rank ", info.rank, " waited ", timeout.count(),
             " ms for rank 0's NCCL id in '", info.init_file,
             "': is rank 0 running, with the same TG_DIST_INIT_FILE or MASTER_ADDR / MASTER_PORT?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool nccl_available() {
#ifdef TG_WITH_NCCL
  return true;
#else
  return false;
#endif
}

void check_can_join(const LaunchInfo& info) {
#ifndef TG_WITH_NCCL
  (void)info;
  TG_CHECK(false, kOp, "this tapegrad was built without NCCL, so there is no data parallelism: configure a CUDA "
           "build with NCCL (the CUDA toolkit's, or -DTG_NCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so*>, "
           "e.g. PyTorch's nvidia-nccl wheel)");
#else
  const int gpus = cuda::device_count();
  TG_CHECK(info.local_rank < gpus, kOp, "LOCAL_RANK=", info.local_rank, " wants GPU ", info.local_rank, ", this machine has ",
           gpus, " GPU(s): start at most one rank per GPU");
#endif
}

std::unique_ptr<Communicator> init(const LaunchInfo& info, Device* device) {
  check_can_join(info);
#ifndef TG_WITH_NCCL
  (void)device;
  return nullptr;
#else
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off (the device machines' rule)
  const std::string id = info.world_size == 1 ? nccl_unique_id() : share_through_file(info, nccl_unique_id);
  TG_CHECK(id.size() == kNcclIdBytes, kOp, "'", info.init_file, "' holds ", id.size(), " bytes, an NCCL id ", kNcclIdBytes);
  auto comm = make_nccl_communicator(id, info.rank, info.world_size, info.local_rank);
  if (info.rank == 0 && info.world_size > 1) {
    std::error_code ec;
    fs::remove(info.init_file, ec);  // every rank has joined: the id is spent
  }
  if (device) *device = Device::cuda(info.local_rank);
  return comm;
#endif
}

}  // namespace tg::distributed
