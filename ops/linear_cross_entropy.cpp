#include "ops/linear_cross_entropy.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/binary_kernels.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/cross_entropy_kernels.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/linear_cross_entropy_chunks.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "linear_cross_entropy";
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGemmRows = 2048;              // a chunk's rows where its GEMMs run near peak
constexpr int64_t kMaxChunkBytes = 256 * kMiB;   // of logits a chunk without dW
constexpr int64_t kDwRows = 4096;                // a chunk's rows with dW: the dW GEMM's K
constexpr int64_t kTileRows = 128;               // chunks in whole GEMM tiles

// dx and dW for a unit incoming gradient (computed with the loss); backward scales them: by the
// 0-d gradient (Mean, Sum) or row by row (None, whose weight is then frozen).
struct LinearCrossEntropyBackward final : Node {
  enum { kDx, kDw, kCount };
  DType w_dtype = kFloat32;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor scale = g[0];  // 0-d, or [N] for None, in the loss's dtype
    if (saved[kCount].defined()) scale = div(scale, unpack(kCount));  // Mean
    if (scale.dim() == 1) scale = reshape(contiguous(scale), {scale.shape()[0], 1});
    Tensor dx;
    if (mask[0]) {
      Tensor unit = unpack(kDx);
      dx = mul(unit, to(scale, unit.dtype()));
    }
    Tensor dw;
    if (mask[1]) {  // the unit dW (float32 for a bfloat16 weight) scaled and rounded in one pass
      Tensor unit = unpack(kDw), s = to(scale, unit.dtype());
      dw = Tensor::empty(unit.shape(), {w_dtype, unit.device()});
      TG_DISPATCH(unit.device(), binary, BinaryOp::Mul, dw, unit, expand(s, unit.shape()));
    }
    return {dx, dw};
  }
};

// Reduction::None with a trainable weight: dW = sum_i g_i dlogits_i^T x_i cannot be formed before
// g is known, so backward computes the chunks' logits and unit dlogits again (the forward's chunks
// and kernels: dx is bitwise the frozen weight's), takes the unit dx from them, then scales them
// by g row by row in place for dW: one logits GEMM more than the unit-gradient path.
struct LinearCrossEntropyRowsBackward final : Node {
  enum { kX, kW, kTargets };
  int64_t ignore_index = -100, chunk = 0;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    KernelTrace::record("linear_cross_entropy.backward_recomputed");
    const Tensor x = unpack(kX), w = unpack(kW), tgt = unpack(kTargets);
    const int64_t N = x.shape()[0], rows_max = std::min(chunk, std::max<int64_t>(N, 1));
    const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
    const Tensor scale = to(reshape(contiguous(g[0]), {N, 1}), x.dtype());
    Tensor dx = mask[0] ? Tensor::empty(x.shape(), x.options()) : Tensor();
    Tensor dw = mask[1] ? Tensor::empty(w.shape(), {acc, x.device()}) : Tensor();
    if (mask[1] && N == 0) fill_(dw, 0.0);
    Tensor buf = Tensor::empty({rows_max, w.shape()[0]}, x.options());
    Tensor loss_rows = Tensor::empty({rows_max}, {acc, x.device()}), lse = Tensor::empty({rows_max}, {acc, x.device()});
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t rows = std::min(chunk, N - r0);
      Tensor logits = slice(buf, 0, 0, rows), xr = slice(x, 0, r0, r0 + rows);
      matrix::gemm(logits, xr, transpose(w, 0, 1));
      TG_DISPATCH(x.device(), cross_entropy_with_grad, slice(loss_rows, 0, 0, rows), slice(lse, 0, 0, rows), logits,
                  slice(tgt, 0, r0, r0 + rows), ignore_index);
      if (mask[0]) matrix::gemm(slice(dx, 0, r0, r0 + rows), logits, w);
      if (!mask[1]) continue;
      TG_DISPATCH(x.device(), binary, BinaryOp::Mul, logits, logits, expand(slice(scale, 0, r0, r0 + rows), logits.shape()));
      matrix::gemm(dw, transpose(logits, 0, 1), xr, 1.0, r0 == 0 ? 0.0 : 1.0);
    }
    return {mask[0] ? mul(dx, scale) : Tensor(), mask[1] ? to(dw, w.dtype()) : Tensor()};
  }
};

}  // namespace

