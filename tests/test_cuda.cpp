// The CUDA backend: allocator statistics, device transfers, the primitives and the kernels of
// unary/binary/reduce/gemm against the CPU on awkward layouts (non-contiguous, misaligned,
// broadcast, odd sizes). GPU tests skip without a device; the first two run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/test_support.h"
#ifdef TG_WITH_CUDA
#include "ops/gemm_kernels.h"
#endif

namespace tg {
namespace {

using test::error_of;

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

Tensor on_cpu(const Tensor& t) { return to(t.detach(), kCpu); }
Tensor f32_cpu(const Tensor& t) { return to(t.detach(), kFloat32, kCpu); }

// Random values of any dtype on the CPU: normals for floats, [-50, 50) for ints, 0/1 for bool.
Tensor random_cpu(const Shape& shape, DType dt, Generator& gen) {
  if (dt == kBool) return randint(0, 2, shape, gen, {kBool});
  if (dt == kInt32 || dt == kInt64) return randint(-50, 50, shape, gen, {dt});
  return randn(shape, gen, {dt});
}

const DType kAllDtypes[] = {kFloat32, kBFloat16, kFloat64, kInt32, kInt64, kBool};

// ---------------------------------------------------------------- runs without a GPU too

TEST(CudaDevice, MissingDeviceIsAClearError) {
  // One past the last device: cuda:0 on a machine (or build) without CUDA.
  const Device d = Device::cuda(cuda_device_count());
  const std::string name = d.str();
  Tensor host = ones({2, 3});
  const std::pair<const char*, std::string> errors[] = {
      {"Tensor::empty", error_of([&] { Tensor::empty({2, 3}, {kFloat32, d}); })},
      {"empty tensor", error_of([&] { Tensor::empty({0}, {kFloat32, d}); })},
      {"zeros", error_of([&] { zeros({4}, {kBFloat16, d}); })},
      {"to(device)", error_of([&] { to(host, d); })},
      {"memory_stats", error_of([&] { memory_stats(d); })},
  };
  for (const auto& [what, msg] : errors)
    EXPECT_NE(msg.find(name), std::string::npos) << what << " should raise a tg::Error naming " << name << ", got: " << msg;
}

TEST(CudaSettings, Tf32IsOffByDefaultAndToggles) {
  EXPECT_FALSE(allow_tf32()) << "TF32 must be opt-in (PyTorch's 'highest' float32 precision)";
  set_allow_tf32(true);
  EXPECT_TRUE(allow_tf32());
  set_allow_tf32(false);
  EXPECT_FALSE(allow_tf32());
}

// ---------------------------------------------------------------- allocator

TEST(CudaAllocator, ReusesFreedBlocksWithExactStats) {
  TG_REQUIRE_CUDA();
  synchronize(kGpu);
  empty_cache(kGpu);
  reset_peak_memory_stats(kGpu);
  const MemoryStats s0 = memory_stats(kGpu);
  void* p = allocate(kGpu, 1000);
  MemoryStats s1 = memory_stats(kGpu);
  EXPECT_EQ(s1.bytes_in_use, s0.bytes_in_use + 1000);
  EXPECT_EQ(s1.allocations, s0.allocations + 1);
  EXPECT_EQ(s1.device_allocations, s0.device_allocations + 1);
  EXPECT_EQ(s1.bytes_reserved, s0.bytes_reserved + 1024);  // the 512-byte size class
  deallocate(kGpu, p, 1000);
  MemoryStats s2 = memory_stats(kGpu);
  EXPECT_EQ(s2.bytes_in_use, s0.bytes_in_use);
  EXPECT_EQ(s2.bytes_reserved, s1.bytes_reserved) << "a freed block stays cached";
  void* q = allocate(kGpu, 1000);
  MemoryStats s3 = memory_stats(kGpu);
  EXPECT_EQ(q, p) << "the cached block is handed out again";
  EXPECT_EQ(s3.device_allocations, s1.device_allocations) << "no cudaMalloc for a cached size";
  EXPECT_EQ(s3.allocations, s0.allocations + 2);
  EXPECT_EQ(s3.bytes_in_use, s0.bytes_in_use + 1000);
  EXPECT_EQ(s3.peak_bytes, s0.bytes_in_use + 1000);
  deallocate(kGpu, q, 1000);
  EXPECT_EQ(memory_stats(kGpu).bytes_in_use, s0.bytes_in_use);
}

TEST(CudaAllocator, EmptyCacheReturnsCachedBlocks) {
  TG_REQUIRE_CUDA();
  synchronize(kGpu);
  empty_cache(kGpu);
  const MemoryStats s0 = memory_stats(kGpu);
  const size_t n = (3u << 20) + 5;  // above 1 MiB: classes of an eighth of the next power of two
  void* p = allocate(kGpu, n);
  const size_t cls = memory_stats(kGpu).bytes_reserved - s0.bytes_reserved;
  EXPECT_GE(cls, n);
  EXPECT_LE(cls, n + n / 4);
  deallocate(kGpu, p, n);
  EXPECT_EQ(memory_stats(kGpu).bytes_reserved, s0.bytes_reserved + cls);
  empty_cache(kGpu);
  MemoryStats s1 = memory_stats(kGpu);
  EXPECT_EQ(s1.bytes_reserved, s0.bytes_reserved);
  EXPECT_EQ(s1.bytes_in_use, s0.bytes_in_use);
}

TEST(CudaAllocator, PeakStatsTrackTheMaximum) {
  TG_REQUIRE_CUDA();
  synchronize(kGpu);
  reset_peak_memory_stats(kGpu);
  const MemoryStats s0 = memory_stats(kGpu);
  EXPECT_EQ(s0.peak_bytes, s0.bytes_in_use);
  EXPECT_EQ(s0.allocations, 0u);
  {
    Tensor a = Tensor::empty({1000}, {kFloat32, kGpu});
    Tensor b = Tensor::empty({500}, {kBFloat16, kGpu});
    EXPECT_EQ(memory_stats(kGpu).bytes_in_use, s0.bytes_in_use + 4000 + 1000);
  }
  Tensor c = Tensor::empty({10}, {kFloat64, kGpu});
  MemoryStats s1 = memory_stats(kGpu);
  EXPECT_EQ(s1.peak_bytes, s0.bytes_in_use + 5000);
  EXPECT_EQ(s1.bytes_in_use, s0.bytes_in_use + 80);
  EXPECT_EQ(s1.allocations, 3u);
  reset_peak_memory_stats(kGpu);
  EXPECT_EQ(memory_stats(kGpu).peak_bytes, s0.bytes_in_use + 80);
}

TEST(CudaAllocator, TrainingLikeLoopReachesASteadyState) {
  TG_REQUIRE_CUDA();
  Generator gen(1);
  Tensor x = randn({256, 384}, gen, {kFloat32, kGpu}).requires_grad_(true);
  Tensor w = randn({128, 384}, gen, {kFloat32, kGpu}).requires_grad_(true);
  Tensor bias = zeros({128}, {kFloat32, kGpu}).requires_grad_(true);
  auto step = [&] {
    Tensor loss = sum(gelu(linear(x, w, bias)) * 0.5);
    loss.backward();
  };
  step();
  step();
  synchronize(kGpu);
  const uint64_t before = memory_stats(kGpu).device_allocations;
  for (int i = 0; i < 5; ++i) step();
  synchronize(kGpu);
  EXPECT_EQ(memory_stats(kGpu).device_allocations, before) << "a repeated step should allocate only from the cache";
}

// ---------------------------------------------------------------- transfers and primitives

TEST(CudaTransfer, RoundTripOfEveryDtypeFromNonContiguousSources) {
  TG_REQUIRE_CUDA();
  Generator gen(2);
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor base = random_cpu({5, 7, 3}, dt, gen);
    Tensor src = permute(base, {2, 0, 1});          // non-contiguous on the host
    Tensor g = to(src, kGpu);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_TENSOR_EQ(on_cpu(g), src);
    Tensor gt = transpose(to(base, kGpu), 0, 2);    // non-contiguous on the device
    EXPECT_TENSOR_EQ(on_cpu(gt), transpose(base, 0, 2));
    Tensor sliced = slice(to(base, kGpu), 1, 1, 7, 2);
    EXPECT_TENSOR_EQ(on_cpu(sliced), slice(base, 1, 1, 7, 2));
  }
}

TEST(CudaPrimitives, CopyConvertsEveryDtypePairLikeTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(3);
  NoGradGuard ng;
  for (DType sdt : kAllDtypes)
    for (DType ddt : kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(sdt)) + " -> " + dtype_name(ddt));
      Tensor base = random_cpu({4, 5, 6}, sdt, gen);
      // Non-contiguous source and destination, the same views on both devices.
      Tensor src_c = permute(base, {2, 0, 1}), src_g = permute(to(base, kGpu), {2, 0, 1});
      Tensor dst_c = zeros({4, 6, 5}, {ddt}), dst_g = zeros({4, 6, 5}, {ddt, kGpu});
      copy_(transpose(dst_c, 0, 1), src_c);
      copy_(transpose(dst_g, 0, 1), src_g);
      EXPECT_TENSOR_EQ(on_cpu(dst_g), dst_c);
      // Contiguous both ways (memcpy or the vectorised conversion), odd length for the tail.
      Tensor flat = random_cpu({1001}, sdt, gen);
      Tensor out_g = Tensor::empty({1001}, {ddt, kGpu});
      copy_(out_g, to(flat, kGpu));
      Tensor out_c = Tensor::empty({1001}, {ddt});
      copy_(out_c, flat);
      EXPECT_TENSOR_EQ(on_cpu(out_g), out_c);
    }
}

