// softmax, cross_entropy, embedding, dropout, masked_fill: values against hand-computed ones,
// error messages, ignored targets, frozen-table pruning, dropout's mask. (Gradients, frozen
// inputs and GPU parity are covered for every case in cases_nn_ops.cpp by the op harness.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/detail/philox.h"
#include "tapegrad.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

using test::error_of;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The tg::Error message fn throws ("" when it does not throw).

Tensor vec(std::vector<float> v, Shape shape = {}) { return from_vector(v, shape.empty() ? Shape{(int64_t)v.size()} : shape); }

// ---------------------------------------------------------------- softmax

TEST(Softmax, MatchesHandComputedValues) {
  Tensor x = vec({1, 2, 3, 0, 0, 0}, {2, 3});
  // e^1, e^2, e^3 over their sum 30.1929...
  const std::vector<float> want = {0.09003057f, 0.24472847f, 0.66524096f, 1 / 3.f, 1 / 3.f, 1 / 3.f};
  EXPECT_TENSOR_NEAR(softmax(x, 1), vec(want, {2, 3}), 1e-6, 1e-7);
  // log_softmax = x - logsumexp(x), logsumexp([1,2,3]) = 3.40760596
  EXPECT_TENSOR_NEAR(log_softmax(x, -1), vec({-2.40760596f, -1.40760596f, -0.40760596f, -1.09861229f,
                                             -1.09861229f, -1.09861229f}, {2, 3}), 1e-6, 1e-6);
}

TEST(Softmax, OverAnEarlierDimEqualsTransposedLastDim) {
  Generator g(1);
  Tensor x = randn({4, 7, 5}, g);
  Tensor want = transpose(softmax(contiguous(transpose(x, 1, 2)), -1), 1, 2);
  EXPECT_TENSOR_NEAR(softmax(x, 1), want, 1e-6, 1e-7);
  EXPECT_TENSOR_NEAR(log_softmax(x, 0), transpose(log_softmax(contiguous(transpose(x, 0, 2)), -1), 0, 2), 1e-6, 1e-6);
}

