#include "examples/common/data_parallel.h"

#include <cstdio>

#include "core/factory.h"
#include "distributed/init.h"
#include "examples/common/launcher.h"
#include "ops/cast.h"
#include "ops/shape.h"

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

void check_batch_splits(int64_t batch, const Ranks& ranks) {
  if (batch % ranks.world != 0)
    throw UsageError("--batch " + std::to_string(batch) + " does not split between " + std::to_string(ranks.world) +
                     " ranks: make it a multiple of --nproc\n");
}

tg::Tensor shard_rows(const tg::Tensor& global, const Ranks& ranks, tg::Device device) {
  check_batch_splits(global.size(0), ranks);
  const int64_t n = global.size(0) / ranks.world;
  return tg::to(tg::contiguous(tg::slice(global, 0, ranks.rank * n, (ranks.rank + 1) * n)), device);
}

tg::data::Batch shard_batch(const tg::data::Batch& global, const Ranks& ranks, tg::Device device) {
  tg::data::Batch out{shard_rows(global.ids, ranks, device), shard_rows(global.labels, ranks, device), 0,
                      global.position_ids.defined() ? shard_rows(global.position_ids, ranks, device) : tg::Tensor()};
  // As the dataset counts them: positions after the first whose label is not ignored.
  const std::vector<int64_t> labels = shard_rows(global.labels, ranks, tg::Device::cpu()).to_vector<int64_t>();
  const int64_t seq = global.labels.size(1);
  for (size_t i = 0; i < labels.size(); ++i)
    out.targets += static_cast<int64_t>(i) % seq != 0 && labels[i] != tg::data::kIgnoreIndex;
  return out;
}

std::vector<double> sum_over_ranks(const Ranks& ranks, std::vector<double> values, tg::Device device) {
  if (!ranks.comm) return values;
  const tg::Tensor t = tg::to(tg::from_vector(values, {static_cast<int64_t>(values.size())}), device);
  ranks.comm->all_reduce(t, tg::distributed::ReduceOp::Sum);
  ranks.comm->wait();
  return t.to_vector<double>();
}

}  // namespace examples
