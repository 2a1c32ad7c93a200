// Data parallelism against the in-process fake group: the collectives, the buckets, when they
// launch, the averaged gradients against one process's full batch, training on 1 and N ranks,
// and the launch environment. GPU tests (NCCL, world size 1) skip without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "distributed/data_parallel.h"
#include "distributed/fake_communicator.h"
#include "distributed/init.h"
#include "io/file.h"
#include "nn/models/llama.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using distributed::Communicator;
using distributed::DataParallel;
using distributed::FakeGroup;
using distributed::ReduceOp;

Tensor leaf(std::vector<double> v) {
  Tensor p = from_vector(v);
  p.requires_grad_(true);
  return p;
}

// ---- the fake group ----
TEST(FakeGroup, AllReduceAndBroadcastAgreeOnEveryRank) {
  FakeGroup::run(3, [](Communicator& comm) {
    const double r = comm.rank();
    Tensor s = from_vector(std::vector<double>{r, 10 * r});
    comm.all_reduce(s, ReduceOp::Sum);
    EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3, 30}));
    Tensor a = from_vector(std::vector<float>{static_cast<float>(r)});
    comm.all_reduce(a, ReduceOp::Avg);
    EXPECT_EQ(a.item(), 1.0);
    Tensor b = from_vector(std::vector<int64_t>{static_cast<int64_t>(r) + 5});
    comm.broadcast(b, 2);
    EXPECT_EQ(b.item<int64_t>(), 7);
  });
}

TEST(FakeGroup, RanksThatDisagreeGetAnErrorInsteadOfAHang) {
  EXPECT_ERROR_HAS(FakeGroup::run(2, [](Communicator& comm) {
                     Tensor t = zeros({comm.rank() + 1});
                     comm.all_reduce(t, ReduceOp::Sum);
                   }),
                   "the ranks disagree", "[1]", "[2]");
  // A rank that fails outside a collective releases the others waiting in one.
  EXPECT_ERROR_HAS(FakeGroup::run(2, [](Communicator& comm) {
                     if (comm.rank() == 1) TG_CHECK(false, "rank1", "broke");
                     Tensor t = zeros({1});
                     comm.all_reduce(t, ReduceOp::Sum);
                   }),
                   "rank1: broke");
}

TEST(FakeGroup, RejectsTensorsNoBackendReduces) {
  FakeGroup::run(1, [](Communicator& comm) {
    Tensor t = zeros({4, 4});
    EXPECT_ERROR_HAS(comm.all_reduce(transpose(t, 0, 1), ReduceOp::Sum), "all_reduce: wants a contiguous tensor");
    EXPECT_ERROR_HAS(comm.broadcast(zeros({2}, {kBool}), 0), "broadcast: cannot reduce a bool tensor");
    EXPECT_ERROR_HAS(comm.broadcast(zeros({2}), 3), "root 3 is not a rank of a group of 1");
  });
}

