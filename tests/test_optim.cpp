// Optimizers (against steps computed by hand), their state dicts, gradient clipping and the
// learning-rate schedule.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "nn/linear.h"
#include "ops/adamw_step.h"
#include "ops/adamw_step_kernels.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
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
  EXPECT_EQ(keys.size(), 9u) << "3 per parameter, 3 for the one group";
  EXPECT_TRUE(keys.count("w.exp_avg") && keys.count("w.exp_avg_sq") && keys.count("w.step"));
  EXPECT_TRUE(keys.count("param_groups.0.lr") && keys.count("param_groups.0.params"));

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

// adamw_update as tensor ops (the math before the fused step), for one tensor.
void composed_adamw(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, double lr, double wd,
                    int64_t t, double b1, double b2, double eps) {
  const double bc1 = 1 - std::pow(b1, static_cast<double>(t)), bc2 = 1 - std::pow(b2, static_cast<double>(t));
  copy_(p, mul(p, 1 - lr * wd));
  copy_(m, add(m, mul(sub(g, m), 1 - b1)));
  copy_(v, add(mul(v, b2), mul(mul(g, g), 1 - b2)));
  copy_(p, sub(p, mul(div(m, add(div(sqrt(v), std::sqrt(bc2)), eps)), lr / bc1)));
}

// Every AdamW step is one fused pass on the CPU (float32 and float64, several parameters of
// several chunks, a transposed one through a contiguous copy), equal to the tensor-op
// composition, with no tensor allocated after the first step.
TEST_F(OptimTest, AdamWFusedCpuStepMatchesTheComposition) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<Shape> shapes = {{6, 9}, {50, 61}, {7, 3}};  // 54, 3050 (3 chunks), 21 elements
    std::vector<Tensor> fused, ref, m, v;
    for (const Shape& sh : shapes) {
      Tensor init = to(randn(sh, gen), dt);
      fused.push_back(clone(init).requires_grad_(true));
      ref.push_back(clone(init));
      m.push_back(zeros(sh, {dt})), v.push_back(zeros(sh, {dt}));
    }
    fused[2] = transpose(contiguous(transpose(fused[2], 0, 1)), 0, 1).detach().requires_grad_(true);
    ASSERT_FALSE(fused[2].is_contiguous());
    optim::AdamW a(fused, {.lr = 0.01, .weight_decay = 0.1});
    for (int i = 0; i < 4; ++i) {
      for (size_t k = 0; k < shapes.size(); ++k) {
        Tensor g = to(randn(shapes[k], gen), dt);
        fused[k].set_grad(g);
        composed_adamw(ref[k], g, m[k], v[k], 0.01, 0.1, i + 1, 0.9, 0.999, 1e-8);
      }
      const uint64_t allocs = memory_stats().allocations;
      KernelTrace trace;
      a.step();
      EXPECT_EQ(trace.count("adamw_step.fused_cpu"), 1u);
      if (i > 0) EXPECT_EQ(memory_stats().allocations - allocs, 1u) << "only the transposed parameter's copy";
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE(k);
      EXPECT_TENSOR_NEAR(fused[k], ref[k], 1e-6, 1e-7);
      const std::string key = std::to_string(k) + ".exp_avg_sq";
      EXPECT_TENSOR_NEAR(a.state_dict().at(key), v[k], 1e-6, 1e-12);
    }
  }
}

// A bfloat16 parameter keeps float32 moments and is updated in float32, rounded once: one step
// equals the float32 step from the same values, rounded to bfloat16.
TEST_F(OptimTest, AdamWBFloat16ParametersUseFloat32Moments) {
  Tensor init = to(randn({3000}, gen), kBFloat16), g = to(randn({3000}, gen), kBFloat16);
  Tensor pb = clone(init).requires_grad_(true), pf = to(init, kFloat32).requires_grad_(true);
  optim::AdamW ob({pb}, {.lr = 0.05}), of({pf}, {.lr = 0.05});
  pb.set_grad(g);
  pf.set_grad(to(g, kFloat32));
  ob.step();
  of.step();
  EXPECT_EQ(ob.state_dict().at("0.exp_avg").dtype(), kFloat32);
  EXPECT_TENSOR_EQ(ob.state_dict().at("0.exp_avg_sq"), of.state_dict().at("0.exp_avg_sq"));
  EXPECT_TENSOR_EQ(pb, to(pf, kBFloat16));
}

