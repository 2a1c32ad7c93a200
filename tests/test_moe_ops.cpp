// The MoE ops beyond the harness: grouped_mm against a loop of per-expert products, what its
// mask skips, sort_by_expert's grouping, topk's order, and their errors.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/grouped_mm.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/moe_routing.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

// grouped_mm's value by a loop of linear / matmul over the experts' row blocks.
Tensor per_expert(const Tensor& x, const Tensor& w, const std::vector<int64_t>& sizes, const Tensor& bias,
                  const Tensor& A, const Tensor& B, double s) {
  std::vector<Tensor> parts;
  for (int64_t e = 0, r0 = 0; e < static_cast<int64_t>(sizes.size()); r0 += sizes[e++]) {
    if (sizes[e] == 0) continue;
    const Tensor xe = slice(x, 0, r0, r0 + sizes[e]);
    auto pick = [e](const Tensor& t) { return squeeze(slice(t, 0, e, e + 1), 0); };
    Tensor y = linear(xe, pick(w), pick(bias));
    y = add(y, mul(matmul(matmul(xe, transpose(pick(A), 0, 1)), transpose(pick(B), 0, 1)), s));
    parts.push_back(y);
  }
  return cat(parts, 0);
}

TEST(GroupedMm, MatchesAProductPerExpert) {
  Generator gen(5);
  const std::vector<int64_t> sizes = {2, 0, 4, 3};
  auto input = [&](Shape shape) { return randn(shape, gen, {kFloat32, Device::cpu(), true}); };
  Tensor x = input({9, 6}), w = input({4, 5, 6}), b = input({4, 5}), A = input({4, 3, 6}), B = input({4, 5, 3});
  std::vector<Tensor> in = {x, w, b, A, B}, ref;
  for (const Tensor& t : in) ref.push_back(t.detach().requires_grad_(true));
  Tensor y = grouped_mm(x, w, sizes, b, A, B, 0.75);
  Tensor want = per_expert(ref[0], ref[1], sizes, ref[2], ref[3], ref[4], 0.75);
  EXPECT_TENSOR_NEAR(y, want, 1e-5, 1e-5);
  const Tensor g = randn({9, 5}, gen);
  y.backward(g);
  want.backward(g);
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    EXPECT_TENSOR_NEAR(in[i].grad(), ref[i].grad().defined() ? ref[i].grad() : zeros_like(in[i]), 1e-5, 1e-5);
  }
  // the expert without rows gets exact zeros
  for (float v : slice(w.grad(), 0, 1, 2).to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

// A frozen weight (a LoRA step on frozen experts) costs no dW GEMM, and x is not kept for it.
TEST(GroupedMm, FrozenExpertsGetOnlyTheirInputGradient) {
  Generator gen(6);
  Tensor x = randn({5, 4}, gen, {kFloat32, Device::cpu(), true}), w = randn({2, 3, 4}, gen);
  KernelTrace trace;
  sum(grouped_mm(x, w, {5, 0})).backward();
  EXPECT_TRUE(trace.contains("grouped_mm.dx"));
  EXPECT_FALSE(trace.contains("grouped_mm.dweight_gemm"));
  Tensor A = randn({2, 2, 4}, gen, {kFloat32, Device::cpu(), true}),
         B = randn({2, 3, 2}, gen, {kFloat32, Device::cpu(), true});
  Tensor y = grouped_mm(x.detach(), w, {1, 4}, Tensor(), A, B, 1.0);
  const std::string plan = format_plan(backward_plan({sum(y)}));
  EXPECT_NE(plan.find("grouped_mm[dlora_A,dlora_B] mask(x=0 w=0 bias=0 lora_A=1 lora_B=1)"), std::string::npos) << plan;
}

TEST(GroupedMm, ErrorsNameTheArgument) {
  const Tensor x = zeros({5, 4}), w = zeros({2, 3, 4});
  EXPECT_ERROR_HAS(grouped_mm(x, w, {2, 2}), "grouped_mm", "group_sizes sum to 4", "x has 5 rows");
  EXPECT_ERROR_HAS(grouped_mm(x, w, {5}), "group_sizes has 1 entries for 2 experts");
  EXPECT_ERROR_HAS(grouped_mm(x, w, {6, -1}), "group_sizes[0] is 6");
  EXPECT_ERROR_HAS(grouped_mm(zeros({5, 3}), w, {5, 0}), "x has 3 features", "wants 4");
  EXPECT_ERROR_HAS(grouped_mm(x, w, {5, 0}, zeros({2, 4})), "bias must be [2, 3]");
  EXPECT_ERROR_HAS(grouped_mm(x, w, {5, 0}, Tensor(), zeros({2, 2, 4})), "lora_A and lora_B come together");
  EXPECT_ERROR_HAS(grouped_mm(x, w, {5, 0}, Tensor(), zeros({2, 2, 4}), zeros({2, 3, 3})), "lora_B must be [2, 3, 2]");
  EXPECT_ERROR_HAS(grouped_mm(x, to(w, kFloat64), {5, 0}), "dtype");
}

TEST(SortByExpert, GroupsEveryChoiceByExpertInChoiceOrder) {
  // 4 tokens, 2 choices each, 3 experts (expert 2 chosen by nobody)
  const Tensor idx = from_vector<int64_t>({1, 0, 0, 1, 1, 0, 0, 1}, {4, 2});
  const ExpertOrder o = sort_by_expert(idx, 3);
  EXPECT_EQ(o.counts.to_vector<int64_t>(), (std::vector<int64_t>{4, 4, 0}));
  EXPECT_EQ(o.token_of_row.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(o.row_of_choice.to_vector<int64_t>(), (std::vector<int64_t>{4, 0, 1, 5, 6, 2, 3, 7}));
  EXPECT_ERROR_HAS(sort_by_expert(from_vector<int64_t>({0, 3}, {1, 2}), 3), "sort_by_expert", "expert id 3",
                   "out of range for 3 experts");
  EXPECT_ERROR_HAS(sort_by_expert(from_vector<int64_t>({0, 1}, {2}), 3), "indices must be [T, k]");
  EXPECT_ERROR_HAS(sort_by_expert(from_vector<int32_t>({0, 1}, {1, 2}), 3), "int64");
}

TEST(Topk, LargestFirstEqualValuesByIndex) {
  const Tensor x = from_vector<float>({1, 3, 3, 0, 2, 2, 5, 2}, {2, 4}).requires_grad_(true);
  auto [values, indices] = topk(x, 3);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{3, 3, 1, 5, 2, 2}));
  EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 0, 2, 0, 1}));
  values.backward(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 1, 2, 0, 5, 6, 4, 0}));
  EXPECT_ERROR_HAS(topk(x, 5), "topk", "k is 5", "wants 1 to 4");
}

