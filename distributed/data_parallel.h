// Data-parallel gradients, as torch.nn.parallel.DistributedDataParallel: after backward every
// parameter's .grad is the mean over the ranks, all-reduced in buckets while backward goes on
// (docs/api.md, docs/multi-gpu.md).
//
//   auto comm = tg::distributed::init(device);            // from RANK / WORLD_SIZE / ...
//   tg::distributed::DataParallel dp(model->named_trainable_parameters(), *comm);
//   { auto no_sync = dp.no_sync(); loss(micro_batch_0).backward(); }   // accumulation: no traffic
//   loss(micro_batch_1).backward();
//   dp.sync_gradients();                                   // the mean over the ranks in .grad
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "distributed/communicator.h"

namespace tg::distributed {

struct DataParallelOptions {
  double bucket_cap_mb = 25;       // DDP's defaults
  double first_bucket_cap_mb = 1;
  // Rank 0's parameter values copied to every rank at construction (as DDP does).
  bool broadcast_parameters = true;
};

class DataParallel {
 public:
  using NamedParams = std::vector<std::pair<std::string, Tensor>>;
  // The parameters (leaves that require grad, on one device) must be the same, in the same
  // order, on every rank: the constructor checks their number and sizes across the group.
  DataParallel(NamedParams params, Communicator& comm, DataParallelOptions options = {});
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // After a step's last backward, before clipping or the optimizer: queues the buckets still
  // waiting, waits for every all-reduce and writes the means into .grad. A parameter whose
  // gradient did not arrive in a synchronised backward adds its .grad as it stands (what
  // no_sync micro-batches left) or zeros (as DDP's find_unused_parameters): a rank whose shard
  // has no targets may skip its backward.
  void sync_gradients();

  // In its scope backward only accumulates locally (torch's no_sync): the micro-batches of a
  // step but the last.
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp) : dp_(dp), was_(dp.sync_enabled_) { dp.sync_enabled_ = false; }
    ~NoSync() { dp_.sync_enabled_ = was_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& dp_;
    bool was_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  struct Bucket {
    std::vector<size_t> params;    // indices into the parameter list, in bucket order
    std::vector<int64_t> offsets;  // of each parameter in `buffer`
    Tensor buffer;                 // flat, the parameters' dtype and device
    size_t pending = 0;            // gradients not yet in this step
    bool launched = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Buckets queued so far in the current step (for tests: launched during backward).
  size_t launched_buckets() const { return next_launch_; }
  Communicator& communicator() const { return comm_; }

 private:
  void on_gradient(size_t param);
  void launch_ready_buckets();
  void launch(Bucket& b);
  Tensor slot(const Bucket& b, size_t k) const;

  NamedParams params_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // parameter -> (bucket, position)
  std::vector<bool> arrived_;
  std::vector<HookHandle> hooks_;
  size_t next_launch_ = 0;
  bool sync_enabled_ = true;
};

}  // namespace tg::distributed