namespace detail {

// Both GEMMs of a chunk want rows by the thousand: [rows, H] x [H, V], and [rows, V] x [V, H],
// whose output is only rows x H (256 rows left it to split-K). So 2048 rows, fewer where their
// logits would pass 256 MiB (1024 at Llama-3's vocabulary: a little slower than 2048, but the
// step's peak stays where it was). With dW 4096 rows: its GEMM's K, and per chunk the float32
// accumulator is read and written once more. The sweep: dev/NOTES.md (linear_ce_bench
// --chunk-rows).
int64_t linear_cross_entropy_chunk_rows(int64_t N, int64_t V, int64_t element_size, bool want_dw) {
  int64_t rows = want_dw ? kDwRows : std::min(kGemmRows, kMaxChunkBytes / (V * element_size));
  rows = std::max(kTileRows, rows / kTileRows * kTileRows);
  return std::max<int64_t>(1, std::min(N, rows));
}

Tensor linear_cross_entropy_chunked(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                    int64_t ignore_index, Reduction reduction, int64_t chunk_rows) {
  check_floating(kOp, "x", x);
  check_floating(kOp, "weight", weight);
  check_defined(kOp, "targets", targets);
  check_same(kOp, {{"x", x}, {"weight", weight}});
  check_same(kOp, {{"x", x}, {"targets", targets}}, /*same_dtype=*/false);
  TG_CHECK(targets.dtype() == kInt32 || targets.dtype() == kInt64, kOp,
           "'targets' must hold class indices as int32 or int64, got ", targets.dtype());
  TG_CHECK(x.dim() == 2 && weight.dim() == 2 && x.shape()[1] == weight.shape()[1], kOp,
           "wants x [N, H] and weight [V, H], got x ", x.shape(), ", weight ", weight.shape());
  const int64_t N = x.shape()[0], V = weight.shape()[0];
  TG_CHECK(V >= 1, kOp, "the weight has no classes (shape ", weight.shape(), ")");
  TG_CHECK(targets.dim() == 1 && targets.shape()[0] == N, kOp, "'targets' must be [", N, "] (one class per row of x ",
           x.shape(), "), got ", targets.shape());
  TG_CHECK(chunk_rows >= 0, kOp, "wants chunks of at least one row (or 0: its choice), got ", chunk_rows);
  const Device dev = x.device();
  Tensor xc, w, tgt;
  {
    NoGradGuard g;  // internal: the op's node covers them
    xc = x.strides()[1] == 1 ? x : contiguous(x);
    w = weight.detach();
    tgt = contiguous(targets);
  }
  if (dev.is_cpu()) check_targets_on_host(kOp, tgt, V, ignore_index);

  const bool rows_out = reduction == Reduction::None;
  bool want_dx = x.requires_grad() && grad_mode_enabled(), want_dw = weight.requires_grad() && grad_mode_enabled();
  // None with a trainable weight: the gradients wait for backward (LinearCrossEntropyRowsBackward)
  const bool deferred = rows_out && want_dw;
  if (deferred) want_dx = want_dw = false;
  KernelTrace::record(deferred  ? "linear_cross_entropy.loss_rows_deferred"
                      : want_dw ? "linear_cross_entropy.dx_dweight"
                      : want_dx ? "linear_cross_entropy.dx"
                                : "linear_cross_entropy.loss");
  const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss_rows = Tensor::empty({N}, {acc, dev}), lse = Tensor::empty({N}, {acc, dev});
  Tensor dx = want_dx ? Tensor::empty({N, x.shape()[1]}, x.options()) : Tensor();
  Tensor dw = want_dw ? Tensor::empty(w.shape(), {acc, dev}) : Tensor();
  // None's chunks are the frozen weight's also when backward computes dW: its dx is then the same bits
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : linear_cross_entropy_chunk_rows(N, V, x.element_size(), want_dw);
  Tensor buf = Tensor::empty({std::min(chunk, std::max<int64_t>(N, 1)), V}, x.options());
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    Tensor logits = slice(buf, 0, 0, rows), xr = slice(xc, 0, r0, r0 + rows), tr = slice(tgt, 0, r0, r0 + rows);
    Tensor lr = slice(loss_rows, 0, r0, r0 + rows), sr = slice(lse, 0, r0, r0 + rows);
    matrix::gemm(logits, xr, transpose(w, 0, 1));
    if (!want_dx && !want_dw) {
      TG_DISPATCH(dev, cross_entropy, lr, sr, logits, tr, ignore_index);
      continue;
    }
    // the loss, then dlogits = softmax - onehot over the logits themselves, in one pass
    TG_DISPATCH(dev, cross_entropy_with_grad, lr, sr, logits, tr, ignore_index);
    if (want_dx) matrix::gemm(slice(dx, 0, r0, r0 + rows), logits, w);
    if (want_dw) matrix::gemm(dw, transpose(logits, 0, 1), xr, 1.0, r0 == 0 ? 0.0 : 1.0);
  }
  if (rows_out) {
    if (deferred) {
      if (auto node = record<LinearCrossEntropyRowsBackward>({{"x", x}, {"weight", weight}}, {loss_rows})) {
        node->ignore_index = ignore_index, node->chunk = chunk;
        node->saved = {SavedTensor(xc.detach(), "x"), SavedTensor(w, "weight"), SavedTensor(tgt, "targets")};
      }
    } else if (auto node = record<LinearCrossEntropyBackward>({{"x", x}, {"weight", weight}}, {loss_rows})) {
      node->saved = {SavedTensor(dx, "dx"), SavedTensor(Tensor(), "dweight"), SavedTensor(Tensor(), "count")};
    }
    return loss_rows;
  }
  Tensor out = Tensor::empty({}, {acc, dev}), count;
  if (reduction == Reduction::Mean) count = Tensor::empty({}, {acc, dev});
  TG_DISPATCH(dev, cross_entropy_reduce, out, count, loss_rows, tgt, ignore_index, reduction == Reduction::Mean);
  if (auto node = record<LinearCrossEntropyBackward>({{"x", x}, {"weight", weight}}, {out})) {
    node->w_dtype = weight.dtype();
    node->saved = {SavedTensor(dx, "dx"), SavedTensor(dw, "dweight"), SavedTensor(count, "count")};
  }
  return out;
}

}  // namespace detail

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index,
                            Reduction reduction) {
  return detail::linear_cross_entropy_chunked(x, weight, targets, ignore_index, reduction, 0);
}

}  // namespace tg
