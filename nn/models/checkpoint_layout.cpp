#include "nn/models/detail/checkpoint_layout.h"

#include <cctype>

#include "core/error.h"
#include "nn/init.h"

namespace tg::nn::detail {
namespace {

// `name` ends with `suffix` at a component boundary; the prefix before it ("model.layers.3.").
std::optional<std::string> prefix_of(const std::string& name, const std::string& suffix) {
  if (!name.ends_with(suffix)) return std::nullopt;
  const size_t at = name.size() - suffix.size();
  if (at > 0 && name[at - 1] != '.') return std::nullopt;
  return name.substr(0, at);
}

// key = prefix + part with "{e}" an expert id: {prefix, e}.
std::optional<std::pair<std::string, int64_t>> match_part(const std::string& key, const std::string& part) {
  const size_t hole = part.find("{e}");
  const std::string before = part.substr(0, hole), after = part.substr(hole + 3);
  if (!key.ends_with(after)) return std::nullopt;
  const size_t digits_end = key.size() - after.size();
  size_t digits = digits_end;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(key[digits - 1]))) --digits;
  if (digits == digits_end || digits_end - digits > 9) return std::nullopt;
  const std::optional<std::string> prefix = prefix_of(key.substr(0, digits), before);
  if (!prefix) return std::nullopt;
  return std::pair{*prefix, std::stoll(key.substr(digits, digits_end - digits))};
}

}  // namespace

std::optional<CheckpointPart> model_part(const CheckpointLayout& layout, const std::string& key) {
  for (const auto& [hub, model] : layout.renames)
    if (const auto prefix = prefix_of(key, hub)) return CheckpointPart{*prefix + model};
  for (const ExpertSplit& s : layout.experts)
    for (size_t j = 0; j < s.parts.size(); ++j)
      if (const auto m = match_part(key, s.parts[j]))
        return CheckpointPart{m->first + s.fused, m->second, static_cast<int64_t>(j),
                              static_cast<int64_t>(s.parts.size())};
  return std::nullopt;
}

Tensor part_view(const Tensor& param, const CheckpointPart& part, const std::string& key) {
  if (part.expert < 0) return param;
  TG_CHECK(param.dim() == 3 && part.expert < param.shape()[0] && param.shape()[1] % part.blocks == 0, "from_pretrained",
           "'", key, "' is expert ", part.expert, " of '", part.name, "', which is ", param.shape(), " (",
           param.dim() == 3 ? param.shape()[0] : 0, " experts)");
  const int64_t rows = param.shape()[1] / part.blocks;
  // Not allocated yet (an expert weight quantised as it streams): a placeholder of the part's shape.
  if (init::is_unallocated(param)) return init::unallocated({rows, param.shape()[2]}, param.options());
  return param.as_strided(
      {rows, param.shape()[2]}, {param.strides()[1], param.strides()[2]},
      param.storage_offset() + part.expert * param.strides()[0] + part.block * rows * param.strides()[1]);
}

std::vector<std::pair<std::string, Tensor>> hub_tensors(const CheckpointLayout& layout, const std::string& name,
                                                        const Tensor& t) {
  for (const auto& [hub, model] : layout.renames)
    if (const auto prefix = prefix_of(name, model)) return {{*prefix + hub, t}};
  for (const ExpertSplit& s : layout.experts) {
    const auto prefix = prefix_of(name, s.fused);
    if (!prefix) continue;
    std::vector<std::pair<std::string, Tensor>> out;
    const int64_t blocks = static_cast<int64_t>(s.parts.size());
    for (int64_t e = 0; e < t.shape()[0]; ++e)
      for (int64_t j = 0; j < blocks; ++j) {
        std::string key = s.parts[j];
        key.replace(key.find("{e}"), 3, std::to_string(e));
        out.emplace_back(*prefix + key, part_view(t, {name, e, j, blocks}, key));
      }
    return out;
  }
  return {{name, t}};
}

}  // namespace tg::nn::detail
