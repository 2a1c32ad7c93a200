#include "nn/loss.h"

#include "ops/cast.h"
#include "core/factory.h"
#include "ops/cross_entropy.h"
#include "ops/linear_cross_entropy.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace tg::nn {

Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  TG_CHECK(logits.defined() && labels.defined() && logits.dim() == 3 && labels.dim() == 2 &&
               labels.shape()[0] == logits.shape()[0] && labels.shape()[1] == logits.shape()[1],
           "causal_lm_loss", "wants logits [B, T, V] and labels [B, T], got ",
           logits.defined() ? shape_str(logits.shape()) : "undefined", " and ",
           labels.defined() ? shape_str(labels.shape()) : "undefined");
  const int64_t T = logits.shape()[1], V = logits.shape()[2];
  TG_CHECK(T >= 2, "causal_lm_loss", "needs at least 2 positions to predict a next token, got T = ", T);
  // bfloat16 logits: the cross entropy and the loss in float32, as transformers upcasts. The cast
  // comes after the slice: it writes [B, T - 1, V] contiguously, so the reshape is a view and
  // the float32 logits exist once (slice-then-reshape alone copies).
  Tensor pred = slice(logits, 1, 0, T - 1);
  pred = reshape(logits.dtype() == kBFloat16 ? to(pred, kFloat32) : pred, {-1, V});
  Tensor target = reshape(slice(labels, 1, 1, T), {-1});
  return cross_entropy(pred, target, ignore_index);
}

namespace {

// [B, T] labels -> [B * T] targets: position t's is labels[t + 1], the last position's ignored.
// `who` names the caller and `wanted` x's shape ("hidden [B, T, H]") in errors.
Tensor shifted_targets(const char* who, const char* wanted, const Tensor& x, const Tensor& labels,
                       int64_t ignore_index) {
  TG_CHECK(x.defined() && labels.defined() && x.dim() == 3 && labels.dim() == 2 &&
               labels.shape()[0] == x.shape()[0] && labels.shape()[1] == x.shape()[1],
           who, "wants ", wanted, " and labels [B, T], got ", x.defined() ? shape_str(x.shape()) : "undefined", " and ",
           labels.defined() ? shape_str(labels.shape()) : "undefined");
  const int64_t B = x.shape()[0], T = x.shape()[1];
  Tensor last = full({B, 1}, static_cast<double>(ignore_index), {labels.dtype(), labels.device()});
  return reshape(cat({slice(labels, 1, 1, T), last}, 1), {-1});
}

// linear_cross_entropy of hidden's rows [B * T, H] against the shifted labels.
Tensor head_cross_entropy(const char* who, const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                          int64_t ignore_index, Reduction reduction) {
  Tensor target = shifted_targets(who, "hidden [B, T, H]", hidden, labels, ignore_index);
  TG_CHECK(head_weight.defined(), who, "the head's weight is undefined");
  return linear_cross_entropy(reshape(hidden, {hidden.shape()[0] * hidden.shape()[1], hidden.shape()[2]}), head_weight,
                              target, ignore_index, reduction);
}

}  // namespace

Tensor causal_lm_loss_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                                  int64_t ignore_index) {
  const char* who = "causal_lm_loss_from_hidden";
  TG_CHECK(!hidden.defined() || hidden.dim() != 3 || hidden.shape()[1] >= 2, who,
           "needs at least 2 positions to predict a next token, got T = ", hidden.shape()[1]);
  return head_cross_entropy(who, hidden, head_weight, labels, ignore_index, Reduction::Mean);
}

Tensor next_token_log_probs(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  Tensor target = shifted_targets("next_token_log_probs", "logits [B, T, V]", logits, labels, ignore_index);
  const int64_t B = logits.shape()[0], T = logits.shape()[1], V = logits.shape()[2];
  Tensor rows = reshape(logits.dtype() == kBFloat16 ? to(logits, kFloat32) : logits, {B * T, V});
  return reshape(neg(cross_entropy(rows, target, ignore_index, Reduction::None)), {B, T});
}

Tensor next_token_log_probs_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                                        int64_t ignore_index) {
  const Tensor rows = head_cross_entropy("next_token_log_probs_from_hidden", hidden, head_weight, labels, ignore_index,
                                         Reduction::None);
  return reshape(neg(rows), {hidden.shape()[0], hidden.shape()[1]});
}

}  // namespace tg::nn
