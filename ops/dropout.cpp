#include "ops/dropout.h"

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/primitives.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/dropout_kernels.h"

namespace tg {
namespace {

constexpr const char* kOp = "dropout";

// Saves no tensor: backward draws the same mask again from (seed, first_counter).
struct DropoutBackward final : Node {
  uint64_t seed = 0, first_counter = 0;
  float p = 0;
  double scale = 1;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor dx = Tensor::empty(g[0].shape(), g[0].options());
    if (p >= 1.0f) fill_(dx, 0.0);  // p == 1 drops everything: no mask was drawn
    else if (dx.numel() > 0) TG_DISPATCH(dx.device(), dropout, dx, g[0], seed, first_counter, p, scale);
    return {dx};
  }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_floating(kOp, "x", x);
  TG_CHECK(p >= 0.0 && p <= 1.0, kOp, "p must be a probability in [0, 1], got ", p);
  if (!training || p == 0.0) return x;  // the identity, as in PyTorch: no copy, no node

  Tensor out = Tensor::empty(x.shape(), x.options());
  if (p == 1.0) {  // every element dropped (and 1 / (1 - p) would be inf): draw no mask
    fill_(out, 0.0);
    if (auto n = record<DropoutBackward>({{"x", x}}, {out})) n->p = 1.0f;
    return out;
  }
  TG_CHECK(!cuda::is_current_stream_capturing(x.device()), kOp, "p = ", p, " while a CUDA graph captures on ",
           x.device(), ": the mask is drawn at capture, so every replay would drop the same elements; capture "
           "with dropout 0 (or in eval mode)");
  const uint64_t first = gen.reserve((static_cast<uint64_t>(x.numel()) + 3) / 4);
  const double scale = 1.0 / (1.0 - p);
  if (out.numel() > 0) TG_DISPATCH(x.device(), dropout, out, x, gen.seed(), first, static_cast<float>(p), scale);
  if (auto n = record<DropoutBackward>({{"x", x}}, {out})) {
    n->seed = gen.seed();
    n->first_counter = first;
    n->p = static_cast<float>(p);
    n->scale = scale;
  }
  return out;
}

}  // namespace tg
