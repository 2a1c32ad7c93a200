#include "examples/common/data_parallel.h"

#include <cstdio>

#include "core/factory.h"
#include "distributed/init.h"
#include "examples/common/launcher.h"
#include "ops/cast.h"

namespace examples {

void add_nproc_flag(Flags& flags) {
  flags.add("nproc", "1", "data-parallel processes, one per GPU (the batch is split between them; as torchrun "
                          "--nproc-per-node)");
}

int launch_if_asked(const Flags& flags, int argc, char** argv) {
  const int64_t nproc = flags.integer("nproc", 1, kMaxRanks);
  if (nproc == 1 || tg::distributed::launched()) return -1;
  return launch_ranks(static_cast<int>(nproc), self_executable(), std::vector<std::string>(argv + 1, argv + argc));
}

Ranks join_if_launched(tg::Device& device, const std::string& device_flag) {
  Ranks ranks;
  if (!tg::distributed::launched()) return ranks;
  if (device_flag == "cpu")
    throw UsageError("--device cpu with data parallelism: the ranks reduce over NCCL, which wants one GPU each\n");
  ranks.comm = tg::distributed::init(&device);
  ranks.rank = ranks.comm->rank(), ranks.world = ranks.comm->world_size();
  if (ranks.main())
    std::printf("data parallel: %d ranks over %s, each batch split between them\n", ranks.world,
                ranks.comm->backend().c_str());
  return ranks;
}

void check_batch_splits(int64_t batch, int world) {
  if (batch % world != 0)
    throw UsageError("--batch " + std::to_string(batch) + " does not split between " + std::to_string(world) +
                     " ranks: make it a multiple of --nproc\n");
}

std::vector<double> sum_over_ranks(const Ranks& ranks, std::vector<double> values, tg::Device device) {
  if (!ranks.comm) return values;
  const tg::Tensor t = tg::to(tg::from_vector(values, {static_cast<int64_t>(values.size())}), device);
  ranks.comm->all_reduce(t, tg::distributed::ReduceOp::Sum);
  ranks.comm->wait();
  return t.to_vector<double>();
}

}  // namespace examples