TEST(Softmax, LargeAndInfiniteInputs) {
  // No overflow: the max is subtracted first.
  EXPECT_TENSOR_NEAR(softmax(vec({1000, 1001}), 0), vec({0.26894142f, 0.73105858f}), 1e-6, 1e-7);
  // -inf entries (masked attention) get exactly 0, also when the row starts with them.
  EXPECT_EQ(softmax(vec({-INFINITY, -INFINITY, 0, -INFINITY}), 0).to_vector<float>(),
            (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(log_softmax(vec({-INFINITY, 2}), 0).to_vector<float>(), (std::vector<float>{-INFINITY, 0}));
  // A row of only -inf is nan, as in PyTorch.
  for (float v : softmax(vec({-INFINITY, -INFINITY}), 0).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
}

TEST(Softmax, RejectsBadArguments) {
  EXPECT_ERROR_HAS(softmax(zeros({2, 3}), 2), "softmax");
  EXPECT_ERROR_HAS(log_softmax(arange(4), 0), "log_softmax", "floating", "int64");
}

// ---------------------------------------------------------------- cross_entropy

TEST(CrossEntropy, MatchesHandComputedValues) {
  Tensor logits = vec({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor targets = from_vector<int64_t>({2, 0});
  // row 0: logsumexp 3.40760596 - 3; row 1: log(3)
  const double l0 = 0.40760596, l1 = 1.09861229;
  EXPECT_NEAR(cross_entropy(logits, targets).item(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(cross_entropy(logits, targets, -100, Reduction::Sum).item(), l0 + l1, 1e-6);
  EXPECT_TENSOR_NEAR(cross_entropy(logits, targets, -100, Reduction::None), vec({(float)l0, (float)l1}), 1e-6, 1e-6);
  // int32 targets give the same loss.
  EXPECT_NEAR(cross_entropy(logits, to(targets, kInt32)).item(), (l0 + l1) / 2, 1e-6);
}

TEST(CrossEntropy, GradientIsSoftmaxMinusOneHot) {
  Tensor logits = vec({1, 2, 3, 1, 1, 1}, {2, 3});
  logits.requires_grad_(true);
  cross_entropy(logits, from_vector<int64_t>({2, 0})).backward();
  Tensor want = vec({0.09003057f, 0.24472847f, 0.66524096f - 1, 1 / 3.f - 1, 1 / 3.f, 1 / 3.f}, {2, 3});
  EXPECT_TENSOR_NEAR(logits.grad(), mul(want, 0.5), 1e-6, 1e-7);  // Mean over 2 rows
}

TEST(CrossEntropy, IgnoredTargetsAddNoLossAndGetZeroGradientRows) {
  Generator g(2);
  Tensor logits = randn({5, 7}, g).requires_grad_(true);
  Tensor targets = from_vector<int64_t>({3, -100, 6, -100, 0});
  Tensor loss = cross_entropy(logits, targets);
  // Mean divides by the 3 targets not ignored.
  Tensor rows = cross_entropy(logits.detach(), targets, -100, Reduction::None);
  std::vector<float> r = rows.to_vector<float>();
  EXPECT_EQ(r[1], 0.f);
  EXPECT_EQ(r[3], 0.f);
  EXPECT_NEAR(loss.item(), (r[0] + r[2] + r[4]) / 3.0, 1e-6);
  loss.backward();
  std::vector<float> d = logits.grad().to_vector<float>();
  for (int64_t i = 0; i < 5; ++i) {
    double row_abs = 0;
    for (int64_t j = 0; j < 7; ++j) row_abs += std::abs(d[i * 7 + j]);
    if (i == 1 || i == 3) EXPECT_EQ(row_abs, 0.0) << "ignored row " << i << " has a gradient";
    else EXPECT_GT(row_abs, 0.0) << "row " << i;
  }
  // A custom ignore_index that is also a valid class.
  EXPECT_NEAR(cross_entropy(logits.detach(), from_vector<int64_t>({3, 3, 6, 3, 0}), 3).item(), (r[2] + r[4]) / 2.0, 1e-6);
}

TEST(CrossEntropy, AllTargetsIgnoredMeanIsNanAsInPyTorch) {
  Tensor logits = randn({3, 4}).requires_grad_(true);
  Tensor targets = from_vector<int64_t>({-100, -100, -100});
  Tensor loss = cross_entropy(logits, targets);
  EXPECT_TRUE(std::isnan(loss.item()));  // 0 / 0
  EXPECT_EQ(cross_entropy(logits, targets, -100, Reduction::Sum).item(), 0.0);
  loss.backward();
  for (float v : logits.grad().to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(CrossEntropy, Bfloat16LogitsKeepFloat32Accuracy) {
  Generator g(3);
  Tensor logits = randn({64, 100}, g);
  Tensor targets = randint(0, 100, {64}, g);
  Tensor b = to(logits, kBFloat16);
  Tensor want = cross_entropy(to(b, kFloat32), targets);  // same rounded inputs in float32
  Tensor got = cross_entropy(b, targets);
  EXPECT_EQ(got.dtype(), kBFloat16);
  EXPECT_NEAR(got.item(), want.item(), 0.02);
}

TEST(CrossEntropy, RejectsBadArguments) {
  Tensor logits = zeros({4, 5});
  EXPECT_ERROR_HAS(cross_entropy(logits, zeros({4})), "cross_entropy", "'targets'", "int32 or int64", "float32");
  EXPECT_ERROR_HAS(cross_entropy(logits, from_vector<int64_t>({0, 1, 2})), "cross_entropy", "'targets'",
                   "[4]", "[3]");
  EXPECT_ERROR_HAS(cross_entropy(zeros({2, 2, 5}), from_vector<int64_t>({0, 1})), "cross_entropy", "2-D",
                   "[2, 2, 5]");
  EXPECT_ERROR_HAS(cross_entropy(logits, from_vector<int64_t>({0, 5, 1, 2})), "cross_entropy", "target 5",
                   "row 1", "5 classes");
  EXPECT_ERROR_HAS(cross_entropy(logits, from_vector<int64_t>({0, 1, -3, 2})), "target -3", "row 2");
  EXPECT_ERROR_HAS(cross_entropy(arange(8).as_strided({4, 2}, {2, 1}, 0), from_vector<int64_t>({0, 1, 0, 1})),
                   "cross_entropy", "'logits'", "floating");
}

// ---------------------------------------------------------------- embedding

TEST(Embedding, GathersRowsAndScatterAddsRepeats) {
  Tensor w = vec({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  w.requires_grad_(true);
  Tensor idx = from_vector<int64_t>({1, 3, 1, 0, 1, 2}, {2, 3});
  Tensor out = embedding(w, idx);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{10, 11, 30, 31, 10, 11, 0, 1, 10, 11, 20, 21}));
  sum(out).backward();
  // Row 1 appears three times, the others once.
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1, 3, 3, 1, 1, 1, 1}));
}

TEST(Embedding, FrozenTableRecordsNoScatter) {
  Generator g(4);
  Tensor idx = randint(0, 10, {5}, g);
  Tensor h = randn({5, 3}, g).requires_grad_(true);
  for (bool trainable : {true, false}) {
    SCOPED_TRACE(trainable ? "trainable" : "frozen");
    Tensor w = randn({10, 3}, g).requires_grad_(trainable);
    KernelTrace trace;
    sum(mul(embedding(w, idx), h)).backward();
    EXPECT_EQ(trace.contains("embedding.dweight_scatter"), trainable) << trace.str();
    EXPECT_EQ(w.grad().defined(), trainable);
    EXPECT_TRUE(h.grad().defined());
    h.set_grad({});
  }
}

TEST(Embedding, Bfloat16TableGetsBfloat16Gradient) {
  Tensor w = to(randn({6, 4}), kBFloat16).requires_grad_(true);
  Tensor idx = from_vector<int64_t>({2, 2, 2, 2, 5});
  sum(embedding(w, idx)).backward();
  EXPECT_EQ(w.grad().dtype(), kBFloat16);
  std::vector<float> d = w.grad().to_vector<float>();
  EXPECT_EQ(d[2 * 4], 4.f);
  EXPECT_EQ(d[5 * 4 + 3], 1.f);
  EXPECT_EQ(d[0], 0.f);
}

// The GPU's scatter sums each row's repeats in position order: the same bits every run (a byte-level
// batch repeats some rows hundreds of times), equal to the CPU's sums to float32 rounding, and an
// out-of-range index (reported by the forward) adds nothing.
TEST(Embedding, CudaBackwardIsDeterministicAndMatchesCpu) {
  TG_REQUIRE_CUDA();
  Generator g(8);
  Tensor idx = randint(0, 40, {2000}, g), grad = randn({2000, 200}, g);
  auto dweight = [&](Device d, DType dtype) {
    Tensor w = to(randn({300, 200}, g), dtype, d).requires_grad_(true);
    sum(mul(embedding(w, to(idx, d)), to(grad, dtype, d))).backward();
    return to(to(w.grad(), kFloat32), Device::cpu());
  };
  for (DType dtype : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor first = dweight(Device::cuda(), dtype);
    for (int run = 0; run < 3; ++run) EXPECT_TENSOR_EQ(dweight(Device::cuda(), dtype), first);
    EXPECT_TENSOR_NEAR(first, dweight(Device::cpu(), dtype), 1e-4, dtype == kFloat32 ? 1e-5 : 1e-2);
  }
}

TEST(Embedding, RejectsBadArguments) {
  Tensor w = zeros({10, 3});
  EXPECT_ERROR_HAS(embedding(w, from_vector<int64_t>({1, 12, 3}, {1, 3})), "embedding", "index 12",
                   "[0, 1]", "10 rows");
  EXPECT_ERROR_HAS(embedding(w, from_vector<int32_t>({4, -1})), "embedding", "index -1", "position [1]");
  EXPECT_ERROR_HAS(embedding(w, zeros({2})), "embedding", "'indices'", "int32 or int64", "float32");
  EXPECT_ERROR_HAS(embedding(zeros({10}), from_vector<int64_t>({1})), "embedding", "'weight'", "2-D", "[10]");
}

// ---------------------------------------------------------------- dropout

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  Tensor x = randn({4, 5}).requires_grad_(true);
  EXPECT_TRUE(dropout(x, 0.5, false).same(x));
  EXPECT_TRUE(dropout(x, 0.0).same(x));
}

TEST(Dropout, DropsAboutPAndScalesTheRest) {
  Generator data(5);
  Tensor x = uniform({200000}, 1.0, 2.0, data);  // no zeros of its own
  Generator g(9);
  Tensor y = dropout(x, 0.3, true, g);
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  int64_t zeros_n = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.f) ++zeros_n;
    else EXPECT_FLOAT_EQ(yv[i], xv[i] / 0.7f) << i;
  }
  // Binomial(200000, 0.3): standard deviation ~205, so 0.3 +- 0.005 is ~5 sigma.
  EXPECT_NEAR(static_cast<double>(zeros_n) / xv.size(), 0.3, 0.005);
  // One Philox block per four elements was reserved.
  EXPECT_EQ(g.offset(), 50000u);
}

TEST(Dropout, MaskIsTheDocumentedPhiloxStream) {
  Tensor x = ones({10});
  Generator g(123);
  g.reserve(5);  // start mid-stream: the counters come from the generator's position
  std::vector<float> y = dropout(x, 0.5, true, g).to_vector<float>();
  for (uint64_t i = 0; i < 10; ++i) {
    const bool keep = uniform01(philox(123, 5 + i / 4).v[i % 4]) >= 0.5f;
    EXPECT_EQ(y[i], keep ? 2.f : 0.f) << "element " << i;
  }
}

TEST(Dropout, SameSeedSameMaskNextCallAnother) {
  Tensor x = randn({37, 11});
  Generator a(77), b(77);
  Tensor ya = dropout(x, 0.4, true, a), yb = dropout(x, 0.4, true, b);
  EXPECT_TENSOR_EQ(ya, yb);
  EXPECT_NE(dropout(x, 0.4, true, a).to_vector<float>(), ya.to_vector<float>());
}

TEST(Dropout, BackwardRegeneratesTheMaskAndSavesNothing) {
  Tensor x = randn({9, 13}).requires_grad_(true);
  Generator g(8);
  Tensor y = dropout(x, 0.25, true, g);
  std::vector<PlanStep> plan = backward_plan({sum(y)});
  bool found = false;
  for (const auto& s : plan)
    if (s.node == "dropout") {
      found = true;
      EXPECT_EQ(s.saved_bytes, 0u);
    }
  EXPECT_TRUE(found) << format_plan(plan);
  sum(y).backward();
  // dx = mask / (1 - p): non-zero exactly where the forward kept the element.
  std::vector<float> yv = y.to_vector<float>(), d = x.grad().to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(d[i], yv[i] != 0.f ? 1 / 0.75f : 0.f) << i;
}

TEST(Dropout, POneGivesZerosAndZeroGradient) {
  Tensor x = randn({3, 4}).requires_grad_(true);
  Tensor y = dropout(x, 1.0);
  for (float v : y.to_vector<float>()) EXPECT_EQ(v, 0.f);
  sum(y).backward();
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(Dropout, RejectsPOutsideZeroOne) {
  Tensor x = zeros({3});
  EXPECT_ERROR_HAS(dropout(x, -0.1), "dropout", "p", "[0, 1]", "-0.1");
  EXPECT_ERROR_HAS(dropout(x, 1.5), "dropout", "1.5");
  EXPECT_ERROR_HAS(dropout(x, std::nan("")), "dropout", "[0, 1]");
  EXPECT_ERROR_HAS(dropout(x, 1.5, false), "dropout");  // checked even when not training
  EXPECT_ERROR_HAS(dropout(arange(3), 0.5), "dropout", "floating");
}

// ---------------------------------------------------------------- masked_fill

TEST(MaskedFill, BroadcastsTheMaskAndZeroesFilledGradients) {
  Tensor x = vec({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}).requires_grad_(true);
  Tensor causal = from_vector<bool>({false, true, false, false}, {2, 2});
  Tensor y = masked_fill(x, causal, -kInf);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, -INFINITY, 3, 4, 5, -INFINITY, 7, 8}));
  sum(mul(masked_fill(x, causal, 0.5), 3.0)).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 0, 3, 3, 3, 0, 3, 3}));
  // An integer mask: non-zero is true.
  EXPECT_EQ(masked_fill(vec({1, 2, 3}), from_vector<int64_t>({0, 7, -1}), 9).to_vector<float>(),
            (std::vector<float>{1, 9, 9}));
}