// ---- bucketing and launch order ----
// A communicator that logs each collective (between the gradients a test hook logs).
class LoggingCommunicator final : public Communicator {
 public:
  LoggingCommunicator(Communicator& inner, std::vector<std::string>& log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string backend() const override { return "logging"; }
  void all_reduce(const Tensor& t, ReduceOp op) override {
    log_.push_back("all_reduce " + std::to_string(t.numel()));
    inner_.all_reduce(t, op);
  }
  void broadcast(const Tensor& t, int root) override { inner_.broadcast(t, root); }
  void wait() override { log_.push_back("wait"); }

 private:
  Communicator& inner_;
  std::vector<std::string>& log_;
};

TEST(DataParallel, BucketsFollowReverseOrderCapsAndDtypes) {
  FakeGroup::run(1, [](Communicator& comm) {
    // 1024 float32 = 4 KiB each; first bucket cap 8 KiB, then 12 KiB.
    DataParallel::NamedParams params;
    params.emplace_back("p0", zeros({4}, {kFloat64, Device::cpu(), true}));
    for (int i = 1; i < 7; ++i) params.emplace_back("p" + std::to_string(i), zeros({32, 32}, {kFloat32, Device::cpu(), true}));
    DataParallel dp(params, comm, {.bucket_cap_mb = 12.0 / 1024, .first_bucket_cap_mb = 8.0 / 1024});
    ASSERT_EQ(dp.buckets().size(), 4u);
    EXPECT_EQ(dp.buckets()[0].params, (std::vector<size_t>{6, 5}));
    EXPECT_EQ(dp.buckets()[1].params, (std::vector<size_t>{4, 3, 2}));
    EXPECT_EQ(dp.buckets()[2].params, (std::vector<size_t>{1}));
    EXPECT_EQ(dp.buckets()[3].params, (std::vector<size_t>{0}));  // float64: a bucket of its own
    EXPECT_EQ(dp.buckets()[1].offsets, (std::vector<int64_t>{0, 1024, 2048}));
    EXPECT_EQ(dp.buckets()[1].buffer.numel(), 3072);
    EXPECT_EQ(dp.buckets()[3].buffer.dtype(), kFloat64);
  });
}

// LoRA's gradients (bench-135m: 2.3 MiB) fit DDP's 25 MiB: one bucket, not a small first one.
TEST(DataParallel, ParametersThatFitOneBucketGetOne) {
  FakeGroup::run(1, [](Communicator& comm) {
    Generator gen(0);
    auto model = std::make_shared<nn::LlamaForCausalLM>(micro_llama(), gen);
    peft::apply_lora(*model, {}, gen);
    DataParallel dp(model->named_trainable_parameters(), comm, {.bucket_cap_mb = 1, .first_bucket_cap_mb = 1e-4});
    ASSERT_EQ(dp.buckets().size(), 1u);
    EXPECT_EQ(dp.buckets()[0].params.size(), model->named_trainable_parameters().size());
  });
}

// y = sum(x * w0 * w1 * w2 * w3): backward finishes w3 first and w0 last.
TEST(DataParallel, ABucketLaunchesWhenItsLastGradientIsReady) {
  FakeGroup::run(1, [](Communicator& fake) {
    std::vector<std::string> log;
    LoggingCommunicator comm(fake, log);
    DataParallel::NamedParams params;
    std::vector<HookHandle> test_hooks;
    for (int i = 0; i < 4; ++i) {
      Tensor w = leaf({1.0 + i, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0});
      // Registered before DataParallel's: logs before its hook runs.
      test_hooks.push_back(register_post_accumulate_grad_hook(w, [&log, i](const Tensor&) { log.push_back("grad w" + std::to_string(i)); }));
      params.emplace_back("w" + std::to_string(i), w);
    }
    // 8 float64 = 64 B each: two to a bucket.
    DataParallel dp(params, comm, {.bucket_cap_mb = 128.0 / 1048576, .first_bucket_cap_mb = 128.0 / 1048576});
    ASSERT_EQ(dp.buckets().size(), 2u);
    log.clear();
    Tensor y = from_vector(std::vector<double>(8, 1.0));
    for (auto& [name, w] : params) y = y * w;
    sum(y).backward();
    EXPECT_EQ(dp.launched_buckets(), 2u);  // both queued during backward
    EXPECT_EQ(log, (std::vector<std::string>{"grad w3", "grad w2", "all_reduce 16", "grad w1", "grad w0", "all_reduce 16"}));
    dp.sync_gradients();
    EXPECT_EQ(log.back(), "wait");
    EXPECT_EQ(log.size(), 7u);  // no collective left for sync
    EXPECT_EQ(dp.launched_buckets(), 0u);
  });
}

// Gradient accumulation: no traffic under no_sync, one all-reduce of the sum at the last.
TEST(DataParallel, NoSyncAccumulatesLocally) {
  FakeGroup::run(2, [](Communicator& fake) {
    std::vector<std::string> log;
    LoggingCommunicator comm(fake, log);
    Tensor w = leaf({1.0, 1.0});
    DataParallel dp({{"w", w}}, comm);
    log.clear();
    const double r = comm.rank();
    {
      auto no_sync = dp.no_sync();
      sum(w * from_vector(std::vector<double>{r, 1.0})).backward();
      EXPECT_ERROR_HAS(dp.sync_gradients(), "sync_gradients() inside no_sync()");
    }
    EXPECT_TRUE(log.empty());
    sum(w * from_vector(std::vector<double>{10 * r, 2.0})).backward();
    dp.sync_gradients();
    // rank 0: (0, 3), rank 1: (11, 3); the mean: (5.5, 3).
    EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{5.5, 3.0}));
    EXPECT_EQ(log, (std::vector<std::string>{"all_reduce 2", "wait"}));
  });
}

// A rank that produced no gradient (no backward, or a parameter it did not use) adds zeros.
TEST(DataParallel, AMissingGradientCountsAsZeros) {
  FakeGroup::run(2, [](Communicator& comm) {
    Tensor a = leaf({1.0}), b = leaf({1.0, 1.0});
    DataParallel dp({{"a", a}, {"b", b}}, comm);
    if (comm.rank() == 0) sum(a * 4.0).backward();
    dp.sync_gradients();
    EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2.0}));
    EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0}));
  });
}

