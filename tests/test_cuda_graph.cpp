// CUDA graphs (core/cuda_graph.h): a replayed training step (LoRA and full, with clipping, AdamW
// and a schedule) bitwise equal to the eager steps; the private pool; what a capture refuses.
// The AdamW bookkeeping the graph relies on (lr and step counts read from tensors) runs on the
// CPU too and is checked there against the host-number path.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "core/cuda_graph.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "nn/models/llama.h"
#include "ops/adamw_step.h"
#include "ops/adamw_step_kernels.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

using cuda::CUDAGraph;
const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

class CudaGraphTest : public testing::SeededTest {};

TEST_F(CudaGraphTest, RefusesTheCpuAndHooksOutsideACapture) {
  EXPECT_ERROR_HAS(CUDAGraph{kCpu}, "CUDAGraph", "wants a CUDA device, got cpu");
  EXPECT_FALSE(cuda::is_current_stream_capturing(kCpu));
  EXPECT_ERROR_HAS(cuda::at_each_replay(kGpu, "test", [] {}), "at_each_replay", "no CUDA graph is capturing on cuda:0");
}

// The tensor-held lr and step count (what optim::AdamW passes, and what a graph replays) against
// host numbers: three steps with a changing lr and weight decay, bitwise.
TEST_F(CudaGraphTest, AdamWCountersOnTheCpuMatchHostNumbers) {
  const Tensor init = randn({37}, gen);
  Tensor p_host = clone(init), p_dev = clone(init);
  Tensor m_host = zeros({37}), v_host = zeros({37}), m_dev = zeros({37}), v_dev = zeros({37});
  Tensor counters = zeros({4}, {.dtype = kFloat64}), lr_wd = zeros({2}, {.dtype = kFloat64});
  const double lrs[] = {1e-3, 3e-3, 2e-4}, wds[] = {0.1, 0.0, 0.01};
  for (int s = 0; s < 3; ++s) {
    const Tensor g = randn({37}, gen);
    adamw_step_({{p_host, g, m_host, v_host, lrs[s], wds[s], s + 1}}, 0.9, 0.999, 1e-8);
    copy_(lr_wd, from_vector(std::vector<double>{lrs[s], wds[s]}));
    adamw_step_({{p_dev, g, m_dev, v_dev, 0, 0, 1, counters, lr_wd}}, 0.9, 0.999, 1e-8);
    EXPECT_TENSOR_EQ(p_dev, p_host);
    EXPECT_TENSOR_EQ(m_dev, m_host);
    EXPECT_TENSOR_EQ(v_dev, v_host);
  }
  const std::vector<double> c = counters.to_vector<double>();
  const AdamWScale<double> want = adamw_scale(lrs[2], wds[2], 3, 0.9, 0.999);
  EXPECT_EQ(c, (std::vector<double>{3, want.decay, want.step_size, want.inv_sqrt_bc2}));
  EXPECT_ERROR_HAS(adamw_step_({{p_dev, randn({37}, gen), m_dev, v_dev, 0, 0, 1, counters, {}}}, 0.9, 0.999, 1e-8),
                   "adamw_step_", "counters and lr_wd come together");
  EXPECT_ERROR_HAS(
      adamw_step_({{p_dev, randn({37}, gen), m_dev, v_dev, 0, 0, 1, zeros({4}), lr_wd}}, 0.9, 0.999, 1e-8),
      "adamw_step_", "counters is [4] float32", "wants [4] float64");
}