TEST(MaskedFill, RejectsBadArguments) {
  Tensor x = zeros({2, 3});
  EXPECT_ERROR_HAS(masked_fill(x, from_vector<bool>({true, false}), 1), "masked_fill", "'mask'", "[2]", "[2, 3]");
  EXPECT_ERROR_HAS(masked_fill(x, zeros({2, 3, 1}, {.dtype = kBool}), 1), "masked_fill", "[2, 3, 1]");
  EXPECT_ERROR_HAS(masked_fill(x, zeros({3}), 1), "masked_fill", "'mask'", "bool", "float32");
  EXPECT_ERROR_HAS(masked_fill(arange(3), from_vector<bool>({true, false, true}), 1), "masked_fill", "'x'");
}

// ---------------------------------------------------------------- GPU-only behaviour

TEST(NnOpsCuda, DropoutMaskIsBitwiseTheCpuMask) {
  TG_REQUIRE_CUDA();
  Tensor x = randn({1001, 7});  // not a multiple of 4: the last Philox block is partial
  for (DType dt : {kFloat32, kBFloat16}) {
    Tensor xd = to(x, dt);
    Generator a(5), b(5);
    Tensor cpu = dropout(xd, 0.37, true, a);
    Tensor gpu = dropout(to(xd, Device::cuda()), 0.37, true, b);
    EXPECT_TENSOR_EQ(to(gpu, Device::cpu()), cpu);
  }
}

