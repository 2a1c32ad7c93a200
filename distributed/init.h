// Joining a data-parallel group: one process per GPU, started by --nproc, examples/launch or torchrun,
// which set RANK, WORLD_SIZE and LOCAL_RANK. Rank 0 makes the NCCL id and hands it to the others
// through a file: TG_DIST_INIT_FILE (the launcher makes a fresh one per run), else one in the
// temporary directory's tapegrad-<uid> folder (made 0700) named by MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_RUN_ID (torchrun's). The file is made 0600 (O_EXCL, then renamed) in a folder
// only this user can write, and read only when it is this user's and private: another user
// cannot hand the ranks an id. A file written over a minute before the waiting rank's process
// started (a crashed run's) is not read; rank 0 removes the file once every rank has joined.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "distributed/communicator.h"

namespace tg::distributed {

struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string init_file;  // where the NCCL id goes (world_size > 1)
};

using Environment = std::function<std::optional<std::string>(const std::string& name)>;
// The process's environment variables.
Environment process_environment();

// True when a launcher started this process as a rank (WORLD_SIZE is set).
bool launched(const Environment& env = process_environment());
// RANK, WORLD_SIZE, LOCAL_RANK (default: RANK) and the id file; tg::Error naming the variable
// that is missing or out of range.
LaunchInfo launch_info(const Environment& env = process_environment());

// What make() returns on rank 0, on every rank: rank 0 writes it to info.init_file (atomically),
// the others wait for that file (tg::Error after `timeout`). How the NCCL id travels.
std::string share_through_file(const LaunchInfo& info, const std::function<std::string()>& make,
                               std::chrono::milliseconds timeout = std::chrono::minutes(5));

// True when this build has NCCL (-DTG_NCCL_ROOT or the CUDA toolkit's).
bool nccl_available();

// tg::Error when init would be refused before it starts: a build without NCCL, or a machine
// without the rank's GPU. A program calls it before its slow work (loading a model).
void check_can_join(const LaunchInfo& info);

// The NCCL communicator of this rank on Device::cuda(info.local_rank), the device it returns in
// `device`. tg::Error when the build has no NCCL, the device does not exist, or the other ranks
// do not come. With NCCL's NVLink multicast off (NCCL_NVLS_ENABLE=0 unless set).
std::unique_ptr<Communicator> init(const LaunchInfo& info, Device* device = nullptr);
inline std::unique_ptr<Communicator> init(Device* device = nullptr) { return init(launch_info(), device); }

}  // namespace tg::distributed
