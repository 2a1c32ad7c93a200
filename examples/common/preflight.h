// What lora_finetune settles before the model loads (minutes for a large one): the LoRA targets
// (checked against the folder's safetensors headers), --out (locked; another run's files refused),
// the memory the run will take, and a resumed checkpoint's base. Each refusal is a UsageError
// naming the flag and the way out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "examples/common/flags.h"
#include "train/memory_estimate.h"
#include "train/output_dir.h"

namespace examples {

// --targets: the names given (each must name a Linear layer of the folder's weights), all-linear,
// or auto: peft's default for the family config.json names (none: refused, naming the family).
// Empty with --full.
std::vector<std::string> lora_targets(const Flags& flags, const std::string& base, bool full);

// --out, locked while this process lives (a second run into it fails at once, naming this one's
// pid); for a fresh run refused while it holds another run's files unless --overwrite-output-dir,
// which removes them (and this program's adapter, model and merged outputs).
std::shared_ptr<tg::train::OutputDirLock> claim_out(const std::string& out, bool overwrite, bool fresh);

// The tiled MLP's chunk check_memory proposes (tokens).
constexpr int64_t kTiledMlpChunk = 8192;

// The run's memory plan in one line; refused, with the longest --seq that fits and the remedies
// (each with its estimate), when `device` has less available, or when the offloaded activations
// exceed the host's available memory.
void check_memory(const std::string& base, const tg::train::MemoryEstimateOptions& options, tg::Device device);

// --resume: refused when the checkpoint's adapter was trained on another base than --base
// (peft::adapter_base_mismatch), unless `ignore`.
void check_checkpoint_base(const std::string& checkpoint, const std::string& base, bool ignore);

}  // namespace examples
