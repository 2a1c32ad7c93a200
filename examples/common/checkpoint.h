// Training checkpoints for the examples: one safetensors file holding the trainable
// parameters ("param/<name>"), the optimizer state ("optim/<key>") and, in its metadata, the
// step, the state of the default generator (dropout) and whatever the caller adds (lora_finetune:
// its training flags, so --resume can refuse a changed one). The data order is a function of the
// seed and the step (data::SequenceDataset), so --resume continues bit-exactly. The file is
// written atomically: an interrupted save leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace examples {

using CheckpointMetadata = std::map<std::string, std::string>;

void save_training_checkpoint(const std::string& path, const tg::nn::Module& model, const tg::optim::Optimizer& opt,
                              int64_t step, const CheckpointMetadata& extra = {});
// The caller's metadata of a checkpoint (to check before loading it).
CheckpointMetadata checkpoint_metadata(const std::string& path);
// Restores what save_training_checkpoint wrote into `model` and `opt`; returns the step.
// tg::Error when the file does not match the model (a parameter missing or mis-shaped).
int64_t load_training_checkpoint(const std::string& path, tg::nn::Module& model, tg::optim::Optimizer& opt);

}  // namespace examples
