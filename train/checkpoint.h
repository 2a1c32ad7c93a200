// The Trainer's checkpoints: <output_dir>/checkpoint-<step>/ holds training_state.safetensors
// (the trainable parameters "param/<name>", the optimizer state "optim/<key>", and in the
// metadata the step, the default generator's state and the caller's entries: arguments, data
// fingerprint, data position), trainer_state.json (the log history, for people) and, for a LoRA
// model, the adapter in peft's format. training_state.safetensors is written last, atomically:
// a folder without it is an interrupted save and is never resumed from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace tg::train {

using CheckpointMetadata = std::map<std::string, std::string>;
inline constexpr const char* kTrainingStateFile = "training_state.safetensors";

void save_training_state(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                         const CheckpointMetadata& extra);
// The caller's entries of a training state (to check before loading it).
CheckpointMetadata training_state_metadata(const std::string& path);
// Restores the trainable parameters, the optimizer and the default generator; returns the step.
// tg::Error when the file does not fit the model (a parameter missing or mis-shaped).
int64_t load_training_state(const std::string& path, nn::Module& model, optim::Optimizer& opt);

std::string checkpoint_dir(const std::string& output_dir, int64_t step);
// The complete checkpoints of output_dir (those with a training state), oldest first.
std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string& output_dir);
// Removes the oldest complete checkpoints until `limit` remain (0: keeps all).
void rotate_checkpoints(const std::string& output_dir, int64_t limit);

}  // namespace tg::train
