// index_copy_ (ops/index_copy.h): slices written along a dim from an index, on the CPU against a
// hand-made result, on the GPU against the CPU (non-contiguous sources, int32 indices, every
// element width), and the errors, including a bad index found on the GPU by a later call.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "ops/cast.h"
#include "ops/index_copy.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

class IndexCopyTest : public testing::SeededTest {};

TEST_F(IndexCopyTest, WritesTheIndexedSlicesAlongADim) {
  Tensor self = zeros({2, 3, 2});
  const Tensor source = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  index_copy_(self, 1, from_vector(std::vector<int64_t>{2, 0}, {2}), source);
  EXPECT_EQ(self.to_vector<float>(), (std::vector<float>{3, 4, 0, 0, 1, 2, 7, 8, 0, 0, 5, 6}));
  index_copy_(self, -1, from_vector(std::vector<int32_t>{1}, {1}), full({2, 3, 1}, 9.0));  // int32, a negative dim
  EXPECT_EQ(self.to_vector<float>(), (std::vector<float>{3, 9, 0, 9, 1, 9, 7, 9, 0, 9, 5, 9}));
}

TEST_F(IndexCopyTest, BadArgumentsAreNamed) {
  Tensor self = zeros({2, 3});
  const Tensor idx = from_vector(std::vector<int64_t>{0}, {1});
  EXPECT_ERROR_HAS(index_copy_(self, 1, from_vector(std::vector<int64_t>{3}, {1}), zeros({2, 1})), "index_copy_",
                   "index 3 (entry 0) is out of range for dim 1 of size 3");
  EXPECT_ERROR_HAS(index_copy_(self, 1, idx, zeros({2, 2})), "index_copy_", "source is [2, 2] float32, wants [2, 1]");
  EXPECT_ERROR_HAS(index_copy_(self, 2, idx, zeros({2, 1})), "index_copy_", "dim 2 is out of range");
  EXPECT_ERROR_HAS(index_copy_(self, 1, from_vector(std::vector<float>{0}, {1}), zeros({2, 1})), "index_copy_",
                   "index must be 1-D int32 or int64");
  EXPECT_ERROR_HAS(index_copy_(transpose(zeros({3, 2}), 0, 1), 1, idx, zeros({2, 1})), "index_copy_",
                   "self must be contiguous");
  const Tensor needs_grad = zeros({2, 1}).requires_grad_(true);
  EXPECT_ERROR_HAS(index_copy_(self, 1, idx, needs_grad), "index_copy_", "is not differentiable");
}

TEST_F(IndexCopyTest, CudaMatchesTheCpuAndReportsABadIndexLater) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  for (DType dt : {kFloat32, kBFloat16, kFloat64, kInt64, kBool}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor cpu = to(randn({3, 5, 4}, gen), dt), dev = to(cpu, gpu);
    const Tensor source = transpose(to(randn({4, 2, 3}, gen), dt), 0, 2);  // [3, 2, 4], not contiguous
    const Tensor idx = from_vector(std::vector<int32_t>{4, 1}, {2});
    index_copy_(cpu, 1, idx, source);
    index_copy_(dev, 1, to(idx, gpu), to(source, gpu));
    EXPECT_TENSOR_EQ(to(dev, Device::cpu()), cpu);
  }
  Tensor dev = zeros({2, 3}, {.device = gpu});
  index_copy_(dev, 1, from_vector(std::vector<int64_t>{7}, {1}, gpu), ones({2, 1}, {.device = gpu}));
  synchronize(gpu);
  EXPECT_ERROR_HAS(index_copy_(dev, 1, from_vector(std::vector<int64_t>{0}, {1}, gpu), ones({2, 1}, {.device = gpu})),
                   "index_copy_", "index 7 is out of range for a dim of size 3");
  EXPECT_EQ(to(dev, Device::cpu()).to_vector<float>(), std::vector<float>(6, 0.0f)) << "nothing written";
}

}  // namespace
}  // namespace tg