// A rank whose last micro-batch has no targets skips its backward: what no_sync left counts.
TEST(DataParallel, AGradientFromNoSyncCountsWhenTheLastBackwardIsSkipped) {
  FakeGroup::run(2, [](Communicator& comm) {
    Tensor a = leaf({1.0});
    DataParallel dp({{"a", a}}, comm);
    {
      auto no_sync = dp.no_sync();
      sum(a * 6.0).backward();
    }
    if (comm.rank() == 0) sum(a * 2.0).backward();
    dp.sync_gradients();
    EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{7.0}));  // (8 + 6) / 2
  });
}

TEST(DataParallel, ASecondGradientBeforeSyncIsAnError) {
  FakeGroup::run(1, [](Communicator& comm) {
    Tensor w = leaf({1.0});
    DataParallel dp({{"w", w}}, comm);
    sum(w).backward();
    EXPECT_ERROR_HAS(sum(w).backward(), "DataParallel: parameter 'w' got a second gradient before sync_gradients()",
                     "no_sync()");
  });
}

TEST(DataParallel, RanksWithDifferentModelsAreRefused) {
  EXPECT_ERROR_HAS(FakeGroup::run(2, [](Communicator& comm) {
                     Tensor w = comm.rank() == 0 ? leaf({1.0, 2.0}) : leaf({1.0, 2.0, 3.0});
                     DataParallel dp({{"w", w}}, comm);
                   }),
                   "DataParallel: parameter 'w' has 3 elements of float64 on rank 1 and 2 elements", "same model");
  EXPECT_ERROR_HAS(FakeGroup::run(2, [](Communicator& comm) {
                     DataParallel::NamedParams ps = {{"a", leaf({1.0})}};
                     if (comm.rank() == 1) ps.emplace_back("b", leaf({1.0}));
                     DataParallel dp(ps, comm);
                   }),
                   "rank 1 has 2 parameters, rank 0 another number");
  FakeGroup::run(1, [](Communicator& comm) {
    EXPECT_ERROR_HAS(DataParallel({}, comm), "DataParallel: got no parameters");
    EXPECT_ERROR_HAS(DataParallel({{"x", from_vector(std::vector<double>{1.0})}}, comm),
                     "parameter 'x' is not a leaf that requires grad");
  });
}

TEST(DataParallel, StartsFromRankZerosParameters) {
  FakeGroup::run(3, [](Communicator& comm) {
    Tensor w = leaf({1.0 + comm.rank(), 2.0});
    DataParallel dp({{"w", w}}, comm);
    EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1.0, 2.0}));
  });
}

// ---- against one process ----
// Rows [rank * B / W, (rank + 1) * B / W) of the batch, as the examples shard it.
Tensor shard(const Tensor& batch, int rank, int world) {
  const int64_t n = batch.size(0) / world;
  return contiguous(slice(batch, 0, rank * n, (rank + 1) * n));
}

std::shared_ptr<nn::LlamaForCausalLM> micro_model(uint64_t seed, bool lora, DType dtype) {
  Generator gen(seed);
  auto model = std::make_shared<nn::LlamaForCausalLM>(micro_llama(), gen);
  if (lora) peft::apply_lora(*model, {.r = 2}, gen);
  model->to(dtype);
  if (lora) {  // peft initialises B to zeros: make the adapters' gradients all non-trivial
    NoGradGuard no_grad;
    for (auto& [name, p] : model->named_trainable_parameters()) copy_(p, randn(p.shape(), gen, {dtype}));
  }
  model->train();
  return model;
}

// The mean of equal shards' mean losses is the full batch's mean loss: the same gradients.
TEST(DataParallel, AveragedGradientsEqualTheFullBatchs) {
  for (bool lora : {false, true}) {
    Generator gen(3);
    const Tensor ids = randint(0, micro_llama().vocab_size, {8, 4}, gen);
    auto single = micro_model(1, lora, kFloat64);
    single->loss(ids, ids).backward();
    for (int world : {2, 4}) {
      std::mutex mu;
      FakeGroup::run(world, [&](Communicator& comm) {
        auto model = micro_model(1, lora, kFloat64);
        DataParallel dp(model->named_trainable_parameters(), comm, {.bucket_cap_mb = 0.0004, .first_bucket_cap_mb = 0.0002});
        EXPECT_GE(dp.buckets().size(), 3u);
        const Tensor mine = shard(ids, comm.rank(), world);
        model->loss(mine, mine).backward();
        dp.sync_gradients();
        std::lock_guard<std::mutex> lock(mu);
        const auto want = single->named_trainable_parameters();
        const auto got = model->named_trainable_parameters();
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_TENSOR_NEAR(got[i].second.grad(), want[i].second.grad(), 1e-10, 1e-12)
              << got[i].first << " (world " << world << ", lora " << lora << ")";
      });
    }
  }
}