TEST(CudaPrimitives, CopyFromBroadcastAndMisalignedViews) {
  TG_REQUIRE_CUDA();
  Generator gen(4);
  NoGradGuard ng;
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor row = random_cpu({1, 37}, dt, gen);
    Tensor g = Tensor::empty({19, 37}, {dt, kGpu});
    copy_(g, expand(to(row, kGpu), {19, 37}));  // stride-0 source
    EXPECT_TENSOR_EQ(on_cpu(g), contiguous(expand(row, {19, 37})));
    Tensor base = random_cpu({4099}, dt, gen);
    Tensor gb = to(base, kGpu);
    Tensor dst = Tensor::empty({4096}, {kFloat32, kGpu});
    copy_(dst, slice(gb, 0, 3, 4099));  // starts 3 elements in: not 16-byte aligned
    EXPECT_TENSOR_EQ(on_cpu(dst), to(slice(base, 0, 3, 4099), kFloat32));
  }
}

TEST(CudaPrimitives, FillWritesOnlyTheViewLikeTheCpu) {
  TG_REQUIRE_CUDA();
  NoGradGuard ng;
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor c = full({6, 9}, 3.0, {dt}), g = full({6, 9}, 3.0, {dt, kGpu});
    fill_(slice(transpose(c, 0, 1), 0, 1, 9, 2), -1.5);
    fill_(slice(transpose(g, 0, 1), 0, 1, 9, 2), -1.5);
    EXPECT_TENSOR_EQ(on_cpu(g), c);
    for (double v : {0.0, -0.0, 7.25}) {  // 0 is a memset; -0.0 must keep its sign bit
      Tensor fc = Tensor::empty({1003}, {dt}), fg = Tensor::empty({1003}, {dt, kGpu});
      fill_(fc, v);
      fill_(fg, v);
      EXPECT_TENSOR_EQ(on_cpu(fg), fc);
    }
  }
}

