// Validation loss of a causal LM on held-out data.
#pragma once

#include <cstdint>
#include "core/device.h"
#include "data/dataset.h"
#include "examples/common/data.h"
#include "nn/llama.h"

namespace examples {

// Mean loss over `batches` fixed validation batches (the same ones every call), without
// recording a graph; the model is left in training mode.
double evaluate(tg::nn::LlamaForCausalLM& model, const ByteDataset& data, int64_t batch, int64_t seq, int batches,
                tg::Device device);

// The logits of a batch: model.forward(ids), or for packed rows (position_ids) each example
// alone (nn::CausalLM::hidden_states with them).
tg::Tensor logits_of(tg::nn::Module& model, const tg::data::Batch& b);

// The loss over the first `batches` batches of `batch` rows of `data` (fewer when it has fewer
// rows), weighted by their target tokens: the mean over every token scored.
double evaluate(tg::nn::Module& model, const tg::data::SequenceDataset& data, int64_t batch, int batches,
                tg::Device device);

}  // namespace examples
