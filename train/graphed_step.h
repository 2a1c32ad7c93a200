// A training step replayed as one CUDA graph (tg::cuda::CUDAGraph) once it has run eagerly: on the
// GPU the host cost of ~1000 kernel launches a step and the gaps between them are otherwise paid
// every step.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/cuda_graph.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace tg::train {

class GraphedStep {
 public:
  // step(batch) -> its outputs (the loss, the gradient norm): the whole step (zero_grad, forward,
  // backward, clipping, optimizer) with fixed shapes, no dropout and no host reads. Disabled: every
  // call runs it eagerly.
  using Fn = std::function<std::vector<Tensor>(const data::Batch& batch)>;
  GraphedStep(bool enabled, Fn step) : enabled_(enabled), step_(std::move(step)) {}

  // The first call runs eagerly (the warm-up a capture needs: cuBLAS, the optimizer's state); the
  // second captures and every call from then on copies the batch into the captured inputs and
  // replays. On replays the outputs are the graph's tensors, overwritten by the next call.
  // tg::Error when a batch's shape differs from the captured one's.
  std::vector<Tensor> operator()(const data::Batch& batch);
  bool enabled() const { return enabled_; }
  bool replaying() const { return graph_ != nullptr; }

 private:
  bool enabled_;
  Fn step_;
  bool warmed_up_ = false;
  data::Batch captured_;  // the graph's inputs
  std::vector<Tensor> outputs_;
  std::unique_ptr<cuda::CUDAGraph> graph_;
};

}  // namespace tg::train