TEST(CudaPrimitives, AccumulateIntoNonContiguousLikeTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(5);
  NoGradGuard ng;
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor d0 = random_cpu({7, 11}, dt, gen), s0 = random_cpu({11, 7}, dt, gen), r = random_cpu({1, 7}, dt, gen);
    Tensor dc = clone_data(d0), dg = to(d0, kGpu);
    accumulate_(transpose(dc, 0, 1), s0);                       // dst transposed, src contiguous
    accumulate_(transpose(dg, 0, 1), to(s0, kGpu));
    accumulate_(dc, transpose(s0, 0, 1));                       // src transposed
    accumulate_(dg, transpose(to(s0, kGpu), 0, 1));
    accumulate_(transpose(dc, 0, 1), r.as_strided({11, 7}, {0, 1}, 0));  // broadcast rows (stride 0)
    accumulate_(transpose(dg, 0, 1), to(r, kGpu).as_strided({11, 7}, {0, 1}, 0));
    EXPECT_TENSOR_EQ(on_cpu(dg), dc);
    Tensor big_c = random_cpu({100003}, dt, gen), add_c = random_cpu({100003}, dt, gen);
    Tensor big_g = to(big_c, kGpu);
    accumulate_(big_c, add_c);
    accumulate_(big_g, to(add_c, kGpu));
    EXPECT_TENSOR_EQ(on_cpu(big_g), big_c);
  }
}