// Activation checkpointing recomputes each layer inside backward (tg::grad): the hooks still see
// each parameter's final gradient once.
TEST(DataParallel, GradientCheckpointingGivesTheSameAveragedGradients) {
  Generator gen(4);
  const Tensor ids = randint(0, micro_llama().vocab_size, {4, 4}, gen);
  auto single = micro_model(2, /*lora=*/true, kFloat64);
  single->loss(ids, ids).backward();
  std::mutex mu;
  FakeGroup::run(2, [&](Communicator& comm) {
    auto model = micro_model(2, /*lora=*/true, kFloat64);
    model->gradient_checkpointing_enable();
    DataParallel dp(model->named_trainable_parameters(), comm, {.bucket_cap_mb = 0.0004, .first_bucket_cap_mb = 0.0002});
    const Tensor mine = shard(ids, comm.rank(), 2);
    model->loss(mine, mine).backward();
    EXPECT_EQ(dp.launched_buckets(), dp.buckets().size());  // every bucket went during backward
    dp.sync_gradients();
    std::lock_guard<std::mutex> lock(mu);
    const auto want = single->named_trainable_parameters(), got = model->named_trainable_parameters();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TENSOR_NEAR(got[i].second.grad(), want[i].second.grad(), 1e-10, 1e-12) << got[i].first;
  });
}

// The loop of examples/lora_finetune: 1 rank and 2 ranks (each with 2 micro-batches, clipping
// and AdamW) give the same losses and the same adapter.
std::vector<double> train(Communicator& comm, std::shared_ptr<nn::LlamaForCausalLM> model, int steps) {
  DataParallel dp(model->named_trainable_parameters(), comm);
  optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-2});
  Generator data(7);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    double step_loss = 0;
    for (int k = 0; k < 2; ++k) {
      const Tensor ids = randint(0, micro_llama().vocab_size, {4, 4}, data);  // the global micro-batch
      const Tensor mine = shard(ids, comm.rank(), comm.world_size());
      Tensor loss = model->loss(mine, mine) * 0.5;
      Tensor total = loss.detach();
      comm.all_reduce(total, ReduceOp::Avg);
      step_loss += total.item();
      if (k == 0) {
        auto no_sync = dp.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    dp.sync_gradients();
    optim::clip_grad_norm_(model->trainable_parameters(), 1.0);
    opt.step();
    losses.push_back(step_loss);
  }
  return losses;
}

TEST(DataParallel, TwoRanksTrainAsOne) {
  std::vector<double> one;
  std::vector<Tensor> one_params;
  FakeGroup::run(1, [&](Communicator& comm) {
    auto model = micro_model(5, /*lora=*/true, kFloat32);
    one = train(comm, model, 4);
    for (auto& p : model->trainable_parameters()) one_params.push_back(p.detach());
  });
  std::mutex mu;
  FakeGroup::run(2, [&](Communicator& comm) {
    auto model = micro_model(5, /*lora=*/true, kFloat32);
    if (comm.rank() == 1) {  // another adapter start: rank 0's wins
      NoGradGuard no_grad;
      for (auto& p : model->trainable_parameters()) copy_(p, p * 0.5);
    }
    const std::vector<double> two = train(comm, model, 4);
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 1e-5) << "step " << i;
    const auto params = model->trainable_parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TENSOR_NEAR(params[i], one_params[i], 1e-4, 1e-5);
  });
  EXPECT_GT(one.front() - one.back(), 0.0);  // it learned something
}

// ---- the launch environment ----
distributed::Environment env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(LaunchInfo, ReadsTorchrunsVariables) {
  EXPECT_FALSE(distributed::launched(env_of({})));
  auto info = distributed::launch_info(
      env_of({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"TG_DIST_INIT_FILE", "/tmp/x.id"}}));
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.init_file, "/tmp/x.id");
  info = distributed::launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(info.local_rank, 1);  // LOCAL_RANK defaults to RANK
  EXPECT_NE(info.init_file.find("/tapegrad-" + std::to_string(::geteuid()) + "/nccl-127.0.0.1-29500-none.id"), std::string::npos);
  info = distributed::launch_info(env_of({{"WORLD_SIZE", "1"}, {"RANK", "0"}}));
  EXPECT_TRUE(info.init_file.empty());  // one rank exchanges nothing
}

