// Tensor basics: factories, determinism, views, host reads, printing, dtypes, memory stats.
#include <gtest/gtest.h>

#include <cmath>

#include "tapegrad.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

TEST(Tensor, FactoriesFillValues) {
  EXPECT_EQ(zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(ones({4}, {.dtype = kBFloat16}).to_vector<float>(), std::vector<float>(4, 1.f));
  EXPECT_EQ(full({2}, 2.5, {.dtype = kFloat64}).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25, {.dtype = kFloat32}).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  Tensor v = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.dtype(), kInt32);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(Tensor, SameSeedSameNumbersOnEveryMachine) {
  Generator a(42), b(42);
  EXPECT_TENSOR_EQ(randn({3, 5}, a), randn({3, 5}, b));
  EXPECT_TENSOR_EQ(randint(0, 100, {17}, a), randint(0, 100, {17}, b));
  // Pinned values: Philox + Box-Muller are pure integer/IEEE arithmetic, so these hold anywhere.
  Generator g(0);
  std::vector<float> first = randn({4}, g).to_vector<float>();
  Generator again(0);
  EXPECT_EQ(first, randn({4}, again).to_vector<float>());
  Generator u(0);
  std::vector<float> un = rand({4}, u).to_vector<float>();
  for (float x : un) {
    EXPECT_GE(x, 0.f);
    EXPECT_LT(x, 1.f);
  }
  // A draw advances the generator: the next draw differs.
  Generator c(7);
  Tensor x1 = randn({8}, c), x2 = randn({8}, c);
  EXPECT_NE(x1.to_vector<float>(), x2.to_vector<float>());
}

TEST(Tensor, RandnHasUnitMoments) {
  Generator g(3);
  std::vector<double> v = randn({200000}, g, {.dtype = kFloat64}).to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x, sq += x * x;
  mean /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sq / v.size() - mean * mean, 1.0, 0.01);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = arange(0, 12, 1, {.dtype = kFloat32});
  Tensor m = reshape(x, {3, 4});
  EXPECT_TRUE(m.shares_storage_with(x));
  Tensor t = transpose(m, 0, 1);
  EXPECT_TRUE(t.shares_storage_with(x));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Shape{1, 4}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor c = contiguous(t);
  EXPECT_FALSE(c.shares_storage_with(x));
  EXPECT_TRUE(c.is_contiguous());
  Tensor s = slice(m, 1, 1, 3);
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Tensor e = expand(slice(m, 0, 0, 1), {2, 3, 4});
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_TRUE(e.shares_storage_with(x));
  // Reshaping a transposed view cannot be a view: it copies.
  Tensor r = reshape(t, {12});
  EXPECT_FALSE(r.shares_storage_with(x));
  EXPECT_THROW(view(t, {12}), Error);
}

TEST(Tensor, ItemAndPrinting) {
  EXPECT_DOUBLE_EQ(scalar_tensor(3.5).item(), 3.5);
  EXPECT_THROW(zeros({2}).item(), Error);
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(x.str(), "tensor([[1, 2],\n        [3, 4]])");  // rows aligned as PyTorch prints them
  x.requires_grad_();
  EXPECT_NE(x.str().find("requires_grad=true"), std::string::npos);
  EXPECT_NE(mul(x, 2.0).str().find("grad_fn=mul_scalar"), std::string::npos);
  EXPECT_NE(arange(3).str().find("dtype=int64"), std::string::npos);
}

TEST(Tensor, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(bf16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bf16(1.00390625f)), 1.0f);       // halfway: to even (down)
  EXPECT_EQ(static_cast<float>(bf16(1.01171875f)), 1.015625f);  // halfway: to even (up)
  EXPECT_EQ(static_cast<float>(bf16(std::nextafter(1.00390625f, 2.f))), 1.0078125f);  // just above halfway
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  Tensor b = to(from_vector<float>({3.14159f, -2.71828f}), kBFloat16);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3.140625f, -2.71875f}));
}

// to_packed: each piece bitwise what to() gives, as neighbouring views of one buffer, one launch
// on the GPU (so the GPU's rounding is checked against the CPU's here too).
TEST(Tensor, ToPackedRoundsEachPieceIntoOneBuffer) {
  Generator g(6);
  const std::vector<Tensor> xs = {randn({8, 24}, g), randn({3}, g), to(randn({40, 8}, g), kBFloat16)};
  for (Device d : {Device::cpu(), Device::cuda()}) {
    if (d.is_cuda() && !cuda_is_available()) continue;
    SCOPED_TRACE(d.str());
    std::vector<Tensor> on;
    for (const Tensor& x : xs) on.push_back(to(x, d));
    for (DType dtype : {kBFloat16, kFloat32}) {
      // one source dtype a pack: the float32 pieces, then the bf16 one alone
      const std::vector<Tensor> f32 = to_packed({on[0], on[1]}, dtype), b = to_packed({on[2]}, dtype);
      EXPECT_TENSOR_EQ(to(f32[0], Device::cpu()), to(xs[0], dtype));
      EXPECT_TENSOR_EQ(to(f32[1], Device::cpu()), to(xs[1], dtype));
      EXPECT_TENSOR_EQ(to(b[0], Device::cpu()), to(xs[2], dtype));
      EXPECT_EQ(f32[1].storage_offset(), 8 * 24);
      EXPECT_EQ(static_cast<const char*>(f32[1].data_ptr()) - static_cast<const char*>(f32[0].data_ptr()),
                8 * 24 * static_cast<int64_t>(f32[0].element_size()));
      EXPECT_FALSE(f32[0].requires_grad());
    }
  }
  EXPECT_ERROR_HAS(to_packed({}, kBFloat16), "to_packed", "1 to 16", "got 0");
  EXPECT_ERROR_HAS(to_packed({arange(3)}, kBFloat16), "to_packed", "xs[0]", "int64", "floating");
  EXPECT_ERROR_HAS(to_packed({xs[0]}, kInt64), "to_packed", "floating-point dtype", "int64");
  EXPECT_ERROR_HAS(to_packed({xs[0], xs[2]}, kFloat32), "to_packed", "xs[1] is bfloat16", "float32");
}

TEST(Tensor, DtypeAndShapeErrorsAreClear) {
  Tensor i = arange(4);
  EXPECT_THROW(i.data_ptr<float>(), Error);
  try {
    from_vector<float>({1, 2, 3}, {2, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "from_vector: got 3 values for shape [2, 2] (4 elements)");
  }
  EXPECT_THROW(arange(3).requires_grad_(), Error);
  EXPECT_THROW(reshape(zeros({2, 3}), {4, -1}), Error);
  EXPECT_THROW(transpose(zeros({2, 3}), 0, 2), Error);
}

TEST(Tensor, CudaWithoutDeviceIsAClearError) {
  if (cuda_is_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    zeros({2}, {.device = Device::cuda(0)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

TEST(Tensor, MemoryStatsTrackLiveBytes) {
  MemoryStats before = memory_stats();
  {
    Tensor t = empty({1024}, {.dtype = kFloat32});
    MemoryStats during = memory_stats();
    EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 4096);
    EXPECT_GE(during.peak_bytes, during.bytes_in_use);
  }
  EXPECT_EQ(memory_stats().bytes_in_use, before.bytes_in_use);
}

}  // namespace
}  // namespace tg
