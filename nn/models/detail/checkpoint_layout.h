// The hub's checkpoint layout of a family (nn/models/architecture.h's CheckpointLayout) against the
// model's names: which part of which parameter a hub tensor is, and the hub tensors of a parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/models/architecture.h"

namespace tg::nn::detail {

// A hub tensor's place in the model: parameter `name`, all of it (expert -1) or row block `block`
// of `blocks` of expert `expert`.
struct CheckpointPart {
  std::string name;
  int64_t expert = -1, block = 0, blocks = 1;
};

// nullopt when `key` is the model's own name (no rename nor split matches it).
std::optional<CheckpointPart> model_part(const CheckpointLayout& layout, const std::string& key);
// The view of `param` a part fills (param itself for a whole one); tg::Error naming `key` when the
// part lies outside it (an expert id past num_experts, rows that do not split evenly).
// (Of an unallocated param: an unallocated tensor of the part's shape.)
Tensor part_view(const Tensor& param, const CheckpointPart& part, const std::string& key);
// The hub's tensors for the model's tensor `name` (views of t): itself when the layout leaves it.
std::vector<std::pair<std::string, Tensor>> hub_tensors(const CheckpointLayout& layout, const std::string& name,
                                                        const Tensor& t);

}  // namespace tg::nn::detail