// optim::AdamW (device-held counts and lr, uploaded when a scheduler changes it) against
// adamw_step_ with host numbers, and its step counts in step_count and the state_dict.
TEST_F(CudaGraphTest, AdamWWithASchedulerMatchesHostNumbersOnTheCpu) {
  const Tensor init = randn({5, 3}, gen);
  Tensor p = clone(init).requires_grad_(true), q = clone(init), m = zeros({5, 3}), v = zeros({5, 3});
  optim::AdamW opt(std::vector<Tensor>{p}, {.lr = 0.01, .weight_decay = 0.1});
  optim::WarmupCosineLR sched(opt, 2, 6);
  for (int s = 1; s <= 4; ++s) {
    const Tensor g = randn({5, 3}, gen);
    adamw_step_({{q, g, m, v, opt.lr(), 0.1, s}}, 0.9, 0.999, 1e-8);
    p.set_grad(g);
    opt.step();
    sched.step();
    EXPECT_TENSOR_EQ(p.detach(), q);
  }
  EXPECT_EQ(opt.step_count(0), 4);
  EXPECT_EQ(opt.state_dict().at("0.step").item<int64_t>(), 4);
  optim::AdamW again(std::vector<Tensor>{p}, {.lr = 0.01});
  again.load_state_dict(opt.state_dict());
  EXPECT_EQ(again.step_count(0), 4);
}

// ---------------------------------------------------------------- on the GPU

// Ids of one step: a permutation of the 256-token vocabulary as [2, 128], so that the
// embedding's backward (float32 atomics) adds one value per row and is deterministic.
Tensor step_ids(int step) {
  std::vector<int64_t> ids(256);
  std::iota(ids.begin(), ids.end(), 0);
  for (size_t i = 0; i < ids.size(); ++i)
    std::swap(ids[i], ids[(i * 37 + static_cast<size_t>(step) * 11) % ids.size()]);
  return from_vector(ids, {2, 128}, kGpu);
}

struct Trained {
  std::vector<double> losses;
  std::vector<Tensor> params;  // on the CPU after the last step
  int64_t steps = 0;
};

// `steps` steps of the tiny Llama in bf16 (LoRA adapters float32): clipping, AdamW, warmup +
// cosine. graphed: the first step eager, then it is captured and the others are replays.
Trained train(bool lora, bool graphed, int steps) {
  Generator gen(3);
  auto model = std::make_shared<nn::LlamaForCausalLM>(nn::LlamaConfig::tiny(), gen);
  model->to(kBFloat16);
  if (lora) peft::apply_lora(*model, {}, gen);
  model->to(kGpu);
  optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-2, .weight_decay = 0.01});
  optim::WarmupCosineLR sched(opt, 2, steps);
  Tensor ids = step_ids(0), loss;
  auto body = [&] {
    opt.zero_grad();
    loss = model->loss(ids, ids);
    loss.backward();
    optim::clip_grad_norm_(model->trainable_parameters(), 1.0);
    opt.step();
  };
  CUDAGraph graph;
  Trained out;
  for (int s = 0; s < steps; ++s) {
    if (s > 0) copy_(ids, step_ids(s));
    if (graphed && s == 1) graph.capture(body);
    if (graph.captured()) graph.replay();
    else body();
    sched.step();
    out.losses.push_back(loss.item());
  }
  for (const Tensor& p : model->trainable_parameters()) out.params.push_back(to(p.detach(), kCpu));
  out.steps = opt.step_count(0);
  return out;
}

void expect_replays_match_eager(bool lora) {
  const Trained eager = train(lora, false, 4), graphed = train(lora, true, 4);
  EXPECT_EQ(graphed.losses, eager.losses) << "the losses of the eager step and three replays";
  EXPECT_NE(eager.losses[3], eager.losses[1]) << "the steps train";
  EXPECT_EQ(graphed.steps, 4) << "AdamW counted the replays";
  ASSERT_EQ(graphed.params.size(), eager.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TENSOR_EQ(graphed.params[i], eager.params[i]);
  }
}

TEST_F(CudaGraphTest, ReplayedLoraStepsAreBitwiseTheEagerSteps) {
  TG_REQUIRE_CUDA();
  expect_replays_match_eager(/*lora=*/true);
}

TEST_F(CudaGraphTest, ReplayedFullStepsAreBitwiseTheEagerSteps) {
  TG_REQUIRE_CUDA();
  expect_replays_match_eager(/*lora=*/false);
}