TEST(Optim, AdamWStepOpRejectsBadInput) {
  Tensor p = zeros({4}), g = zeros({4}), m = zeros({4}), v = zeros({4});
  NoGradGuard no_grad;
  try {
    adamw_step_({{p, g, zeros({3}), v, 0.1, 0.0, 1}}, 0.9, 0.999, 1e-8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg is [3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(adamw_step_({{p, g, m, v, 0.1, 0.0, 0}}, 0.9, 0.999, 1e-8), Error) << "step 0";
  EXPECT_THROW(adamw_step_({{p, g, m, v, -0.1, 0.0, 1}}, 0.9, 0.999, 1e-8), Error) << "negative lr";
  EXPECT_THROW(adamw_step_({{p, g, m, v, 0.1, 0.0, 1}}, 1.0, 0.999, 1e-8), Error) << "beta1 1";
  Tensor pb = zeros({4}, {kBFloat16}), gb = zeros({4}, {kBFloat16});
  EXPECT_THROW(adamw_step_({{pb, gb, zeros({4}, {kBFloat16}), v, 0.1, 0.0, 1}}, 0.9, 0.999, 1e-8), Error)
      << "bfloat16 moments";
  EXPECT_THROW(adamw_step_({{zeros({4}, {kInt64}), zeros({4}, {kInt64}), m, v, 0.1, 0.0, 1}}, 0.9, 0.999, 1e-8),
               Error);
}

// ---------------------------------------------------------------- parameter groups

// Two groups (one with its own lr and no weight decay) update as two separate optimizers would.
TEST_F(OptimTest, ParamGroupsHaveTheirOwnLrAndWeightDecay) {
  Tensor w = randn({5, 4}, gen), b = randn({4}, gen), n = randn({4}, gen);
  std::vector<Tensor> grouped, alone_a, alone_b;
  for (const Tensor& t : {w, b, n}) grouped.push_back(clone(t).requires_grad_(true));
  alone_a = {clone(w).requires_grad_(true)};
  alone_b = {clone(b).requires_grad_(true), clone(n).requires_grad_(true)};
  optim::AdamW opt({{{grouped[0]}, {}}, {{grouped[1], grouped[2]}, {.lr = 0.1, .weight_decay = 0.0}}},
                   {.lr = 0.01, .weight_decay = 0.5});
  optim::AdamW a(alone_a, {.lr = 0.01, .weight_decay = 0.5}), c(alone_b, {.lr = 0.1, .weight_decay = 0.0});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[1].lr, 0.1);
  EXPECT_EQ(opt.param_groups()[1].weight_decay, 0.0);
  EXPECT_EQ(opt.param_groups()[0].weight_decay, 0.5) << "unset: the optimizer's option";
  EXPECT_EQ(opt.param_groups()[1].params, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(opt.named_params()[2].first, "2") << "unnamed parameters are named by index";
  for (int i = 0; i < 3; ++i) {
    for (size_t k = 0; k < 3; ++k) {
      Tensor g = randn(grouped[k].shape(), gen);
      grouped[k].set_grad(g);
      (k == 0 ? alone_a[0] : alone_b[k - 1]).set_grad(clone(g));
    }
    opt.step();
    a.step();
    c.step();
  }
  EXPECT_TENSOR_EQ(grouped[0], alone_a[0]);
  EXPECT_TENSOR_EQ(grouped[1], alone_b[0]);
  EXPECT_TENSOR_EQ(grouped[2], alone_b[1]);

  opt.param_groups()[0].lr = -1;
  EXPECT_THROW(opt.step(), Error) << "a group's bad lr";
  EXPECT_THROW(optim::AdamW(std::vector<optim::ParamGroupSpec>{}), Error) << "no group";
}

// SGD by hand: p -= lr (g + wd p), with the group's lr and weight decay.
TEST(Optim, SGDParamGroupsByHand) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::SGD opt({{{{"a", a}}, {.weight_decay = 0.5}}, {{{"b", b}}, {.lr = 0.5}}}, {.lr = 0.1});
  a.set_grad(vec({1.0}));
  b.set_grad(vec({1.0}));
  opt.step();
  EXPECT_TENSOR_NEAR(a, vec({1.0 - 0.1 * (1.0 + 0.5)}), 0, 1e-15);
  EXPECT_TENSOR_NEAR(b, vec({2.0 - 0.5 * 1.0}), 0, 1e-15);
}

TEST(Optim, SchedulerSetsEveryGroupsLr) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::AdamW opt({{{a}, {.lr = 2e-3}}, {{b}, {.lr = 1e-3}}});
  optim::WarmupCosineLR sched(opt, 4, 104);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{2e-3, 1e-3}));
  sched.step();
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, 0.5e-3);
  EXPECT_DOUBLE_EQ(opt.param_groups()[1].lr, 0.25e-3);
  EXPECT_DOUBLE_EQ(sched.get_last_lr(), 0.5e-3);
  sched.set_step(54);
  EXPECT_NEAR(opt.param_groups()[1].lr, 0.5e-3, 1e-15);
  opt.set_lr(3e-3);
  EXPECT_EQ(opt.param_groups()[1].lr, 3e-3) << "set_lr sets every group";
}

