// GRPO's reward functions: C++ callbacks scoring one completion of a prompt (TRL's reward_funcs,
// one call a completion), and built-ins for verifiable tasks. A function that throws, or returns
// NaN or an infinity, stops the step with a tg::Error naming the function, the prompt's row and
// the completion.
//
//   tg::train::RewardFunction says_a{"says_a", [](const tg::train::RewardInput& in) {
//     return in.completion.starts_with(" a") ? 1.0 : 0.0;
//   }};
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "data/preference.h"

namespace tg::train {

struct RewardInput {
  const data::PromptExample& prompt;  // its ids, its text and its JSONL row ("answer", ...)
  std::string_view completion;        // decoded, special tokens skipped (TRL's completions)
  std::span<const int32_t> completion_ids;
  bool terminated;  // ended by EOS (else cut at max_completion_length)
};

struct RewardFunction {
  std::string name;  // logged as rewards/<name>/mean and rewards/<name>/std
  std::function<double(const RewardInput&)> fn;
};

namespace rewards {
// 1 when the completion equals the prompt row's string `field`, both trimmed of white space; else 0.
RewardFunction exact_match(const std::string& field = "answer");
// 1 when `pattern` (data::TextPattern: PCRE2, Python-like) matches somewhere in the completion; else 0.
RewardFunction regex_match(const std::string& pattern);
// -scale * (completion tokens) / max_tokens: a pull towards short answers.
RewardFunction length_penalty(int64_t max_tokens, double scale = 1.0);
}  // namespace rewards

}  // namespace tg::train
