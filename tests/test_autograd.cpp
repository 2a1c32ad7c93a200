// Autograd semantics: accumulation, retain_graph, no_grad, masks decided at backward time,
// the version check, the engine's mask contract, and clear errors.
#include <gtest/gtest.h>

#include <cmath>

#include "tapegrad.h"
#include "testing/testing.h"

namespace tg {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class Autograd : public testing::SeededTest {};

TEST_F(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = from_vector<float>({1, 2, 3}, {}, Device::cpu(), true);
  sum(x * 2.0).backward();
  sum(x * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 5, 5}));
}

TEST_F(Autograd, SecondBackwardWithoutRetainGraphIsAnError) {
  Tensor x = randn({4}, gen, {.requires_grad = true});
  Tensor y = sum(exp(x));
  y.backward();
  std::string msg = message_of([&] { y.backward(); });
  EXPECT_TRUE(contains(msg, "second time") && contains(msg, "retain_graph")) << msg;
}

TEST_F(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = randn({4}, gen, {.requires_grad = true});
  Tensor y = sum(exp(x));
  y.backward({}, /*retain_graph=*/true);
  Tensor first = clone_data(x.grad());
  y.backward();
  EXPECT_TENSOR_NEAR(x.grad(), first * 2.0, 1e-6, 0);
}

TEST_F(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = randn({3}, gen, {.requires_grad = true});
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_NE((x * 2.0).grad_fn(), nullptr);
}

TEST_F(Autograd, OpsOnTensorsWithoutGradRecordNothing) {
  Tensor a = randn({3}, gen), b = randn({3}, gen);
  EXPECT_EQ((a * b).grad_fn(), nullptr);
}

TEST_F(Autograd, InPlaceWriteAfterSaveIsDetected) {
  Tensor w = randn({3}, gen, {.requires_grad = true});
  Tensor x = randn({3}, gen);  // saved by mul because w needs its gradient
  Tensor y = sum(mul(x, w));
  fill_(x, 1.0);
  std::string msg = message_of([&] { y.backward(); });
  EXPECT_TRUE(contains(msg, "mul") && contains(msg, "saved tensor 'a'") && contains(msg, "modified in place"))
      << msg;
}

TEST_F(Autograd, InPlaceWriteIntoALeafThatRequiresGradNeedsNoGrad) {
  Tensor w = randn({3}, gen, {.requires_grad = true});
  EXPECT_TRUE(contains(message_of([&] { fill_(w, 0.0); }), "NoGradGuard"));
  NoGradGuard g;
  fill_(w, 0.0);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST_F(Autograd, FrozenLinearWeightSkipsTheDwGemmAndKeepsNoInput) {
  Tensor x = randn({8, 16}, gen, {.requires_grad = true});
  Tensor w = randn({4, 16}, gen);  // frozen
  Tensor b = randn({4}, gen, {.requires_grad = true});
  Tensor y = linear(x, w, b);
  // x is not kept: only the weight (for dX) is saved.
  EXPECT_EQ(y.grad_fn()->saved_bytes(), w.nbytes());
  KernelTrace trace;
  sum(y).backward();
  EXPECT_TRUE(trace.contains("linear.backward[dx,dbias]")) << trace.str();
  EXPECT_TRUE(trace.contains("linear.dx"));
  EXPECT_FALSE(trace.contains("linear.dweight_gemm")) << trace.str();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(x.grad().defined() && b.grad().defined());
}

TEST_F(Autograd, FrozenInputKeepsOnlyWhatDwNeeds) {
  Tensor x = randn({8, 16}, gen);  // input needs no gradient (first layer)
  Tensor w = randn({4, 16}, gen, {.requires_grad = true});
  Tensor y = linear(x, w);
  EXPECT_EQ(y.grad_fn()->saved_bytes(), x.nbytes());
  KernelTrace trace;
  sum(y).backward();
  EXPECT_FALSE(trace.contains("linear.dx")) << trace.str();
  EXPECT_TRUE(trace.contains("linear.dweight_gemm"));
}

TEST_F(Autograd, BackwardInputsNarrowTheMaskAtBackwardTime) {
  Tensor x = randn({8, 16}, gen, {.requires_grad = true});
  Tensor w = randn({4, 16}, gen, {.requires_grad = true});
  Tensor loss = sum(linear(x, w));
  KernelTrace trace;
  loss.backward({}, false, {x});
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(trace.contains("linear.dweight_gemm")) << trace.str();
}

TEST_F(Autograd, BackwardPlanShowsMasksAndVariants) {
  Tensor x = randn({8, 16}, gen, {.requires_grad = true});
  Tensor w = randn({4, 16}, gen);
  Tensor loss = sum(silu(linear(x, w)));
  std::string plan = format_plan(backward_plan({loss}));
  EXPECT_TRUE(contains(plan, "linear[dx] mask(x=1 weight=0 bias=0)")) << plan;
  EXPECT_TRUE(contains(plan, "silu[dx]")) << plan;
  EXPECT_TRUE(contains(plan, "accumulate_grad[grad]")) << plan;
  // Nothing ran: the plan only looks.
  EXPECT_FALSE(x.grad().defined());
  // A branch that leads to no wanted gradient is skipped.
  Tensor frozen_path = sum(exp(randn({3}, gen)));
  (void)frozen_path;
  auto steps = backward_plan({loss}, {x});
  for (const auto& s : steps) EXPECT_TRUE(s.runs) << s.node;
}

TEST_F(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor x = randn({3}, gen, {.requires_grad = true});
  Tensor y = x * 2.0;
  EXPECT_TRUE(contains(message_of([&] { y.backward(); }), "one-element output"));
  y.backward(ones({3}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_TRUE(contains(message_of([&] { (x * 2.0).backward(ones({4})); }), "does not match the output"));
}

TEST_F(Autograd, BackwardOnATensorWithoutGradIsAnError) {
  EXPECT_TRUE(contains(message_of([&] { sum(randn({2}, gen)).backward(); }), "does not require grad"));
}

TEST_F(Autograd, RetainGradKeepsANonLeafGradient) {
  Tensor x = randn({3}, gen, {.requires_grad = true});
  Tensor h = x * 3.0;
  h.retain_grad();
  sum(h * 2.0).backward();
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{6, 6, 6}));
}

TEST_F(Autograd, OneTensorUsedTwiceSumsBothPaths) {
  Tensor x = from_vector<float>({1, 2}, {}, Device::cpu(), true);
  sum(x * x + x).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 5}));
}

