// The logits processors nn::generate applies to one sequence's next-token scores (float32 on the
// host, one entry per vocabulary id), each as transformers' generation/logits_process.py:
//   repetition_penalty -> (sampling:) temperature -> top_k -> top_p -> a draw from the softmax.
// A removed token gets -inf.
#pragma once

#include <cstdint>
#include <span>

namespace tg::nn {

// RepetitionPenaltyLogitsProcessor: each id in `tokens` (the sequence so far) has its score
// divided by `penalty` when positive, multiplied when negative (so > 1 discourages repeats).
void apply_repetition_penalty(std::span<float> scores, std::span<const int32_t> tokens, double penalty);
// TemperatureLogitsWarper: scores / temperature (> 0).
void apply_temperature(std::span<float> scores, double temperature);
// TopKLogitsWarper: keeps every score >= the k-th largest (ties kept); k 0 or >= the vocabulary: all.
void apply_top_k(std::span<float> scores, int64_t k);
// TopPLogitsWarper: keeps the smallest set of most likely tokens whose probability reaches top_p
// (the most likely one always); top_p 1: all.
void apply_top_p(std::span<float> scores, double top_p);
// The first id of the largest score; tg::Error naming `who` when a score is NaN.
int32_t argmax_token(std::span<const float> scores, const char* who);
// A draw from softmax(scores) by one uniform u in [0, 1): the id where u * total falls in the
// cumulative probabilities (vocabulary order). tg::Error naming `who` when a score is NaN or none
// is finite.
int32_t sample_token(std::span<const float> scores, float u, const char* who);

}  // namespace tg::nn