// The groups' lr and weight decay travel with the state; loading into other groups fails and
// names them.
TEST_F(OptimTest, ParamGroupsSaveAndLoad) {
  auto dir = std::filesystem::temp_directory_path() / ("tg_optim_groups_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "opt.safetensors").string();
  auto make = [&](uint64_t seed) {
    Generator g(seed);
    optim::NamedParams ps = {{"w", randn({3, 2}, g)}, {"b", randn({2}, g)}, {"norm", randn({2}, g)}};
    for (auto& [name, p] : ps) p.requires_grad_(true);
    return ps;
  };
  optim::NamedParams p1 = make(1), p2 = make(1);
  auto groups = [](const optim::NamedParams& ps, double lr2) {
    return std::vector<optim::ParamGroupSpec>{{{ps[0]}, {}}, {{ps[1], ps[2]}, {.lr = lr2, .weight_decay = 0.0}}};
  };
  optim::AdamW opt1(groups(p1, 0.2), {.lr = 0.05});
  std::vector<Tensor> grads;
  for (int i = 0; i < 12; ++i) grads.push_back(randn(p1[i % 3].second.shape(), gen));
  auto step = [&](optim::AdamW& opt, optim::NamedParams& ps, int i) {
    for (int k = 0; k < 3; ++k) ps[k].second.set_grad(grads[3 * i + k]);
    opt.step();
  };
  step(opt1, p1, 0);
  step(opt1, p1, 1);
  opt1.param_groups()[1].lr = 0.15;
  opt1.save(path);

  optim::AdamW opt2(groups(p2, 1.0), {.lr = 1.0});
  for (int k = 0; k < 3; ++k) copy_(p2[k].second.detach(), p1[k].second);
  opt2.load(path);
  EXPECT_EQ(opt2.param_groups()[0].lr, 0.05);
  EXPECT_EQ(opt2.param_groups()[1].lr, 0.15);
  EXPECT_EQ(opt2.param_groups()[1].weight_decay, 0.0);
  for (int i = 2; i < 4; ++i) step(opt1, p1, i), step(opt2, p2, i);
  for (int k = 0; k < 3; ++k) EXPECT_TENSOR_EQ(p2[k].second, p1[k].second);

  // State written before groups existed (no param_groups entries): per-parameter state only.
  auto legacy = opt1.state_dict();
  std::erase_if(legacy, [](const auto& kv) { return kv.first.starts_with("param_groups."); });
  opt2.param_groups()[1].lr = 0.3;
  opt2.load_state_dict(legacy);
  EXPECT_EQ(opt2.param_groups()[1].lr, 0.3);

  auto message = [&](optim::Optimizer& opt) {
    try {
      opt.load(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  optim::AdamW one_group(p2, {.lr = 0.05});
  EXPECT_NE(message(one_group).find("the state has 2 parameter group(s), the optimizer 1"), std::string::npos)
      << message(one_group);
  optim::AdamW regrouped({{{p2[0], p2[1]}, {}}, {{p2[2]}, {}}});
  const std::string m = message(regrouped);
  EXPECT_NE(m.find("group 0 holds ['w'] in the state, ['w', 'b'] here"), std::string::npos) << m;
  EXPECT_NE(m.find("group 1 holds ['b', 'norm'] in the state, ['norm'] here"), std::string::npos) << m;
  std::filesystem::remove_all(dir);
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

// The GPU's multi-tensor step against the CPU's: parameters of 1, 7 and 1000003 elements and
// enough small ones of odd sizes for two launches, in two groups; float32 and bfloat16. Each step
// is two launches (not one per op or per tensor) and allocates nothing once the moments exist.
TEST_F(OptimTest, AdamWCudaMultiTensorStepMatchesCpu) {
  TG_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<int64_t> sizes = {1, 7, 1000003};
    for (int k = 0; sizes.size() < cuda::kAdamWTensorsPerLaunch + 9; ++k) sizes.push_back(1 + (37 * k) % 300);
    std::vector<Tensor> pc, pg;
    for (int64_t n : sizes) {
      Tensor init = to(randn({n}, gen), dt);
      pc.push_back(clone(init).requires_grad_(true));
      pg.push_back(to(init, Device::cuda()).requires_grad_(true));
    }
    auto groups = [](const std::vector<Tensor>& ps) {
      const auto half = ps.begin() + static_cast<std::ptrdiff_t>(ps.size() / 2);
      return std::vector<optim::ParamGroupSpec>{{std::vector<Tensor>(ps.begin(), half), {}},
                                                {std::vector<Tensor>(half, ps.end()), {.lr = 0.03, .weight_decay = 0}}};
    };
    optim::AdamW oc(groups(pc), {.lr = 0.01, .weight_decay = 0.1}), og(groups(pg), {.lr = 0.01, .weight_decay = 0.1});
    for (int i = 0; i < 3; ++i) {
      for (size_t k = 0; k < sizes.size(); ++k) {
        Tensor g = to(randn({sizes[k]}, gen), dt);
        pc[k].set_grad(g);
        pg[k].set_grad(to(g, Device::cuda()));
      }
      const uint64_t allocs = memory_stats(Device::cuda()).allocations;
      KernelTrace trace;
      og.step();
      EXPECT_EQ(trace.count("adamw_step.cuda_launch"), 2u) << "one launch per 64 tensors";
      if (i > 0) EXPECT_EQ(memory_stats(Device::cuda()).allocations, allocs) << "no temporaries";
      oc.step();
    }
    const double p_rtol = dt == kFloat32 ? 1e-6 : 2e-2;  // bfloat16: a rounding may differ by an ulp
    for (size_t k = 0; k < sizes.size(); ++k) {
      SCOPED_TRACE(k);
      EXPECT_TENSOR_NEAR(to(pg[k].detach(), Device::cpu()), pc[k], p_rtol, 1e-6);
      const std::string key = std::to_string(k);
      EXPECT_TENSOR_NEAR(to(og.state_dict().at(key + ".exp_avg"), Device::cpu()), oc.state_dict().at(key + ".exp_avg"),
                         1e-5, 1e-7);
      EXPECT_TENSOR_NEAR(to(og.state_dict().at(key + ".exp_avg_sq"), Device::cpu()),
                         oc.state_dict().at(key + ".exp_avg_sq"), 1e-5, 1e-10);
    }
  }
}

}  // namespace
}  // namespace tg::test