// A block the capture used is never handed to an eager allocation while the graph lives.
TEST_F(CudaGraphTest, CaptureAllocationsComeFromAPrivatePool) {
  TG_REQUIRE_CUDA();
  Tensor x = ones({1000}, {.device = kGpu}), y;
  const void* scratch = nullptr;
  CUDAGraph graph;
  graph.capture([&] {
    Tensor t = mul(x, 2.0);  // freed inside the capture: back to the graph's pool
    scratch = t.data_ptr();
    y = add(t, 1.0);
  });
  Tensor eager = mul(x, 5.0);
  EXPECT_NE(eager.data_ptr(), scratch);
  EXPECT_NE(eager.data_ptr(), y.data_ptr());
  fill_(x, 4.0);  // inputs go into the tensors the capture read
  graph.replay();
  EXPECT_EQ(sum(y).item(), 9000.0);
  EXPECT_EQ(sum(eager).item(), 5000.0);
}

TEST_F(CudaGraphTest, CaptureRefusesHostWaitsDropoutAndFreshOptimizerState) {
  TG_REQUIRE_CUDA();
  Tensor x = ones({8}, {.device = kGpu});
  CUDAGraph g;
  EXPECT_ERROR_HAS(g.replay(), "CUDAGraph", "replay() before capture()");
  EXPECT_ERROR_HAS(g.capture([&] { sum(x).item(); }), "copy to the host", "cuda:0 is capturing a CUDA graph");
  EXPECT_ERROR_HAS(g.capture([&] { copy_(x, ones({8})); }), "copy to the GPU", "capturing a CUDA graph");
  EXPECT_ERROR_HAS(g.capture([&] { synchronize(kGpu); }), "synchronize", "capturing a CUDA graph");
  EXPECT_ERROR_HAS(g.capture([&] { dropout(x, 0.1, true, gen); }), "dropout", "p = 0.1", "same elements");
  Tensor p = ones({8}, {.device = kGpu}).requires_grad_(true);
  optim::AdamW opt(std::vector<Tensor>{p});
  p.set_grad(ones({8}, {.device = kGpu}));
  EXPECT_ERROR_HAS(g.capture([&] { opt.step(); }), "AdamW", "no state yet", "take one step eagerly");
  EXPECT_FALSE(g.captured());
  EXPECT_EQ(sum(x).item(), 8.0) << "the device works after a failed capture";
  Tensor y;
  g.capture([&] {
    CUDAGraph inner;
    EXPECT_ERROR_HAS(inner.capture([] {}), "already capturing");
    y = mul(x, 3.0);
  });
  EXPECT_ERROR_HAS(g.capture([] {}), "already holds a capture");
  g.replay();
  EXPECT_EQ(sum(y).item(), 24.0);
}

// An index error inside a replayed graph is reported (late, as eagerly) by the next replay.
TEST_F(CudaGraphTest, ReplaysReportBadIndices) {
  TG_REQUIRE_CUDA();
  Tensor w = ones({4, 2}, {.device = kGpu}), idx = from_vector(std::vector<int64_t>{0, 1}, {2}, kGpu), out;
  embedding(w, idx);  // warm-up: the index flag exists
  CUDAGraph g;
  g.capture([&] { out = embedding(w, idx); });
  copy_(idx, from_vector(std::vector<int64_t>{0, 9}, {2}));
  g.replay();
  synchronize(kGpu);
  EXPECT_ERROR_HAS(g.replay(), "embedding", "index 9 is out of range");
  copy_(idx, from_vector(std::vector<int64_t>{3, 1}, {2}));
  g.replay();  // the error was reported once and cleared
  synchronize(kGpu);
  EXPECT_NO_THROW(g.replay());
  EXPECT_EQ(to(out, kCpu).to_vector<float>(), std::vector<float>(4, 1.0f));
}

}  // namespace
}  // namespace tg
