// Training checkpoints for the examples: one safetensors file holding the trainable
// parameters ("param/<name>"), the optimizer state ("optim/<key>") and, in its metadata, the
// step, the lr and the states of the data generator and of the default generator (dropout), so
// --resume continues bit-exactly. The file is written
// atomically: an interrupted save leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace examples {

void save_training_checkpoint(const std::string& path, const tg::nn::Module& model, const tg::optim::Optimizer& opt,
                              int64_t step, const tg::Generator& data_gen);
// Restores what save_training_checkpoint wrote into `model`, `opt` and `data_gen`; returns the
// step. tg::Error when the file does not match the model (a parameter missing or mis-shaped).
int64_t load_training_checkpoint(const std::string& path, tg::nn::Module& model, tg::optim::Optimizer& opt,
                                 tg::Generator& data_gen);

}  // namespace examples