// A tensor reached by several paths: the engine sums the gradients in place only into a buffer
// nothing else can see; a gradient the caller (or another slot) still holds is never written.
TEST_F(Autograd, SummingGradientsNeverWritesIntoATensorOthersHold) {
  Tensor x = from_vector<float>({1, 2, 3}, {}, Device::cpu(), true);
  Tensor y = x * 1.0;
  // Fresh gradients from two muls: summed in place. y + y: one gradient object in two slots.
  Tensor z = add(add(y * 2.0, y * 3.0), add(y, y));
  Tensor g = from_vector<float>({1, 1, 1});
  z.backward(g);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  // The root gradient itself reaching a tensor twice (w + w) is the caller's: left alone.
  Tensor w = from_vector<float>({1, 2}, {}, Device::cpu(), true);
  Tensor h = from_vector<float>({0.5f, 0.25f});
  add(w, w).backward(h);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1.0f, 0.5f}));
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
}

TEST_F(Autograd, MultiOutputNodeWithOneOutputUsed) {
  Tensor x = randn({6, 2}, gen, {.requires_grad = true});
  auto parts = split(x, 2, 0);
  sum(parts[1]).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}));
}

// A deliberately wrong op: y = x^2 whose backward forgets the factor 2.
struct BadSquareBackward final : Node {
  const char* name() const override { return "bad_square"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    return {mul(g[0], unpack(0))};
  }
};
Tensor bad_square(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard g;
    y = x * x;
  }
  if (auto n = record<BadSquareBackward>({{"x", x}}, {y})) n->saved = {SavedTensor(x, "x")};
  return y;
}

TEST_F(Autograd, GradcheckCatchesAWrongGradient) {
  Tensor x = randn({2, 3}, gen, {.dtype = kFloat64, .requires_grad = true});
  auto r = testing::gradcheck([&] { return bad_square(x); }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.report, "worst element")) << r.report;
  auto good = testing::gradcheck([&] { return x * x; }, {x});
  EXPECT_TRUE(good.ok) << good.report;
}

