// Validation loss of a causal LM on a dataset's held-out split.
#pragma once

#include <cstdint>
#include "core/device.h"
#include "examples/common/data.h"
#include "nn/llama.h"

namespace examples {

// Mean loss over `batches` fixed validation batches (the same ones every call), without
// recording a graph; the model is left in training mode.
double evaluate(tg::nn::LlamaForCausalLM& model, const ByteDataset& data, int64_t batch, int64_t seq, int batches,
                tg::Device device);

}  // namespace examples
