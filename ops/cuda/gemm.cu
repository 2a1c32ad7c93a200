// GEMM on the device through cuBLAS: c[i] = alpha * a[i] @ b[i] + beta * c[i] (ops/gemm_kernels.h).
//   float32:  CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 when tg::allow_tf32()
//   bfloat16: CUDA_R_16BF operands, CUBLAS_COMPUTE_32F (float32 accumulation)
//   float64:  CUBLAS_COMPUTE_64F
//   float32 c from bfloat16 a, b: CUDA_R_16BF operands, CUDA_R_32F c, CUBLAS_COMPUTE_32F
// Our matrices are row-major views; cuBLAS is column-major. A row-major C [M, N] with row stride
// ldc is the column-major C^T [N, M] with leading dim ldc, so we ask cuBLAS for
// C^T = B^T A^T: m = N, n = M, k = K, its "A" is our b and its "B" is our a. An operand whose
// unit stride is along its rows (a transposed view) is passed with CUBLAS_OP_T instead of a copy;
// a c with unit row stride turns the whole product around (C^T = B^T A^T in our terms).
// Memory traffic: each operand read once per tile pass (cuBLAS's tiling), c written once.
#include <mutex>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda_settings.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/cuda/cublas_utils.cuh"
#include "ops/detail/matrix_gemm.h"
#include "ops/gemm_kernels.h"
#include "ops/unary_kernels.h"