// A node that ignores its mask: the engine must refuse its extra gradient.
struct GreedyBackward final : Node {
  const char* name() const override { return "greedy"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override { return {g[0], g[0]}; }
};

TEST_F(Autograd, EngineRejectsAGradientTheMaskDidNotAskFor) {
  Tensor a = randn({3}, gen, {.requires_grad = true});
  Tensor b = randn({3}, gen);
  Tensor y;
  {
    NoGradGuard g;
    y = a + b;
  }
  record<GreedyBackward>({{"a", a}, {"b", b}}, {y});
  std::string msg = message_of([&] { sum(y).backward(); });
  EXPECT_TRUE(contains(msg, "greedy") && contains(msg, "'b'") && contains(msg, "mask did not ask")) << msg;
}

TEST_F(Autograd, OpErrorsNameTheOpAndWhatItGot) {
  Tensor a = zeros({2, 3}), b = zeros({4, 3});
  EXPECT_EQ(message_of([&] { a + b; }), "add: shapes [2, 3] and [4, 3] do not broadcast (dim 0: 2 vs 4)");
  EXPECT_EQ(message_of([&] { a * to(zeros({2, 3}), kBFloat16); }),
            "mul: 'b' has dtype bfloat16 but 'a' has float32 (cast one with tg::to(x, dtype))");
  EXPECT_EQ(message_of([&] { matmul(a, b); }), "matmul: inner dims differ: a [2, 3] has 3 columns, b [4, 3] has 4 rows");
  EXPECT_EQ(message_of([&] { linear(a, zeros({5, 4})); }),
            "linear: x has 3 features (shape [2, 3]), weight [5, 4] wants 4");
  EXPECT_EQ(message_of([&] { exp(arange(3)); }),
            "exp: 'x' must be floating point (float32, bfloat16 or float64), got int64");
  EXPECT_EQ(message_of([&] { sum(a, {2}); }), "sum: dim 2 is out of range for a tensor of 2 dims (wants -2..1)");
}

TEST_F(Autograd, Float64GradcheckOfAComposition) {
  Tensor x = randn({3, 4}, gen, {.dtype = kFloat64, .requires_grad = true});
  Tensor w = randn({5, 4}, gen, {.dtype = kFloat64, .requires_grad = true});
  EXPECT_GRADCHECK([&] { return mean(gelu(linear(x, w)) * sigmoid(sum(x, {1}, true)), {0}); }, {x, w});
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

TEST(AutogradGraphs, ALeafSharedByTwoLiveGraphsGetsBothGradients) {
  Tensor w = from_vector<float>({1, 2}, {}, Device::cpu(), true);
  Tensor a = sum(w * 3.0), b = sum(exp(w));
  a.backward();
  b.backward();  // the leaf's accumulator already ran for `a`: it must run again
  std::vector<float> g = w.grad().to_vector<float>();
  EXPECT_NEAR(g[0], 3 + std::exp(1.0), 1e-5);
  EXPECT_NEAR(g[1], 3 + std::exp(2.0), 1e-5);
}

TEST(AutogradGraphs, ANodeWithoutSavedTensorsMayRunTwice) {
  // As in PyTorch: only freed saved tensors make a second backward an error.
  Tensor x = from_vector<float>({1, 2}, {}, Device::cpu(), true);
  Tensor y = sum(x * 2.0 + 1.0);
  y.backward();
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 4}));
}

TEST_F(Autograd, GradReturnsTheGradientsWithoutTouchingDotGrad) {
  Tensor x = randn({5}, gen, {.requires_grad = true}), w = randn({5}, gen, {.requires_grad = true});
  Tensor unused = randn({2}, gen, {.requires_grad = true});
  Tensor y = sum(mul(exp(x), w));
  std::vector<Tensor> g = grad({y}, {}, {x, unused}, true);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(g[1].defined()) << "no path reaches it";
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined()) << "w was not asked for";
  y.backward();
  EXPECT_TENSOR_EQ(g[0], x.grad());
  EXPECT_TRUE(contains(message_of([&] { grad({y}, {}, {}); }), "at least one input"));
}

// The hook sees the sum of every path (x is used twice), once per backward, after .grad holds it.
TEST(PostAccumulateGradHook, SeesTheFinalGradientOncePerBackward) {
  Tensor x = from_vector(std::vector<double>{1.0, 2.0});
  x.requires_grad_(true);
  std::vector<std::vector<double>> seen;
  HookHandle h = register_post_accumulate_grad_hook(x, [&](const Tensor& leaf) {
    EXPECT_TRUE(leaf.same(x));
    EXPECT_FALSE(grad_mode_enabled());
    seen.push_back(leaf.grad().to_vector<double>());
  });
  sum(add(mul(x, 2.0), mul(x, 3.0))).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{5.0, 5.0}));
  sum(mul(x, 1.0)).backward();  // accumulates: the hook sees 5 + 1
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{6.0, 6.0}));
  grad({sum(mul(x, 4.0))}, {}, {x});  // nothing accumulated: no call
  EXPECT_EQ(seen.size(), 2u);
  h.remove();
  sum(x).backward();
  EXPECT_EQ(seen.size(), 2u);
}

TEST(PostAccumulateGradHook, RunsInRegistrationOrderUntilItsHandleGoes) {
  Tensor x = from_vector(std::vector<double>{1.0});
  x.requires_grad_(true);
  std::string order;
  HookHandle a = register_post_accumulate_grad_hook(x, [&](const Tensor&) { order += "a"; });
  {
    HookHandle b = register_post_accumulate_grad_hook(x, [&](const Tensor&) { order += "b"; });
    sum(x).backward();
  }
  sum(x).backward();
  EXPECT_EQ(order, "aba");
}

TEST(PostAccumulateGradHook, WantsALeafThatRequiresGrad) {
  Tensor x = from_vector(std::vector<double>{1.0});
  EXPECT_TRUE(contains(message_of([&] { (void)register_post_accumulate_grad_hook(x, [](const Tensor&) {}); }),
                       "register_post_accumulate_grad_hook: wants a leaf tensor that requires grad, got a tensor without requires_grad"));
  x.requires_grad_(true);
  Tensor y = mul(x, 2.0);
  EXPECT_TRUE(contains(message_of([&] { (void)register_post_accumulate_grad_hook(y, [](const Tensor&) {}); }),
                       "a non-leaf"));
}

}  // namespace
}  // namespace tg