TEST(CudaErrors, MixedDeviceOpNamesBothDevices) {
  TG_REQUIRE_CUDA();
  Tensor a = ones({3}), b = ones({3}, {kFloat32, kGpu});
  std::string msg = error_of([&] { add(a, b); });
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  msg = error_of([&] { matmul(ones({2, 2}, {kFloat32, kGpu}), ones({2, 2})); });
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- elementwise kernels

TEST(CudaElementwise, VectorPathTailAndMisalignedViewsMatchTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(6);
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kBFloat16 ? 1e-2 : 1e-5;
    Tensor base = randn({100005}, gen, {dt, kGpu});
    Tensor other = randn({100005}, gen, {dt, kGpu});
    for (int64_t start : {0, 1, 2}) {  // aligned with a tail, then misaligned starts
      SCOPED_TRACE("offset " + std::to_string(start));
      Tensor x = slice(base, 0, start, 100003 + start), y = slice(other, 0, start, 100003 + start);
      Tensor xc = f32_cpu(x), yc = f32_cpu(y);
      EXPECT_TENSOR_NEAR(f32_cpu(gelu(x)), gelu(xc), tol, tol);
      EXPECT_TENSOR_NEAR(f32_cpu(exp(x)), exp(xc), tol, tol);
      EXPECT_TENSOR_NEAR(f32_cpu(x * y), xc * yc, tol, tol);
      EXPECT_TENSOR_NEAR(f32_cpu(x / (y * y + 1.0)), xc / (yc * yc + 1.0), tol, tol);
    }
  }
}

TEST(CudaElementwise, BroadcastAndTransposedOperandsMatchTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(7);
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kBFloat16 ? 1e-2 : 1e-6;
    Tensor a = randn({129, 67}, gen, {dt, kGpu}), bias = randn({67}, gen, {dt, kGpu});
    Tensor col = randn({129, 1}, gen, {dt, kGpu}), at = randn({67, 129}, gen, {dt, kGpu});
    EXPECT_TENSOR_NEAR(f32_cpu(a + bias), f32_cpu(a) + f32_cpu(bias), tol, tol);
    EXPECT_TENSOR_NEAR(f32_cpu(col * bias), f32_cpu(col) * f32_cpu(bias), tol, tol);
    EXPECT_TENSOR_NEAR(f32_cpu(a - transpose(at, 0, 1)), f32_cpu(a) - transpose(f32_cpu(at), 0, 1), tol, tol);
    EXPECT_TENSOR_NEAR(f32_cpu(silu(transpose(at, 0, 1))), silu(transpose(f32_cpu(at), 0, 1)), tol, tol);
    // Rows of whole 16-byte vectors: the vectorised strided kernel (bias along rows, a column
    // broadcast along them, a padded row slice).
    Tensor a2 = randn({130, 64}, gen, {dt, kGpu}), bias2 = randn({64}, gen, {dt, kGpu});
    Tensor col2 = randn({130, 1}, gen, {dt, kGpu}), wide = randn({130, 96}, gen, {dt, kGpu});
    EXPECT_TENSOR_NEAR(f32_cpu(a2 + bias2), f32_cpu(a2) + f32_cpu(bias2), tol, tol);
    EXPECT_TENSOR_NEAR(f32_cpu(col2 * bias2), f32_cpu(col2) * f32_cpu(bias2), tol, tol);
    EXPECT_TENSOR_NEAR(f32_cpu(a2 / (col2 * col2 + 1.0)), f32_cpu(a2) / (f32_cpu(col2) * f32_cpu(col2) + 1.0), tol, tol);
    Tensor padded = slice(wide, 1, 16, 80);  // rows of 64 at a row stride of 96
    EXPECT_TENSOR_NEAR(f32_cpu(exp(padded) - a2), exp(f32_cpu(padded)) - f32_cpu(a2), tol, tol);
  }
}

