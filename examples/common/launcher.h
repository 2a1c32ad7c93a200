// torchrun's job for one machine: start `nproc` processes of a program as the ranks of one
// data-parallel group (tg::distributed::init reads what this sets: RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TG_DIST_INIT_FILE, a fresh file per launch, and
// NCCL_NVLS_ENABLE=0). Ranks above 0 keep stderr and drop stdout, so the output is rank 0's.
// When a rank fails the others are stopped, since they would wait for it forever; a SIGTERM
// to the launcher goes on to the ranks.
#pragma once

#include <string>
#include <vector>

namespace examples {

inline constexpr int kMaxRanks = 1024;  // --nproc's bound: far above the GPUs of one machine

// Runs `program` (a path, or a name looked up in PATH) with `args` as `nproc` ranks and waits
// for them. Returns 0 when every rank succeeded, else the first failure's exit status (128 +
// the signal for a killed rank). Ctrl-C reaches every rank (one process group).
int launch_ranks(int nproc, const std::string& program, const std::vector<std::string>& args);

// This program's own executable (for `--nproc N`: the program launches its ranks itself).
std::string self_executable();

}  // namespace examples
