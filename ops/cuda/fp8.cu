// ops/fp8.h on CUDA.
// quantize_fp8: one block of 256 threads a scale block (a weight's 128x128 block or row): its max
// |x| (a max: the CPU's value whatever the order), then each value divided by the multiplier
// (IEEE division, as the CPU) and rounded by fp8_math.h, so the bytes equal the CPU's. The
// activations' 1x128 tiles of bfloat16 rows take half a warp a tile instead (quantize_tiles_kernel),
// rounded by the GPU's cvt to e4m3x2 (to nearest even, saturated: the CPU's bytes but a NaN's).
// dequantize_fp8: a thread a value, out = e4m3 value * its block's multiplier.
// transpose_2d: 32x32 tiles through shared memory (dx's W^T, once a backward call).
// fp8_gemm: cuBLASLt's FP8 matmul (sm_90: both operands K-major, the "TN" layout), block scales
// BLK128x128 on the weight and VEC128 on the activations, float32 accumulation (no fast
// accumulation: the partial sums are promoted), bfloat16 out. The algorithm of each shape is
// asked of the heuristic once and kept.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "core/cuda/runtime.h"
#include "ops/cuda/cublas_utils.cuh"
#include "ops/fp8_kernels.h"
#include "ops/fp8_math.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_max(float m, float* shared) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = m;
  __syncthreads();
  m = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, shared[w]);
  return m;
}

template <class T>
__global__ void quantize_blocks_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale,
                                       unsigned long long* first_bad, int64_t rows, int64_t cols, int64_t br,
                                       int64_t bc, int64_t s0, int64_t s1, bool check_finite) {
  __shared__ float warp_max[kThreads / 32];
  const int64_t bcs = (cols + bc - 1) / bc;
  const int64_t b_row = blockIdx.x / bcs, b_col = blockIdx.x % bcs;
  const int64_t r0 = b_row * br, c0 = b_col * bc;
  const int64_t nr = min(br, rows - r0), nc = min(bc, cols - c0), n = nr * nc;
  float m = 0.0f;
  int64_t bad = rows * cols;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t at = (r0 + i / nc) * cols + c0 + i % nc;
    const float v = cvt<float>(x[at]);
    if (check_finite && !isfinite(v) && at < bad) bad = at;
    m = fmaxf(m, fabsf(v));
  }
  if (bad < rows * cols) atomicMin(first_bad, static_cast<unsigned long long>(bad));
  const float s = fp8::scale_of(block_max(m, warp_max));
  if (threadIdx.x == 0) scale[b_row * s0 + b_col * s1] = s;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t at = (r0 + i / nc) * cols + c0 + i % nc;
    q[at] = fp8::to_e4m3(cvt<float>(x[at]) / s);
  }
}

// 1x128 tiles of bfloat16 rows whose length is a multiple of 128: half a warp a tile, a lane 8
// values (one 16-byte load, one 8-byte store), two tiles a half warp with both loads issued first
// (bytes in flight: what keeps HBM busy). Reads 2 bytes and writes 1 a value, plus 4 bytes a tile.
constexpr int kTilesPerHalfWarp = 2;
__global__ void quantize_tiles_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale,
                                      int64_t tiles, int64_t tiles_per_row, int64_t s0, int64_t s1) {
  const int64_t half = (blockIdx.x * int64_t(kThreads) + threadIdx.x) / 16;
  const int lane = threadIdx.x % 16;
  uint4 raw[kTilesPerHalfWarp];
#pragma unroll
  for (int k = 0; k < kTilesPerHalfWarp; ++k) {
    const int64_t tile = half * kTilesPerHalfWarp + k;
    raw[k] = tile < tiles ? __ldcs(reinterpret_cast<const uint4*>(x + tile * fp8::kBlock + 8 * lane)) : uint4{};
  }
#pragma unroll
  for (int k = 0; k < kTilesPerHalfWarp; ++k) {
    const int64_t tile = half * kTilesPerHalfWarp + k;
    const bf16* v = reinterpret_cast<const bf16*>(&raw[k]);
    float f[8], m = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(f[e] = cvt<float>(v[e])));
#pragma unroll
    for (int o = 8; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));  // within the half warp
    if (tile >= tiles) continue;
    const float s = fp8::scale_of(m);
    uint32_t packed[2] = {0u, 0u};  // the GPU's cvt: fp8::to_e4m3's bytes but a NaN's
