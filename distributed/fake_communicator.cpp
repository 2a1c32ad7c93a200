#include "distributed/fake_communicator.h"

#include <exception>
#include <sstream>
#include <thread>

#include "core/factory.h"
#include "core/primitives.h"

namespace tg::distributed {
namespace {

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(FakeGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.world_size(); }
  std::string backend() const override { return "fake"; }
  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_collective_tensor("all_reduce", t);
    group_.collective(rank_, op == ReduceOp::Sum ? "all_reduce(sum)" : "all_reduce(avg)", t, op, 0);
  }
  void broadcast(const Tensor& t, int root) override {
    check_collective_tensor("broadcast", t);
    TG_CHECK(root >= 0 && root < world_size(), "broadcast", "root ", root, " is not a rank of a group of ", world_size());
    group_.collective(rank_, "broadcast", t, ReduceOp::Sum, root);
  }
  void wait() override {}  // every collective is done when it returns

 private:
  FakeGroup& group_;
  const int rank_;
};

}  // namespace

FakeGroup::FakeGroup(int world_size) : world_(world_size), tensors_(world_size), calls_(world_size) {
  TG_CHECK(world_size >= 1, "FakeGroup", "wants at least 1 rank, got ", world_size);
}

std::unique_ptr<Communicator> FakeGroup::communicator(int rank) {
  TG_CHECK(rank >= 0 && rank < world_, "FakeGroup", "rank ", rank, " is not in a group of ", world_);
  return std::make_unique<FakeCommunicator>(*this, rank);
}

void FakeGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
  cv_.notify_all();
}

void FakeGroup::collective(int rank, const std::string& what, const Tensor& t, ReduceOp op, int root) {
  std::unique_lock<std::mutex> lock(mu_);
  TG_CHECK(aborted_.empty(), what.c_str(), "the group was aborted: ", aborted_);
  std::ostringstream call;
  call << what << " root " << root << " " << t.dtype() << " " << detail::to_text(t.shape());
  tensors_[rank] = t;
  calls_[rank] = call.str();
  const uint64_t gen = generation_;
  if (++arrived_ == world_) {
    compute(what, op, root);
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return generation_ != gen || !aborted_.empty(); });
    TG_CHECK(generation_ != gen, what.c_str(), "the group was aborted: ", aborted_);
  }
  TG_CHECK(error_.empty(), what.c_str(), error_);
}

void FakeGroup::compute(const std::string& what, ReduceOp op, int root) {
  error_.clear();
  for (int r = 1; r < world_; ++r)
    if (calls_[r] != calls_[0]) {
      error_ = "the ranks disagree: rank 0 called " + calls_[0] + ", rank " + std::to_string(r) + " " + calls_[r];
      break;
    }
  if (error_.empty()) {
    const size_t n = static_cast<size_t>(tensors_[0].numel());
    std::vector<double> result(n, 0.0), one(n);
    if (what == "broadcast") {
      read_to_host(tensors_[root], kFloat64, result.data());
    } else {
      for (const Tensor& t : tensors_) {
        read_to_host(t, kFloat64, one.data());
        for (size_t i = 0; i < n; ++i) result[i] += one[i];
      }
      if (op == ReduceOp::Avg)
        for (double& v : result) v /= world_;
    }
    const Tensor host = from_vector(result, tensors_[0].shape());
    for (const Tensor& t : tensors_) copy_(t, host);
  }
  for (Tensor& t : tensors_) t = Tensor();
}

void FakeGroup::run(int world_size, const std::function<void(Communicator& comm)>& fn) {
  FakeGroup group(world_size);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = group.communicator(r);
        fn(*comm);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        group.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
    });
  for (auto& t : threads) t.join();
  // The first failure, not the "aborted" errors it caused on the other ranks.
  for (int r = 0; r < world_size; ++r)
    if (errors[r]) {
      try {
        std::rethrow_exception(errors[r]);
      } catch (const Error& e) {
        if (std::string(e.what()).find("the group was aborted") == std::string::npos) throw;
      }
    }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tg::distributed
