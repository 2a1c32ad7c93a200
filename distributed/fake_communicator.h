// An in-process group whose ranks are threads: the Communicator the CPU tests train with. Each
// collective waits until every rank has called it, checks that they agree (op, shape, dtype,
// root), and computes in float64 in rank order, so the result is the same on every rank and
// every run. A rank that fails aborts the group: the others' collectives then throw instead of
// waiting forever.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace tg::distributed {

class FakeGroup {
 public:
  explicit FakeGroup(int world_size);
  int world_size() const { return world_; }
  // The communicator of `rank` (the group must outlive it).
  std::unique_ptr<Communicator> communicator(int rank);
  // Makes every waiting and later collective throw (a rank failed).
  void abort(const std::string& why);

  // Runs fn(comm) on one thread per rank and rethrows the first rank's failure.
  static void run(int world_size, const std::function<void(Communicator& comm)>& fn);

  // One rank's arrival at a collective (FakeCommunicator's calls).
  void collective(int rank, const std::string& what, const Tensor& t, ReduceOp op, int root);

 private:
  void compute(const std::string& what, ReduceOp op, int root);
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<Tensor> tensors_;
  std::vector<std::string> calls_;  // each rank's "<what> root <r> <dtype> <shape>", to compare
  std::string error_, aborted_;
};

}  // namespace tg::distributed