// ---------------------------------------------------------------- reductions

struct SumCase {
  Shape shape;
  std::vector<int64_t> dims;
  bool transposed = false;  // reduce a view with the last two dims swapped in memory
};

TEST(CudaReduce, SumMatchesTheCpuOnEveryLayoutAndIsDeterministic) {
  TG_REQUIRE_CUDA();
  Generator gen(8);
  const SumCase cases[] = {
      {{1000, 3000}, {1}},          // rows, block per row, 16-byte loads
      {{3, 1000003}, {1}},          // few long odd rows: split in chunks, scalar loads
      {{1000003}, {0}},             // everything into one value
      {{40, 100}, {1}},             // short rows: a warp per row
      {{64, 8192}, {1}},            // 64/128 threads per row, split in two chunks
      {{65536, 64}, {0}},           // the bias gradient: columns, split over rows
      {{300, 3000}, {0}},           // columns, wide
      {{3000, 300}, {0}, true},     // transposed: the reduced dim has unit stride -> rows
      {{3000, 300}, {1}, true},     // transposed: columns
      {{7, 33, 129}, {0, 2}},       // rows over two non-adjacent dims
      {{64, 50, 3}, {1}},           // columns with a small stride
      {{2, 3, 4, 5, 6}, {1, 3}},    // general
      {{5, 1, 7}, {1}},             // a size-1 dim: a copy
      {{0, 5}, {0}},                // empty: zeros
  };
  for (DType dt : {kFloat32, kBFloat16}) {
    for (const SumCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " shape " + shape_str(c.shape) + " dims " +
                   detail::to_text(c.dims) + (c.transposed ? " transposed" : ""));
      Shape store = c.shape;
      if (c.transposed) std::swap(store[store.size() - 1], store[store.size() - 2]);
      Tensor x = randn(store, gen, {dt, kGpu});
      if (c.transposed) x = transpose(x, -1, -2);
      int64_t r = 1;
      for (int64_t d : c.dims) r *= c.shape[d];
      const double atol = 2e-6 * static_cast<double>(r) + 1e-5 + (dt == kBFloat16 ? 2e-2 : 0.0);
      const double rtol = dt == kBFloat16 ? 1e-2 : 1e-5;
      Tensor got = sum(x, c.dims, true);
      EXPECT_TENSOR_NEAR(f32_cpu(got), sum(f32_cpu(x), c.dims, true), rtol, atol);
      EXPECT_TENSOR_EQ(on_cpu(sum(x, c.dims, true)), on_cpu(got)) << "a rerun must give the same bits";
    }
  }
}

TEST(CudaReduce, BiasGradientUsesTheColumnKernel) {
  TG_REQUIRE_CUDA();
  Generator gen(9);
  Tensor x = randn({512, 96}, gen, {kFloat32, kGpu});
  Tensor w = randn({80, 96}, gen, {kFloat32, kGpu}).requires_grad_(true);
  Tensor b = randn({80}, gen, {kFloat32, kGpu}).requires_grad_(true);
  Tensor g = randn({512, 80}, gen, {kFloat32, kGpu});
  KernelTrace trace;
  linear(x, w, b).backward(g);
  EXPECT_TRUE(trace.contains("sum.columns")) << trace.str();
  EXPECT_TENSOR_NEAR(on_cpu(b.grad()), sum(on_cpu(g), {0}), 1e-5, 1e-4);
}

TEST(CudaReduce, MaxMatchesTheCpuWithTiesAndNans) {
  TG_REQUIRE_CUDA();
  Generator gen(10);
  const std::pair<Shape, int64_t> cases[] = {
      {{300, 2000}, 1}, {{300, 100}, 1}, {{2000, 50}, 0}, {{4, 5, 6}, 1}, {{7, 9}, 1}, {{3, 5000}, 0}};
  for (DType dt : {kFloat32, kBFloat16}) {
    for (const auto& [shape, dim] : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " shape " + shape_str(shape) + " dim " + std::to_string(dim));
      // Small integers: many ties, exact in bfloat16; a few NaNs.
      std::vector<float> v = (randint(-4, 5, shape, gen, {kFloat32})).to_vector<float>();
      for (size_t i = 17; i < v.size(); i += 997) v[i] = std::numeric_limits<float>::quiet_NaN();
      Tensor xc = from_vector(v, shape);
      Tensor xg = to(xc, dt, kGpu);
      EXPECT_TENSOR_NEAR(f32_cpu(max(xg, dim)), max(xc, dim), 0.0, 0.0);
      EXPECT_TENSOR_EQ(on_cpu(argmax(xg, dim)), argmax(xc, dim));
    }
  }
}

