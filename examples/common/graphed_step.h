// A training step replayed as one CUDA graph (tg::cuda::CUDAGraph) once it has run eagerly: the
// examples' steps on the GPU, where the host cost of ~1000 kernel launches a step and the gaps
// between them are otherwise paid every step.
#pragma once

#include <functional>
#include <memory>

#include "core/cuda_graph.h"
#include "core/tensor.h"

namespace examples {

class GraphedStep {
 public:
  // step(ids, labels) -> loss: the whole step (zero_grad, forward, backward, clipping, optimizer)
  // with fixed shapes, no dropout and no host reads. Disabled: every call runs it eagerly.
  using Fn = std::function<tg::Tensor(const tg::Tensor& ids, const tg::Tensor& labels)>;
  GraphedStep(bool enabled, Fn step) : enabled_(enabled), step_(std::move(step)) {}

  // The first call runs eagerly (the warm-up a capture needs: cuBLAS, the optimizer's state); the
  // second captures and every call from then on copies the batch into the captured inputs and
  // replays. Returns the loss: on replays the graph's tensor, overwritten by the next call.
  // tg::Error when a batch's shape differs from the captured one's.
  tg::Tensor operator()(const tg::Tensor& ids, const tg::Tensor& labels);
  bool replaying() const { return graph_ != nullptr; }

 private:
  bool enabled_;
  Fn step_;
  bool warmed_up_ = false;
  tg::Tensor ids_, labels_, loss_;
  std::unique_ptr<tg::cuda::CUDAGraph> graph_;
};

}  // namespace examples
