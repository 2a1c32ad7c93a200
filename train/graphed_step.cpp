#include "train/graphed_step.h"

#include "core/primitives.h"
#include "ops/shape.h"

namespace tg::train {

std::vector<Tensor> GraphedStep::operator()(const Tensor& ids, const Tensor& labels, const Tensor& position_ids) {
  if (!enabled_ || !warmed_up_) {
    warmed_up_ = true;
    return step_(ids, labels, position_ids);
  }
  if (!graph_) {
    ids_ = clone(ids);
    labels_ = clone(labels);
    if (position_ids.defined()) position_ids_ = clone(position_ids);
    auto graph = std::make_unique<cuda::CUDAGraph>(ids.device());
    graph->capture([&] { outputs_ = step_(ids_, labels_, position_ids_); });
    graph_ = std::move(graph);
  } else {
    TG_CHECK(ids.shape() == ids_.shape() && labels.shape() == labels_.shape(), "GraphedStep", "a batch of ids ",
             ids.shape(), " and labels ", labels.shape(), ", the CUDA graph was captured for ", ids_.shape(), " and ",
             labels_.shape(), " (a graph replays fixed shapes)");
    TG_CHECK(position_ids.defined() == position_ids_.defined(), "GraphedStep", "a batch ",
             position_ids.defined() ? "with" : "without", " position_ids, the CUDA graph was captured ",
             position_ids_.defined() ? "with" : "without", " them");
    copy_(ids_, ids);
    copy_(labels_, labels);
    if (position_ids.defined()) copy_(position_ids_, position_ids);
  }
  graph_->replay();
  return outputs_;
}

}  // namespace tg::train