TEST(CudaReduce, MaxBackwardMatchesTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(11);
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Tensor xc = randn({6, 40, 33}, gen).requires_grad_(true);
    Tensor xg = to(xc.detach(), kGpu).requires_grad_(true);
    Shape gs = xc.shape();
    gs.erase(gs.begin() + dim);
    Tensor g = randn(gs, gen);
    max(xc, dim).backward(g);
    max(xg, dim).backward(to(g, kGpu));
    EXPECT_TENSOR_EQ(on_cpu(xg.grad()), xc.grad());
  }
}

// ---------------------------------------------------------------- GEMM

// matmul on the GPU against the CPU on the same (dtype-rounded) values.
void expect_matmul_matches(const Tensor& a, const Tensor& b, int64_t k) {
  const bool bf = a.dtype() == kBFloat16;
  const double scale = std::sqrt(static_cast<double>(k));
  const double rtol = bf ? 1e-2 : 1e-4, atol = (bf ? 1e-2 : 1e-5) * scale;
  EXPECT_TENSOR_NEAR(f32_cpu(matmul(a, b)), matmul(f32_cpu(a), f32_cpu(b)), rtol, atol);
}

TEST(CudaGemm, MatchesTheCpuOnAwkwardShapes) {
  TG_REQUIRE_CUDA();
  Generator gen(12);
  const int64_t shapes[][3] = {{67, 129, 33}, {1, 1, 1}, {1, 257, 19}, {31, 1, 500}, {5, 3, 8191}, {130, 257, 1000}};
  for (DType dt : {kFloat32, kBFloat16}) {
    for (const auto& s : shapes) {
      const int64_t M = s[0], N = s[1], K = s[2];
      SCOPED_TRACE(std::string(dtype_name(dt)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                   " K=" + std::to_string(K));
      Tensor a = randn({M, K}, gen, {dt, kGpu}), b = randn({K, N}, gen, {dt, kGpu});
      expect_matmul_matches(a, b, K);
      Tensor at = transpose(randn({K, M}, gen, {dt, kGpu}), 0, 1);  // unit stride along rows
      Tensor bt = transpose(randn({N, K}, gen, {dt, kGpu}), 0, 1);
      expect_matmul_matches(at, b, K);
      expect_matmul_matches(a, bt, K);
      expect_matmul_matches(at, bt, K);
    }
  }
}

TEST(CudaGemm, BatchedAndBroadcastMatchTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(13);
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_matmul_matches(randn({6, 37, 45}, gen, {dt, kGpu}), randn({6, 45, 29}, gen, {dt, kGpu}), 45);
    expect_matmul_matches(randn({4, 37, 45}, gen, {dt, kGpu}), randn({45, 29}, gen, {dt, kGpu}), 45);  // batch stride 0
    expect_matmul_matches(randn({37, 45}, gen, {dt, kGpu}), randn({3, 45, 29}, gen, {dt, kGpu}), 45);
    expect_matmul_matches(transpose(randn({2, 3, 45, 37}, gen, {dt, kGpu}), -1, -2), randn({3, 45, 29}, gen, {dt, kGpu}), 45);
  }
}

TEST(CudaGemm, LinearForwardAndBackwardMatchTheCpu) {
  TG_REQUIRE_CUDA();
  Generator gen(14);
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kBFloat16 ? 5e-2 : 1e-4;
    Tensor xg = randn({3, 41, 77}, gen, {dt, kGpu}).requires_grad_(true);
    Tensor wg = randn({53, 77}, gen, {dt, kGpu}).requires_grad_(true);
    Tensor bg = randn({53}, gen, {dt, kGpu}).requires_grad_(true);
    Tensor xc = f32_cpu(xg).requires_grad_(true), wc = f32_cpu(wg).requires_grad_(true), bc = f32_cpu(bg).requires_grad_(true);
    Tensor g = randn({3, 41, 53}, gen, {dt, kGpu});
    Tensor yg = linear(xg, wg, bg), yc = linear(xc, wc, bc);
    EXPECT_TENSOR_NEAR(f32_cpu(yg), yc, tol, tol * 10);
    yg.backward(g);
    yc.backward(f32_cpu(g));
    EXPECT_TENSOR_NEAR(f32_cpu(xg.grad()), xc.grad(), tol, tol * 10);
    EXPECT_TENSOR_NEAR(f32_cpu(wg.grad()), wc.grad(), tol, tol * 20);
    EXPECT_TENSOR_NEAR(f32_cpu(bg.grad()), bc.grad(), tol, tol * 20);
  }
}

