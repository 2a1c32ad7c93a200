#include "train/graphed_step.h"

#include "core/primitives.h"
#include "ops/shape.h"

namespace tg::train {

std::vector<Tensor> GraphedStep::operator()(const data::Batch& batch) {
  if (!enabled_ || !warmed_up_) {
    warmed_up_ = true;
    return step_(batch);
  }
  data::Batch& in = captured_;
  if (!graph_) {
    in = {clone(batch.ids), clone(batch.labels), batch.targets,
          batch.position_ids.defined() ? clone(batch.position_ids) : Tensor()};
    auto graph = std::make_unique<cuda::CUDAGraph>(batch.ids.device());
    graph->capture([&] { outputs_ = step_(in); });
    graph_ = std::move(graph);
  } else {
    TG_CHECK(batch.ids.shape() == in.ids.shape() && batch.labels.shape() == in.labels.shape(), "GraphedStep",
             "a batch of ids ", batch.ids.shape(), " and labels ", batch.labels.shape(),
             ", the CUDA graph was captured for ", in.ids.shape(), " and ", in.labels.shape(),
             " (a graph replays fixed shapes)");
    TG_CHECK(batch.position_ids.defined() == in.position_ids.defined(), "GraphedStep", "a batch ",
             batch.position_ids.defined() ? "with" : "without", " position_ids, the CUDA graph was captured ",
             in.position_ids.defined() ? "with" : "without", " them");
    copy_(in.ids, batch.ids);
    copy_(in.labels, batch.labels);
    if (batch.position_ids.defined()) copy_(in.position_ids, batch.position_ids);
    in.targets = batch.targets;
  }
  graph_->replay();
  return outputs_;
}

}  // namespace tg::train
