#include "train/grpo_rewards.h"

#include "core/error.h"
#include "data/text_pattern.h"

namespace tg::train::rewards {
namespace {

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string_view() : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

RewardFunction exact_match(const std::string& field) {
  return {"exact_match", [field](const RewardInput& in) {
            const json::Value* want = in.prompt.row.find(field);
            TG_CHECK(want && want->is_string(), "rewards::exact_match", in.prompt.where, " has no string \"", field,
                     "\" to compare the completion with");
            return trimmed(in.completion) == trimmed(want->as_string()) ? 1.0 : 0.0;
          }};
}

RewardFunction regex_match(const std::string& pattern) {
  const data::TextPattern p(pattern);
  return {"regex_match", [p](const RewardInput& in) { return p.search(in.completion) ? 1.0 : 0.0; }};
}

RewardFunction length_penalty(int64_t max_tokens, double scale) {
  TG_CHECK(max_tokens >= 1, "rewards::length_penalty", "max_tokens must be >= 1, got ", max_tokens);
  return {"length_penalty", [max_tokens, scale](const RewardInput& in) {
            return -scale * static_cast<double>(in.completion_ids.size()) / static_cast<double>(max_tokens);
          }};
}

}  // namespace tg::train::rewards