TEST(CudaGemm, Tf32IsUsedOnlyWhenAllowed) {
  TG_REQUIRE_CUDA();
  ASSERT_FALSE(allow_tf32());
  Generator gen(15);
  Tensor a = randn({256, 512}, gen, {kFloat32, kGpu}), b = randn({512, 128}, gen, {kFloat32, kGpu});
  Tensor ref = matmul(f32_cpu(a), f32_cpu(b));
  {
    KernelTrace trace;
    Tensor c = matmul(a, b);
    EXPECT_TRUE(trace.contains("gemm.cublas_f32")) << trace.str();
    EXPECT_FALSE(trace.contains("gemm.cublas_tf32")) << trace.str();
    EXPECT_TENSOR_NEAR(on_cpu(c), ref, 1e-4, 1e-3);  // TF32 would miss this by ~10x
  }
  set_allow_tf32(true);
  {
    KernelTrace trace;
    Tensor c = matmul(a, b);
    EXPECT_TRUE(trace.contains("gemm.cublas_tf32")) << trace.str();
    EXPECT_TENSOR_NEAR(on_cpu(c), ref, 1e-2, 0.1);  // 10-bit mantissa products
  }
  set_allow_tf32(false);
}

#ifdef TG_WITH_CUDA
// The kernel contract directly: alpha/beta, a column-major c, an operand with overlapping rows
// (copied), K = 0.
TEST(CudaGemm, KernelContractAlphaBetaAndLayouts) {
  TG_REQUIRE_CUDA();
  Generator gen(16);
  NoGradGuard ng;
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kBFloat16 ? 5e-2 : 1e-4;
    const int64_t B = 3, M = 19, N = 23, K = 31;
    Tensor a = randn({B, M, K}, gen, {dt}), b = transpose(randn({B, N, K}, gen, {dt}), 1, 2);
    Tensor c_store = randn({B, N, M}, gen, {dt});
    auto run = [&](Device d, double alpha, double beta, bool overlap, int64_t k) {
      Tensor ad = to(a, d), bd = to(b, d), cd = to(clone_data(c_store), d);  // c is written
      Tensor av = slice(ad, 2, 0, k), bv = slice(bd, 1, 0, k);
      if (overlap) av = av.as_strided({B, M, k}, {av.strides()[0], 0, 1}, av.storage_offset());  // every row the same
      Tensor cv = transpose(cd, 1, 2);  // [B, M, N], unit stride along M
      if (d.is_cuda()) cuda::gemm(cv, av, bv, alpha, beta);
      else cpu::gemm(cv, av, bv, alpha, beta);
      return to(cv, kFloat32, kCpu);
    };
    EXPECT_TENSOR_NEAR(run(kGpu, 0.5, 2.0, false, K), run(kCpu, 0.5, 2.0, false, K), tol, tol * 10);
    EXPECT_TENSOR_NEAR(run(kGpu, 1.0, 0.0, false, K), run(kCpu, 1.0, 0.0, false, K), tol, tol * 10);
    {
      KernelTrace trace;
      EXPECT_TENSOR_NEAR(run(kGpu, 1.0, 1.0, true, K), run(kCpu, 1.0, 1.0, true, K), tol, tol * 10);
      EXPECT_TRUE(trace.contains("gemm.copy_operand")) << trace.str();
    }
    EXPECT_TENSOR_NEAR(run(kGpu, 1.0, 0.5, false, 0), run(kCpu, 1.0, 0.5, false, 0), tol, tol);
  }
}
#endif

}  // namespace
}  // namespace tg