TEST(SortByExpert, CudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(2);
  // a small case, and one the radix sort spreads over many blocks (the last expert gets no token)
  for (const auto& [choices, E] : {std::pair{randint(0, 7, {33, 3}, gen), int64_t{9}},
                                   std::pair{randint(0, 32, {8192, 4}, gen), int64_t{33}}}) {
    const ExpertOrder cpu = sort_by_expert(choices, E), gpu = sort_by_expert(to(choices, Device::cuda()), E);
    EXPECT_TENSOR_EQ(to(gpu.counts, Device::cpu()), cpu.counts);
    EXPECT_TENSOR_EQ(to(gpu.token_of_row, Device::cpu()), cpu.token_of_row);
    EXPECT_TENSOR_EQ(to(gpu.row_of_choice, Device::cpu()), cpu.row_of_choice);
  }
  // an expert id out of range: left out of the counts, row -1, reported by the next call
  const ExpertOrder bad = sort_by_expert(from_vector<int64_t>({0, 7, 1, 0}, {2, 2}, Device::cuda()), 3);
  EXPECT_EQ(to(bad.counts, Device::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(to(bad.row_of_choice, Device::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{0, -1, 2, 1}));
  EXPECT_ERROR_HAS(sort_by_expert(from_vector<int64_t>({0, 1}, {1, 2}, Device::cuda()), 3), "expert id 7", "3");
  const Tensor x = randn({17, 9}, gen);
  auto [v, i] = topk(x, 4);
  auto [vg, ig] = topk(to(x, Device::cuda()), 4);
  EXPECT_TENSOR_EQ(to(vg, Device::cpu()), v);
  EXPECT_TENSOR_EQ(to(ig, Device::cpu()), i);
}

}  // namespace
}  // namespace tg::test