#pragma unroll
    for (int e = 0; e < 8; e += 2)
      packed[e / 4] |= uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(f[e] / s, f[e + 1] / s), __NV_SATFINITE, __NV_E4M3))
                       << (8 * (e % 4));
    *reinterpret_cast<uint2*>(q + tile * fp8::kBlock + 8 * lane) = uint2{packed[0], packed[1]};
    if (lane == 0) scale[(tile / tiles_per_row) * s0 + (tile % tiles_per_row) * s1] = s;
  }
}

template <class T>
__global__ void dequantize_kernel(T* __restrict__ out, const uint8_t* __restrict__ q, const float* __restrict__ scale,
                                  int64_t n, int64_t cols, int64_t br, int64_t bc, int64_t bcs) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = cvt<T>(fp8::from_e4m3(q[i]) * __ldg(scale + (r / br) * bcs + c / bc));
  }
}

template <class T>
__global__ void transpose_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t rows, int64_t cols) {
  __shared__ T tile[32][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t r = blockIdx.y * 32 + k;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  const int64_t oc = blockIdx.y * 32 + threadIdx.x;  // out [cols, rows]
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t orow = blockIdx.x * 32 + k;
    if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][k];
  }
}

// cuBLASLt objects destroyed at scope exit (every call checked).
struct LtDesc {
  cublasLtMatmulDesc_t d = nullptr;
  LtDesc() { TG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~LtDesc() { cublasLtMatmulDescDestroy(d); }
  template <class V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t d = nullptr;
  LtLayout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    TG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, t, uint64_t(rows), uint64_t(cols), ld));
  }
  ~LtLayout() { cublasLtMatrixLayoutDestroy(d); }
};
struct LtPreference {
  cublasLtMatmulPreference_t d = nullptr;
  explicit LtPreference(size_t workspace) {
    TG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d));
    TG_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  }
  ~LtPreference() { cublasLtMatmulPreferenceDestroy(d); }
};

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's advice on Hopper

// The device's cuBLASLt workspace, from the caching allocator, held for the life of the process.
void* lt_workspace(int device) {
  static std::mutex mu;
  static std::map<int, void*> spaces;
  std::lock_guard<std::mutex> lock(mu);
  void*& ws = spaces[device];
  if (!ws) ws = allocate(device, kWorkspaceBytes);
  return ws;
}

}  // namespace

bool fp8_gemm_supported(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return known[device] = major == 9;  // the block-scaled modes are Hopper's (Blackwell has MXFP8)
}

void quantize_fp8(const Tensor& x, const Tensor& data, const Tensor& scale, const Tensor& first_bad,
                  int64_t block_rows, int64_t block_cols, bool check_finite) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  cudaStream_t s = stream_for(x);
  const int64_t s0 = scale.strides()[0], s1 = scale.strides()[1];
  if (!check_finite && block_rows == 1 && block_cols == fp8::kBlock && cols % fp8::kBlock == 0 &&
      x.dtype() == kBFloat16 && aligned(x.data_ptr(), 16)) {
    const int64_t tiles = rows * (cols / fp8::kBlock);
    quantize_tiles_kernel<<<blocks_for(tiles, kThreads / 16 * kTilesPerHalfWarp, INT32_MAX), kThreads, 0, s>>>(
        x.data_ptr<bf16>(), data.data_ptr<uint8_t>(), scale.data_ptr<float>(), tiles, cols / fp8::kBlock, s0, s1);
    TG_CUDA_CHECK_LAUNCH("quantize_tiles_kernel");
    return;
  }
  const int64_t blocks = ((rows + block_rows - 1) / block_rows) * ((cols + block_cols - 1) / block_cols);
  TG_CHECK(blocks <= INT32_MAX, "quantize_fp8", blocks, " scale blocks exceed one launch");
  auto* bad = reinterpret_cast<unsigned long long*>(first_bad.data_ptr<int64_t>());
  dispatch_gpu_float(x.dtype(), "quantize_fp8", [&](auto tag) {
    using T = typename decltype(tag)::type;
    quantize_blocks_kernel<T><<<unsigned(blocks), kThreads, 0, s>>>(x.data_ptr<T>(), data.data_ptr<uint8_t>(),
                                                                    scale.data_ptr<float>(), bad, rows, cols,
                                                                    block_rows, block_cols, s0, s1, check_finite);
    TG_CUDA_CHECK_LAUNCH("quantize_blocks_kernel");
  });
}

