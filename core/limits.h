// Bounds on the sizes that come from files and arguments (config.json, TrainingArguments, a
// dataset's rows), checked before anything of that size is allocated: far above what real
// checkpoints and runs use, low enough that a hostile value is refused with its name instead of
// a std::bad_alloc or gigabytes used first. What these bound together (RoPE tables, a batch) is
// checked against the host's memory (check_host_memory).
#pragma once

#include <cstdint>
#include <string>

namespace tg {

// Positions of a sequence: max_position_embeddings, n_positions, a dataset's seq (Llama 4's 10M
// context fits).
inline constexpr int64_t kMaxContext = int64_t{1} << 24;
// Decoder layers of a model: num_hidden_layers, n_layer.
inline constexpr int64_t kMaxLayers = 1024;
// Rows of a batch, and micro-batches of an optimizer step (gradient accumulation).
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;
// Optimizer steps of a run (so that steps x micro-batches x rows stay far inside int64).
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

// The host's physical memory in bytes (UINT64_MAX where the system does not say).
uint64_t host_memory_bytes();
// tg::Error from `op` when `bytes` (of `what`: "the cos and sin tables of 16777216 positions x
// 128 rotary dims") exceed the host's memory: a size no allocation can satisfy, refused by its
// name before any of it is allocated. A double: products of sizes from files may pass 2^64.
void check_host_memory(double bytes, const char* op, const std::string& what);

}  // namespace tg