TEST(LaunchInfo, NamesTheVariableThatIsWrong) {
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({})), "distributed::init: WORLD_SIZE is not set", "examples/launch or torchrun");
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({{"WORLD_SIZE", "2"}})), "RANK is not set");
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}})), "RANK=2 is not in [0, WORLD_SIZE=2)");
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({{"WORLD_SIZE", "two"}})), "WORLD_SIZE='two' is not an integer");
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({{"WORLD_SIZE", "0"}, {"RANK", "0"}})), "WORLD_SIZE=0 wants at least 1");
  EXPECT_ERROR_HAS(distributed::launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}})), "TG_DIST_INIT_FILE, or MASTER_ADDR");
}

// How the NCCL id travels: rank 0 writes, the others wait for the file (a stale one is not read).
TEST(ShareThroughFile, RankZerosBytesReachTheOthers) {
  TempDir dir;
  const std::string file = (dir.path() / "id").string();
  std::string got;
  std::thread waiter([&] { got = distributed::share_through_file({.rank = 1, .world_size = 2, .init_file = file}, [] { return std::string("no"); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 1 waits first
  EXPECT_EQ(distributed::share_through_file({.rank = 0, .world_size = 2, .init_file = file}, [] { return std::string("id\0x", 4); }),
            std::string("id\0x", 4));
  waiter.join();
  EXPECT_EQ(got, std::string("id\0x", 4));
}

TEST(ShareThroughFile, AStaleFileIsNotReadAndTheWaitEnds) {
  TempDir dir;
  const std::string file = (dir.path() / "id").string();
  io::write_file_atomic(file, std::string("old"));
  std::filesystem::last_write_time(file, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  EXPECT_ERROR_HAS(distributed::share_through_file({.rank = 1, .world_size = 2, .init_file = file}, [] { return std::string(); },
                                                   std::chrono::milliseconds(100)),
                   "rank 1 waited 100 ms for rank 0's NCCL id in '", "MASTER_PORT");
  EXPECT_ERROR_HAS(distributed::share_through_file({.rank = 0, .world_size = 2}, [] { return std::string("x"); }),
                   "WORLD_SIZE=2 wants an id file");
}

TEST(DistributedInit, SaysWhatIsMissing) {
  const distributed::LaunchInfo info;  // world size 1
  if (!distributed::nccl_available()) {
    EXPECT_ERROR_HAS(distributed::init(info), "built without NCCL", "-DTG_NCCL_ROOT");
  } else if (!testing::cuda_ready()) {
    EXPECT_ERROR_HAS(distributed::init(info), "LOCAL_RANK=0 wants GPU 0, this machine has 0 GPU(s)");
  } else {
    distributed::LaunchInfo far = info;
    far.local_rank = 1000;
    EXPECT_ERROR_HAS(distributed::init(far), "LOCAL_RANK=1000 wants GPU 1000");
  }
}

// ---- NCCL on one GPU (world size 1): the real stream and event path ----
TEST(DistributedCuda, OneRankNcclStepEqualsThePlainStep) {
  TG_REQUIRE_CUDA();
  if (!distributed::nccl_available()) GTEST_SKIP() << "built without NCCL";
  Device dev;
  auto comm = distributed::init(distributed::LaunchInfo{}, &dev);
  EXPECT_EQ(comm->backend(), "nccl");
  Tensor t = to(from_vector(std::vector<float>{1.5f, -2.0f}), dev);
  comm->all_reduce(t, ReduceOp::Avg);
  comm->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  Generator gen(3);
  const Tensor ids = to(randint(0, micro_llama().vocab_size, {8, 4}, gen), dev);
  auto plain = micro_model(1, true, kFloat32), dp_model = micro_model(1, true, kFloat32);
  plain->to(dev), dp_model->to(dev);
  plain->loss(ids, ids).backward();
  DataParallel dp(dp_model->named_trainable_parameters(), *comm, {.bucket_cap_mb = 0.0002, .first_bucket_cap_mb = 0.0001});
  EXPECT_GE(dp.buckets().size(), 3u);
  dp_model->loss(ids, ids).backward();
  dp.sync_gradients();
  const auto want = plain->trainable_parameters(), got = dp_model->trainable_parameters();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TENSOR_EQ(got[i].grad(), want[i].grad());
}

}  // namespace
}  // namespace tg::test
