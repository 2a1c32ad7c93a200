// The files a program is given, checked before the model loads (minutes for a large one), so
// that a mistyped path or a file of the wrong kind is reported at once, naming its flag.
#pragma once

#include <string>

#include "examples/common/flags.h"

namespace examples {

// --base / --model: a Hugging Face model folder (with config.json) or a toy_transformer
// checkpoint (.safetensors). A missing default path (the toy's) says to run toy_transformer;
// a path the user gave is not told about the toy unless it names a .safetensors file.
void check_model_path(const Flags& flags, const std::string& flag);

// --data / --val: an existing regular file of a kind lora_finetune reads (.jsonl, .bin, text).
// A .json (a JSON array, or JSON Lines under another name), .csv, .tsv, .parquet or .arrow
// file is refused naming the accepted kinds, where it would have been read as plain text.
void check_data_file(const std::string& path, const std::string& flag);

// --adapter: a peft adapter folder (adapter_config.json + adapter_model.safetensors).
void check_adapter_folder(const std::string& path, const std::string& flag);

}  // namespace examples
