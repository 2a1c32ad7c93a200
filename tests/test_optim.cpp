// Optimizers (against steps computed by hand), their state dicts, gradient clipping and the
// learning-rate schedule.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/factory.h"
#include "core/primitives.h"
#include "nn/linear.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "testing/testing.h"

namespace tg::test {
namespace {

Tensor vec(std::vector<double> v) { return from_vector(v); }

Tensor param(std::vector<double> v) {
  Tensor p = from_vector(v);
  p.requires_grad_(true);
  return p;
}

class OptimTest : public testing::SeededTest {};

// Two AdamW steps on a 3-element float64 tensor, lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01.
// Element 0 by hand (p = 1, g1 = 0.1, g2 = -0.1):
//   step 1: p = 1 * (1 - 0.1 * 0.01) = 0.999; m = 0.01; v = 1e-5; bias corrections 0.1, 0.001
//           -> m^ = 0.1, sqrt(v^) = 0.1; p -= 0.1 * 0.1 / (0.1 + 1e-8)  -> 0.89900001
//   step 2: p = 0.89900001 * 0.999 = 0.89810100999; m = 0.9 * 0.01 - 0.01 = -0.001;
//           v = 0.999e-5 + 1e-5 = 1.999e-5; corrections 0.19, 0.001999 -> sqrt(v^) = 0.1;
//           p -= 0.1 * (-0.001 / 0.19) / (0.1 + 1e-8)  -> 0.9033641673584...
// Elements 1 and 2 follow the same arithmetic (g = -0.2, 0.4 and 0.3, 0.0).
TEST(Optim, AdamWTwoStepsByHand) {
  Tensor p = param({1.0, -2.0, 0.5});
  optim::AdamW opt({p}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  p.set_grad(vec({0.1, -0.2, 0.3}));
  opt.step();
  EXPECT_TENSOR_NEAR(p, vec({0.89900001, -1.898000005, 0.3995000033333333}), 0, 1e-13);
  p.set_grad(vec({-0.1, 0.4, 0.0}));
  opt.step();
  EXPECT_TENSOR_NEAR(p, vec({0.9033641673584202, -1.9327123565410367, 0.3320946810758212}), 0, 1e-13);
  auto st = opt.state_dict();
  EXPECT_TENSOR_NEAR(st.at("0.exp_avg"), vec({-0.001, 0.022, 0.027}), 0, 1e-15);
  EXPECT_TENSOR_NEAR(st.at("0.exp_avg_sq"), vec({1.999e-5, 1.9996e-4, 8.991e-5}), 0, 1e-17);
  EXPECT_EQ(st.at("0.step").item<int64_t>(), 2);
}

TEST(Optim, AdamWDefaultsArePyTorchs) {
  optim::AdamWOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.eps, 1e-8);
  EXPECT_EQ(o.weight_decay, 0.01);
}

TEST(Optim, OnlyParametersWithAGradAreUpdated) {
  Tensor a = param({1.0, 2.0}), b = param({3.0, 4.0});
  optim::AdamW opt({{"a", a}, {"b", b}});
  a.set_grad(vec({1.0, 1.0}));
  opt.step();
  EXPECT_TENSOR_EQ(b, vec({3.0, 4.0})) << "no grad: no weight decay either";
  EXPECT_NE(a.to_vector<double>()[0], 1.0);
  auto st = opt.state_dict();
  EXPECT_TRUE(st.count("a.exp_avg"));
  EXPECT_FALSE(st.count("b.exp_avg")) << "no state for a parameter never updated";
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 0);
  const uint64_t v = a.version();
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt.step();  // nothing has a grad now
  EXPECT_EQ(a.version(), v);
}

// SGD, lr 0.1, momentum 0.9, weight decay 0.1, p = [1, -2]:
//   step 1: d = g + 0.1 p = [0.5, 1] + [0.1, -0.2] = [0.6, 0.8]; buf = d; p = [0.94, -2.08]
//   step 2: d = [1, -1] + [0.094, -0.208] = [1.094, -1.208];
//           buf = 0.9 [0.6, 0.8] + d = [1.634, -0.488]; p = [0.7766, -2.0312]
TEST(Optim, SGDMomentumWeightDecayByHand) {
  Tensor p = param({1.0, -2.0});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  p.set_grad(vec({0.5, 1.0}));
  opt.step();
  EXPECT_TENSOR_NEAR(p, vec({0.94, -2.08}), 0, 1e-14);
  p.set_grad(vec({1.0, -1.0}));
  opt.step();
  EXPECT_TENSOR_NEAR(p, vec({0.7766, -2.0312}), 0, 1e-14);
  EXPECT_TENSOR_NEAR(opt.state_dict().at("0.momentum_buffer"), vec({1.634, -0.488}), 0, 1e-14);
  // plain SGD: p -= lr g
  Tensor q = param({1.0});
  optim::SGD plain({q}, {.lr = 0.5});
  q.set_grad(vec({2.0}));
  plain.step();
  EXPECT_TENSOR_NEAR(q, vec({0.0}), 0, 1e-15);
}

TEST(Optim, RejectsBadParameters) {
  Tensor p = param({1.0});
  EXPECT_THROW(optim::AdamW({p, p}), Error);
  Tensor nonleaf = mul(p, 2.0);
  EXPECT_THROW(optim::AdamW({nonleaf}), Error);
  EXPECT_THROW(optim::AdamW({p}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(optim::SGD({p}, {.lr = -1}), Error);
}

// Save after two steps, load into a fresh optimizer over equal parameters: the next steps match.
TEST_F(OptimTest, StateDictRoundTripResumesExactly) {
  auto dir = std::filesystem::temp_directory_path() / ("tg_optim_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "opt.safetensors").string();
  Tensor w1 = randn({4, 3}, gen), b1 = randn({3}, gen);
  w1.requires_grad_(true);
  b1.requires_grad_(true);
  optim::AdamW opt1({{"w", w1}, {"b", b1}}, {.lr = 0.05});
  std::vector<Tensor> gw, gb;
  for (int i = 0; i < 4; ++i) gw.push_back(randn({4, 3}, gen)), gb.push_back(randn({3}, gen));
  for (int i = 0; i < 2; ++i) {
    w1.set_grad(gw[i]);
    b1.set_grad(gb[i]);
    opt1.step();
  }
  opt1.save(path);
  auto keys = opt1.state_dict();
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_TRUE(keys.count("w.exp_avg") && keys.count("w.exp_avg_sq") && keys.count("w.step"));

  Tensor w2 = clone_data(w1), b2 = clone_data(b1);
  w2.requires_grad_(true);
  b2.requires_grad_(true);
  optim::AdamW opt2({{"w", w2}, {"b", b2}}, {.lr = 1.0});
  opt2.load(path);
  EXPECT_EQ(opt2.lr(), 0.05);
  EXPECT_EQ(opt2.step_count(0), 2);
  for (int i = 2; i < 4; ++i) {
    w1.set_grad(gw[i]);
    b1.set_grad(gb[i]);
    opt1.step();
    w2.set_grad(gw[i]);
    b2.set_grad(gb[i]);
    opt2.step();
  }
  EXPECT_TENSOR_EQ(w2, w1);
  EXPECT_TENSOR_EQ(b2, b1);

  // A state that does not fit: every problem in one error.
  auto bad = opt1.state_dict();
  bad["w.exp_avg"] = zeros({2});
  bad["ghost.step"] = scalar_tensor(1, {.dtype = kInt64});
  bad.erase("b.exp_avg_sq");
  try {
    opt2.load_state_dict(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("3 problem(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("'w.exp_avg' has shape [2]"), std::string::npos) << m;
    EXPECT_NE(m.find("missing 'b.exp_avg_sq'"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected 'ghost.step'"), std::string::npos) << m;
  }
  optim::SGD sgd({{"w", w2}});
  EXPECT_THROW(sgd.load(path), Error) << "AdamW state into SGD";
  std::filesystem::remove_all(dir);
}

TEST(Optim, ClipGradNormScalesByTheGlobalNorm) {
  Tensor a = param({0, 0}), b = param({0, 0, 0, 0}), c = param({1});
  a.set_grad(vec({3.0, 0.0}));
  b.set_grad(vec({0.0, 4.0, 0.0, 0.0}));
  // c has no grad and is skipped
  Tensor total = optim::clip_grad_norm_({a, b, c}, 1.0);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_NEAR(total.item(), 5.0, 1e-12);
  EXPECT_TENSOR_NEAR(a.grad(), vec({3.0 / (5 + 1e-6), 0.0}), 0, 1e-12);
  EXPECT_TENSOR_NEAR(b.grad(), vec({0.0, 4.0 / (5 + 1e-6), 0.0, 0.0}), 0, 1e-12);
  EXPECT_FALSE(c.grad().defined());
  // Below the limit: unchanged.
  a.set_grad(vec({0.3, 0.4}));
  b.set_grad(Tensor());
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 1.0).item(), 0.5, 1e-12);
  EXPECT_TENSOR_NEAR(a.grad(), vec({0.3, 0.4}), 0, 1e-15);
  EXPECT_EQ(optim::clip_grad_norm_({c}, 1.0).item(), 0.0);
  EXPECT_THROW(optim::clip_grad_norm_({a}, -1.0), Error);
}

TEST(Optim, ClipGradNormFloat32) {
  Tensor a = ones({10}, {.dtype = kFloat32});
  a.requires_grad_(true);
  a.set_grad(full({10}, 2.0, {.dtype = kFloat32}));
  Tensor total = optim::clip_grad_norm_({a}, 0.5);
  EXPECT_NEAR(total.item(), std::sqrt(40.0), 1e-5);
  EXPECT_NEAR(a.grad().to_vector<float>()[3], 2.0 * 0.5 / std::sqrt(40.0), 1e-6);
}

TEST(Optim, WarmupCosineValues) {
  using optim::warmup_cosine_factor;
  EXPECT_EQ(warmup_cosine_factor(0, 10, 110), 0.0);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(5, 10, 110), 0.5);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(10, 10, 110), 1.0);
  EXPECT_NEAR(warmup_cosine_factor(35, 10, 110), 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);  // quarter way
  EXPECT_NEAR(warmup_cosine_factor(60, 10, 110), 0.5, 1e-15);
  EXPECT_NEAR(warmup_cosine_factor(110, 10, 110), 0.0, 1e-15);
  EXPECT_NEAR(warmup_cosine_factor(500, 10, 110), 0.0, 1e-15) << "held at the end";
  EXPECT_NEAR(warmup_cosine_factor(60, 10, 110, 0.1), 0.55, 1e-15);
  EXPECT_NEAR(warmup_cosine_factor(110, 10, 110, 0.1), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(warmup_cosine_factor(0, 0, 100), 1.0) << "no warmup starts at the peak";

  Tensor p = param({1.0});
  optim::AdamW opt({p}, {.lr = 2e-3});
  optim::WarmupCosineLR sched(opt, 4, 104);
  EXPECT_EQ(opt.lr(), 0.0);
  sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5e-3);
  for (int i = 0; i < 3; ++i) sched.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 2e-3);
  EXPECT_DOUBLE_EQ(sched.get_last_lr(), 2e-3);
  sched.set_step(54);
  EXPECT_NEAR(opt.lr(), 1e-3, 1e-15);
  EXPECT_THROW(optim::WarmupCosineLR(opt, 10, 5), Error);
}

// End to end: a Linear fitted to a linear target with AdamW, the loss falls by 100x.
TEST_F(OptimTest, AdamWFitsALinearModel) {
  nn::Linear lin(3, 1, true, gen);
  Tensor x = randn({64, 3}, gen), w_true = from_vector<float>({0.5f, -1.0f, 2.0f}, {1, 3});
  Tensor y = add(matmul(x, transpose(w_true, 0, 1)), 0.3);
  optim::AdamW opt(lin.named_parameters(), {.lr = 0.05, .weight_decay = 0.0});
  auto loss_fn = [&] {
    Tensor d = sub(lin.forward(x), y);
    return mean(mul(d, d));
  };
  const double first = loss_fn().item();
  for (int i = 0; i < 300; ++i) {
    opt.zero_grad();
    Tensor loss = loss_fn();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(loss_fn().item(), first / 100);
}

// Contiguous CPU float parameters take AdamW's one-pass loop (all of them in one parallel pass
// over 1024-element chunks); a transposed (non-contiguous) parameter takes the tensor-op
// composition. Both compute the same update.
TEST_F(OptimTest, AdamWFusedCpuLoopMatchesTheComposition) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<Shape> shapes = {{6, 9}, {50, 61}, {7, 3}};  // 54, 3050 (3 chunks), 21 elements
    std::vector<Tensor> fused, composed;
    for (const Shape& sh : shapes) {
      Tensor init = to(randn(sh, gen), dt);
      fused.push_back(clone(init).requires_grad_(true));
      composed.push_back(transpose(contiguous(transpose(init, 0, 1)), 0, 1).detach().requires_grad_(true));
      ASSERT_FALSE(composed.back().is_contiguous());
    }
    optim::AdamW a(fused, {.lr = 0.01, .weight_decay = 0.1}), b(composed, {.lr = 0.01, .weight_decay = 0.1});
    for (int i = 0; i < 4; ++i) {
      for (size_t k = 0; k < shapes.size(); ++k) {
        Tensor g = to(randn(shapes[k], gen), dt);
        fused[k].set_grad(g);
        composed[k].set_grad(clone(g));
      }
      a.step();
      b.step();
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE(k);
      EXPECT_TENSOR_NEAR(fused[k], composed[k], 1e-6, 1e-7);
      const std::string key = std::to_string(k) + ".exp_avg_sq";
      EXPECT_TENSOR_NEAR(a.state_dict().at(key), b.state_dict().at(key), 1e-6, 1e-12);
    }
  }
}

TEST_F(OptimTest, AdamWAndSgdCudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  Tensor pc = randn({7, 5}, gen), qc = randn({3}, gen);
  pc.requires_grad_(true);
  qc.requires_grad_(true);
  Tensor pg = to(pc.detach(), Device::cuda()), qg = to(qc.detach(), Device::cuda());
  pg.requires_grad_(true);
  qg.requires_grad_(true);
  optim::AdamW ac({pc}), ag({pg});
  optim::SGD sc({qc}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}), sg({qg}, {.lr = 0.1, .momentum = 0.9,
                                                                                      .weight_decay = 0.01});
  for (int i = 0; i < 3; ++i) {
    Tensor g = randn({7, 5}, gen), h = randn({3}, gen);
    pc.set_grad(g);
    pg.set_grad(to(g, Device::cuda()));
    qc.set_grad(h);
    qg.set_grad(to(h, Device::cuda()));
    ac.step();
    ag.step();
    sc.step();
    sg.step();
  }
  EXPECT_TENSOR_NEAR(to(pg, Device::cpu()), pc, 1e-6, 1e-7);
  EXPECT_TENSOR_NEAR(to(qg, Device::cpu()), qc, 1e-6, 1e-7);
  EXPECT_TRUE(ag.state_dict().at("0.exp_avg").device().is_cuda());
}

}  // namespace
}  // namespace tg::test
