// A group of processes (or, in tests, threads) that reduce tensors together: what data-parallel
// training needs from NCCL. Every rank must issue the same collectives in the same order.
// On a GPU a collective is queued on a stream of its own after the work already queued on the
// tensor's device and returns at once; wait() orders later work on the device after it.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tg::distributed {

enum class ReduceOp { Sum, Avg };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "nccl", "fake": for messages.
  virtual std::string backend() const = 0;

  // In place: every rank's `t` becomes the sum (or mean) over the ranks. `t` is contiguous, of
  // the same shape, dtype and device on every rank.
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  // In place: every rank's `t` becomes root's.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Later work queued on the devices of the collectives (and host reads) sees their results.
  virtual void wait() = 0;
};

// tg::Error unless `t` can take part in a collective (defined, contiguous, a dtype the
// backends reduce): `op` names the caller.
void check_collective_tensor(const char* op, const Tensor& t);

}  // namespace tg::distributed
