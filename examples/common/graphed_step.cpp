#include "examples/common/graphed_step.h"

#include "core/primitives.h"
#include "ops/shape.h"

namespace examples {

tg::Tensor GraphedStep::operator()(const tg::Tensor& ids, const tg::Tensor& labels) {
  if (!enabled_ || !warmed_up_) {
    warmed_up_ = true;
    return step_(ids, labels);
  }
  if (!graph_) {
    ids_ = tg::clone(ids);
    labels_ = tg::clone(labels);
    auto graph = std::make_unique<tg::cuda::CUDAGraph>(ids.device());
    graph->capture([&] { loss_ = step_(ids_, labels_); });
    graph_ = std::move(graph);
  } else {
    TG_CHECK(ids.shape() == ids_.shape() && labels.shape() == labels_.shape(), "GraphedStep", "a batch of ids ",
             ids.shape(), " and labels ", labels.shape(), ", the CUDA graph was captured for ", ids_.shape(), " and ",
             labels_.shape(), " (a graph replays fixed shapes)");
    tg::copy_(ids_, ids);
    tg::copy_(labels_, labels);
  }
  graph_->replay();
  return loss_;
}

}  // namespace examples