namespace tg::cuda {

cublasHandle_t cublas_handle(int device) {
  static std::mutex mu;
  static std::vector<cublasHandle_t> handles;
  cudaStream_t s = stream(device);  // checks the device exists and makes it current
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() < static_cast<size_t>(device_count())) handles.resize(device_count(), nullptr);
  cublasHandle_t& h = handles[static_cast<size_t>(device)];
  if (!h) {
    int major = 0;
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    // cuBLAS's advice: 32 MiB of workspace on Hopper and later, 4 MiB before.
    const size_t ws_bytes = (major >= 9 ? 32u : 4u) << 20;
    cublasHandle_t created = nullptr;
    TG_CUBLAS_CHECK(cublasCreate(&created));
    TG_CUBLAS_CHECK(cublasSetStream(created, s));  // resets the workspace: set it after
    void* ws = allocate(device, ws_bytes);         // held for the life of the process
    TG_CUBLAS_CHECK(cublasSetWorkspace(created, ws, ws_bytes));
    TG_CUBLAS_CHECK(cublasSetMathMode(
        created, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    h = created;
  }
  return h;
}

namespace {

// One operand: rows x cols matrices at ptr + i * bs, element (r, c) at r * rs + c * cs.
struct Mat {
  void* ptr;
  int64_t rows, cols, rs, cs, bs;
};

Mat mat_of(const Tensor& t) {
  return {t.data_ptr(), t.shape()[1], t.shape()[2], t.strides()[1], t.strides()[2], t.strides()[0]};
}

Mat transposed(Mat m) { return {m.ptr, m.cols, m.rows, m.cs, m.rs, m.bs}; }

enum class Layout { RowMajor, ColMajor, None };

// How cuBLAS can read `m` (the stride of a size-1 dim does not matter), and its leading dim.
Layout layout_of(const Mat& m, int64_t& ld) {
  if ((m.cs == 1 || m.cols == 1) && (m.rows == 1 || m.rs >= std::max<int64_t>(1, m.cols))) {
    ld = m.rows == 1 ? std::max<int64_t>(1, m.cols) : m.rs;
    return Layout::RowMajor;
  }
  if ((m.rs == 1 || m.rows == 1) && (m.cols == 1 || m.cs >= std::max<int64_t>(1, m.rows))) {
    ld = m.cols == 1 ? std::max<int64_t>(1, m.rows) : m.cs;
    return Layout::ColMajor;
  }
  return Layout::None;
}

// A contiguous [B, R, C] copy of t (an operand cuBLAS cannot read in place: overlapping rows).
Tensor contiguous_copy(const Tensor& t) {
  KernelTrace::record("gemm.copy_operand");
  Tensor c = Tensor::empty(t.shape(), t.options());
  copy_strided(c, t);
  return c;
}

int checked_int(const char* what, int64_t v) {
  TG_CHECK(v >= 0 && v <= INT32_MAX, "gemm", what, " = ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}

// c (row-major, unit column stride) = alpha * a @ b + beta * c via C^T = B^T A^T.
void gemm_rowmajor_c(const Tensor& ct, DType a_dtype, const Mat& c, const Mat& a, const Mat& b, int64_t batch,
                     double alpha, double beta) {
  const int64_t M = c.rows, N = c.cols, K = a.cols;
  int64_t ldc = 0, lda = 0, ldb = 0;
  layout_of(c, ldc);
  const Layout la = layout_of(a, lda), lb = layout_of(b, ldb);
  // cuBLAS's A is our b (B^T, N x K), its B is our a (A^T, K x M).
  const cublasOperation_t op_b = lb == Layout::RowMajor ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = la == Layout::RowMajor ? CUBLAS_OP_N : CUBLAS_OP_T;

  cudaDataType_t dt, dt_ab;
  cublasComputeType_t compute;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* pa = &alpha_f;
  const void* pb = &beta_f;
  switch (ct.dtype()) {
    case kFloat32:
      dt = CUDA_R_32F;
      if (a_dtype == kBFloat16) {
        compute = CUBLAS_COMPUTE_32F;
        KernelTrace::record("gemm.cublas_bf16_f32out");
      } else {
        compute = tg::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        KernelTrace::record(tg::allow_tf32() ? "gemm.cublas_tf32" : "gemm.cublas_f32");
      }
      break;
    case kBFloat16:
      dt = CUDA_R_16BF;
      compute = CUBLAS_COMPUTE_32F;
      KernelTrace::record("gemm.cublas_bf16");
      break;
    case kFloat64:
      dt = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      pa = &alpha, pb = &beta;
      KernelTrace::record("gemm.cublas_f64");
      break;
    default: fail("gemm", "wants floating-point operands, got ", ct.dtype());
  }
  dt_ab = a_dtype == kBFloat16 ? CUDA_R_16BF : dt;
  cublasHandle_t h = cublas_handle(ct.device().index);
  const int m = checked_int("N", N), n = checked_int("M", M), k = checked_int("K", K);
  const int lda_ = checked_int("leading dim of b", ldb), ldb_ = checked_int("leading dim of a", lda);
  const int ldc_ = checked_int("leading dim of c", ldc);
  if (batch == 1) {
    TG_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, m, n, k, pa, b.ptr, dt_ab, lda_, a.ptr, dt_ab, ldb_, pb, c.ptr, dt, ldc_,
                                 compute, CUBLAS_GEMM_DEFAULT));
  } else {
    TG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, m, n, k, pa, b.ptr, dt_ab, lda_, b.bs, a.ptr, dt_ab, ldb_,
                                               a.bs, pb, c.ptr, dt, ldc_, c.bs, checked_int("batch", batch),
                                               compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

// Each product its own group of one (cuBLAS's groups share m, n, k: an expert's rows differ), in
// the terms of gemm_rowmajor_c; the host arrays by value, the pointer arrays copied to the device
// (a pageable copy: staged at the call, nothing waits).
bool gemm_grouped(const std::vector<matrix::Product>& products, double alpha, double beta) {
  const Tensor& c0 = products[0].c;
  const DType dtype = c0.dtype();
  if (dtype != kBFloat16 && dtype != kFloat32) return false;
  const int device = c0.device().index;
  cudaStream_t s = stream(device);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  TG_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return false;  // the pointer upload is not capturable
  const size_t G = products.size();
  std::vector<cublasOperation_t> op_a(G), op_b(G);
  std::vector<int> m(G), n(G), k(G), lda(G), ldb(G), ldc(G), ones(G, 1);
  std::vector<const void*> pointers(3 * G);
  auto mat2 = [](const Tensor& t) { return Mat{t.data_ptr(), t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1], 0}; };
  auto fits = [](int64_t v) { return v > 0 && v <= INT32_MAX; };
  for (size_t i = 0; i < G; ++i) {
    const matrix::Product& p = products[i];
    if (p.c.dtype() != dtype || p.a.dtype() != dtype || p.b.dtype() != dtype || p.c.device() != c0.device() ||
        p.a.device() != c0.device() || p.b.device() != c0.device())
      return false;
    const Mat mc = mat2(p.c), ma = mat2(p.a), mb = mat2(p.b);
    int64_t lc = 0, la = 0, lb = 0;
    if (mc.cs != 1 || layout_of(mc, lc) != Layout::RowMajor) return false;
    const Layout layout_a = layout_of(ma, la), layout_b = layout_of(mb, lb);
    if (layout_a == Layout::None || layout_b == Layout::None) return false;
    if (!fits(mc.rows) || !fits(mc.cols) || !fits(ma.cols) || !fits(la) || !fits(lb) || !fits(lc)) return false;
    // cuBLAS's A is our b, its B our a (C^T = B^T A^T).
    op_a[i] = layout_b == Layout::RowMajor ? CUBLAS_OP_N : CUBLAS_OP_T;
    op_b[i] = layout_a == Layout::RowMajor ? CUBLAS_OP_N : CUBLAS_OP_T;
    m[i] = int(mc.cols), n[i] = int(mc.rows), k[i] = int(ma.cols);
    lda[i] = int(lb), ldb[i] = int(la), ldc[i] = int(lc);
    pointers[i] = mb.ptr, pointers[G + i] = ma.ptr, pointers[2 * G + i] = mc.ptr;
  }
  const cudaDataType_t dt = dtype == kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      dtype == kFloat32 && tg::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  KernelTrace::record(dtype == kBFloat16 ? "gemm.cublas_grouped_bf16" : "gemm.cublas_grouped_f32");
  const std::vector<float> alphas(G, static_cast<float>(alpha)), betas(G, static_cast<float>(beta));
  const Tensor table = Tensor::empty({static_cast<int64_t>(3 * G)}, {kInt64, c0.device()});
  auto** dev = static_cast<void**>(table.data_ptr());
  TG_CUDA_CHECK(cudaMemcpyAsync(dev, pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice, s));
  TG_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      cublas_handle(device), op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alphas.data(),
      const_cast<const void* const*>(dev), dt, lda.data(), const_cast<const void* const*>(dev + G), dt, ldb.data(),
      betas.data(), dev + 2 * G, dt, ldc.data(), static_cast<int>(G), ones.data(), compute));
  return true;
}

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  TG_CHECK(c.dim() == 3 && a.dim() == 3 && b.dim() == 3, "gemm", "wants 3-D operands, got c ", c.shape(), ", a ",
           a.shape(), ", b ", b.shape());
  const int64_t B = c.shape()[0], M = c.shape()[1], N = c.shape()[2], K = a.shape()[2];
  TG_CHECK(a.shape() == Shape({B, M, K}) && b.shape() == Shape({B, K, N}), "gemm", "shapes do not match: c ",
           c.shape(), ", a ", a.shape(), ", b ", b.shape());
  const bool widening = c.dtype() == kFloat32 && a.dtype() == kBFloat16 && b.dtype() == kBFloat16;
  TG_CHECK((a.dtype() == c.dtype() && b.dtype() == c.dtype()) || widening, "gemm",
           "wants one dtype (or float32 c from bfloat16 a and b), got c ", c.dtype(), ", a ", a.dtype(), ", b ",
           b.dtype());
  TG_CHECK(a.device() == c.device() && b.device() == c.device(), "gemm", "wants one device, got c on ", c.device(),
           ", a on ", a.device(), ", b on ", b.device());
  if (B == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: c = beta * c
    if (beta == 0.0) fill(c, 0.0);
    else unary(UnaryOp::MulScalar, beta, c, c);
    return;
  }
  TG_CHECK(B == 1 || c.strides()[0] != 0, "gemm", "c has batch stride 0 for ", B, " products (shape ", c.shape(),
           ")");

  int64_t ld = 0;
  Mat mc = mat_of(c);
  Tensor ta = a, tb = b, tc = c;
  // Operands cuBLAS cannot read in place are copied (rare: overlapping or doubly strided rows).
  if (layout_of(mat_of(ta), ld) == Layout::None) ta = contiguous_copy(ta);
  if (layout_of(mat_of(tb), ld) == Layout::None) tb = contiguous_copy(tb);
  Mat ma = mat_of(ta), mb = mat_of(tb);
  const Layout lc = layout_of(mc, ld);
  if (lc == Layout::RowMajor) return gemm_rowmajor_c(c, a.dtype(), mc, ma, mb, B, alpha, beta);
  if (lc == Layout::ColMajor)  // C^T = B^T A^T, C^T row-major
    return gemm_rowmajor_c(c, a.dtype(), transposed(mc), transposed(mb), transposed(ma), B, alpha, beta);
  // c itself cannot be written by cuBLAS: compute into a contiguous buffer, then copy back.
  tc = beta == 0.0 ? Tensor::empty(c.shape(), c.options()) : contiguous_copy(c);
  gemm_rowmajor_c(tc, a.dtype(), mat_of(tc), ma, mb, B, alpha, beta);
  copy_strided(c, tc);
}

}  // namespace tg::cuda
