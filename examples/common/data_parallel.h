// Data parallelism in the examples: --nproc N starts N ranks of the program (one per GPU);
// started as a rank (by --nproc, examples/launch or torchrun), a program joins the group and its
// train::Trainer takes the rank's rows of every global batch and averages the gradients.
#pragma once

#include <memory>
#include <vector>

#include "core/device.h"
#include "distributed/communicator.h"
#include "examples/common/flags.h"

namespace examples {

// Adds --nproc to a program's flags.
void add_nproc_flag(Flags& flags);
// Not yet a rank and --nproc > 1: runs the program's ranks and returns their exit status;
// otherwise -1 (go on as this process).
int launch_if_asked(const Flags& flags, int argc, char** argv);

struct Ranks {
  std::unique_ptr<tg::distributed::Communicator> comm;  // null: a single process
  int rank = 0, world = 1;
  bool main() const { return rank == 0; }  // logs, evaluates and writes files
};
// Joins the group when this process is a rank (on GPU LOCAL_RANK, which `device` becomes); a
// single process otherwise. tg::Error when a rank is asked for the CPU.
Ranks join_if_launched(tg::Device& device, const std::string& device_flag);

// UsageError unless `world` ranks split `batch` rows evenly.
void check_batch_splits(int64_t batch, int world);
// The element-wise sums over the ranks of a few numbers (one small all-reduce).
std::vector<double> sum_over_ranks(const Ranks& ranks, std::vector<double> values, tg::Device device);

}  // namespace examples