void dequantize_fp8(const Tensor& out, const Tensor& data, const Tensor& scale, int64_t block_rows,
                    int64_t block_cols) {
  const int64_t n = out.numel(), cols = out.shape()[1];
  cudaStream_t s = stream_for(out);
  dispatch_gpu_float(out.dtype(), "dequantize_fp8", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dequantize_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(
        out.data_ptr<T>(), data.data_ptr<uint8_t>(), scale.data_ptr<float>(), n, cols, block_rows, block_cols,
        (cols + block_cols - 1) / block_cols);
    TG_CUDA_CHECK_LAUNCH("dequantize_kernel");
  });
}

void transpose_2d(const Tensor& out, const Tensor& in) {
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  TG_CHECK((rows + 31) / 32 <= 65535, "transpose_2d", rows, " rows exceed one launch");
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  cudaStream_t s = stream_for(in);
  if (in.dtype() == kUInt8) {
    transpose_kernel<uint8_t><<<grid, block, 0, s>>>(out.data_ptr<uint8_t>(), in.data_ptr<uint8_t>(), rows, cols);
  } else {
    TG_CHECK(in.dtype() == kFloat32, "transpose_2d", "wants uint8 or float32, got ", in.dtype());
    transpose_kernel<float><<<grid, block, 0, s>>>(out.data_ptr<float>(), in.data_ptr<float>(), rows, cols);
  }
  TG_CUDA_CHECK_LAUNCH("transpose_kernel");
}

void fp8_gemm(const Tensor& out, const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale) {
  const int64_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[0];
  const int device = out.device().index;
  cudaStream_t s = stream_for(out);
  auto lt = reinterpret_cast<cublasLtHandle_t>(cublas_handle(device));  // a cuBLAS handle is a cuBLASLt one
  // Column-major terms: out^T [N, M] = b [K, N]^T a^T [K, M]; both operands K-major.
  LtDesc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(b_scale.data_ptr<float>()));
  desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_scale.data_ptr<float>()));
  LtLayout la(CUDA_R_8F_E4M3, K, N, K), lb(CUDA_R_8F_E4M3, K, M, K), ld(CUDA_R_16BF, N, M, N);

  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, cublasLtMatmulAlgo_t> algos;
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(device, M, N, K);
    auto it = algos.find(key);
    if (it == algos.end()) {
      LtPreference pref(kWorkspaceBytes);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      TG_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc.d, la.d, lb.d, ld.d, ld.d, pref.d, 1, &result, &found));
      TG_CHECK(found > 0, "linear_fp8", "cuBLASLt has no FP8 block-scaled GEMM for M = ", M, ", N = ", N, ", K = ", K);
      it = algos.emplace(key, result.algo).first;
    }
    algo = it->second;
  }
  const float alpha = 1.0f, beta = 0.0f;
  TG_CUBLAS_CHECK(cublasLtMatmul(lt, desc.d, &alpha, b.data_ptr(), la.d, a.data_ptr(), lb.d, &beta, out.data_ptr(),
                                 ld.d, out.data_ptr(), ld.d, &algo, lt_workspace(device), kWorkspaceBytes, s));
}

}  // namespace tg::cuda
