#include "ops/cross_entropy.h"

#include <vector>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/cross_entropy_kernels.h"
#include "ops/detail/dispatch.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "cross_entropy";

// Saves the logits and the per-row logsumexp (N numbers, not the N x V softmax); backward
// recomputes softmax = exp(logits - lse) on the fly.
struct CrossEntropyBackward final : Node {
  enum { kLogits, kTargets, kLse, kCount };
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    KernelTrace::record("cross_entropy.dlogits");
    Tensor logits = unpack(kLogits);
    Tensor grad = reduction == Reduction::None ? contiguous(g[0]) : g[0];
    Tensor count = reduction == Reduction::Mean ? unpack(kCount) : Tensor();
    Tensor dlogits = Tensor::empty(logits.shape(), logits.options());
    if (dlogits.numel() > 0)
      TG_DISPATCH(dlogits.device(), cross_entropy_backward, dlogits, grad, unpack(kLse), logits,
                  unpack(kTargets), ignore_index, count);
    return {dlogits};
  }
};

}  // namespace

void check_targets_on_host(const char* op, const Tensor& targets, int64_t classes, int64_t ignore_index) {
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    TG_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes), op, "target ", t[i], " (row ", i,
             ") is out of range for ", classes, " classes, wants 0 <= target < ", classes,
             " or ignore_index (", ignore_index, ")");
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  check_floating(kOp, "logits", logits);
  check_defined(kOp, "targets", targets);
  TG_CHECK(targets.dtype() == kInt32 || targets.dtype() == kInt64, kOp,
           "'targets' must hold class indices as int32 or int64, got ", targets.dtype());
  check_same(kOp, {{"logits", logits}, {"targets", targets}}, /*same_dtype=*/false);
  TG_CHECK(logits.dim() == 2, kOp, "'logits' must be 2-D [N, V], got ", logits.shape());
  const int64_t rows = logits.shape()[0], classes = logits.shape()[1];
  TG_CHECK(classes >= 1, kOp, "'logits' has no classes (shape ", logits.shape(), ")");
  TG_CHECK(targets.dim() == 1 && targets.shape()[0] == rows, kOp, "'targets' must be [", rows,
           "] (one class per row of logits ", logits.shape(), "), got ", targets.shape());

  Tensor lg, tgt;
  {
    NoGradGuard no_grad;  // internal copies: the cross_entropy node covers them
    lg = logits.strides()[1] == 1 || classes == 1 ? logits : contiguous(logits);
    tgt = contiguous(targets);
  }
  if (tgt.device().is_cpu()) check_targets_on_host(kOp, tgt, classes, ignore_index);

  const DType acc = logits.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss_rows = Tensor::empty({rows}, {acc, logits.device()});
  Tensor lse = Tensor::empty({rows}, {acc, logits.device()});
  if (rows > 0) TG_DISPATCH(lg.device(), cross_entropy, loss_rows, lse, lg, tgt, ignore_index);

  Tensor out, count;
  if (reduction == Reduction::None) {
    out = loss_rows;
    if (acc != logits.dtype()) {
      out = Tensor::empty({rows}, logits.options());
      copy_(out, loss_rows);
    }
  } else {
    out = Tensor::empty({}, logits.options());
    if (reduction == Reduction::Mean) count = Tensor::empty({}, {acc, logits.device()});
    TG_DISPATCH(lg.device(), cross_entropy_reduce, out, count, loss_rows, tgt, ignore_index,
                reduction == Reduction::Mean);
  }
  if (auto n = record<CrossEntropyBackward>({{"logits", logits}}, {out})) {
    n->ignore_index = ignore_index;
    n->reduction = reduction;
    n->saved = {SavedTensor(lg, "logits"), SavedTensor(tgt, "targets"), SavedTensor(lse, "lse"),
                SavedTensor(count, "count")};
  }
  return out;
}

}  // namespace tg