TEST(NnOpsCuda, OutOfRangeIndexIsReportedByALaterCall) {
  TG_REQUIRE_CUDA();
  Tensor w = to(randn({10, 8}), Device::cuda());
  Tensor bad = to(from_vector<int64_t>({1, 42, 3}), Device::cuda());
  Tensor out = embedding(w, bad);  // does not wait for the device, so it cannot throw yet
  std::vector<float> rows = to(out, Device::cpu()).to_vector<float>();  // waits
  for (int d = 0; d < 8; ++d) EXPECT_EQ(rows[8 + d], 0.f) << "the bad row must read nothing";
  Tensor good = to(from_vector<int64_t>({0}), Device::cuda());
  EXPECT_ERROR_HAS(embedding(w, good), "embedding", "index 42", "10 rows");
  EXPECT_NO_THROW(embedding(w, good));  // reported once
  // cross_entropy targets take the same path.
  Tensor logits = to(randn({2, 5}), Device::cuda());
  Tensor loss = cross_entropy(logits, to(from_vector<int64_t>({1, 9}), Device::cuda()));
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_ERROR_HAS(cross_entropy(logits, to(from_vector<int64_t>({1, 2}), Device::cuda())), "cross_entropy",
                   "target 9", "5 classes");
}

TEST(NnOpsCuda, Float64IsRejectedClearly) {
  TG_REQUIRE_CUDA();
  Tensor x = to(randn({2, 3}, {.dtype = kFloat64}), Device::cuda());
  EXPECT_ERROR_HAS(softmax(x, -1), "softmax", "float64", "CUDA");
  EXPECT_ERROR_HAS(masked_fill(x, to(zeros({3}, {.dtype = kBool}), Device::cuda()), 0), "masked_fill", "float64");
}

}  // namespace
}  // namespace tg
