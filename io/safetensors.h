// safetensors (https://github.com/huggingface/safetensors), the format Hugging Face checkpoints
// and peft adapters use:
//   8 bytes    little-endian uint64 N, the header length
//   N bytes    JSON: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                     ..., "__metadata__": {"<key>": "<string>"}}   (padded with spaces)
//   the rest   the data area: every tensor's bytes, row-major, little-endian; offsets are
//              relative to it and the tensors tile it exactly, without gaps or overlaps.
// dtypes: F64, F32, BF16, I64, I32, BOOL are read and written; F16 is read and widened to
// float32 (tapegrad has no float16 tensors).
//
// Reading validates everything and throws tg::Error naming the file and the problem; no input,
// however corrupt, crashes. Writing is atomic (see io/file.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg::io {
class FolderWriter;
}

namespace tg::safetensors {

using TensorMap = std::map<std::string, Tensor>;  // ordered by name, as the data is written
using Metadata = std::map<std::string, std::string>;

struct Loaded {
  TensorMap tensors;
  Metadata metadata;
};

// The file's bytes (safetensors.torch.save).
std::vector<uint8_t> serialize(const TensorMap& tensors, const Metadata& metadata = {});
// Parses bytes (safetensors.torch.load); `source` names them in errors (a path or "<bytes>").
Loaded deserialize(const uint8_t* data, size_t size, const std::string& source = "<bytes>",
                   Device device = Device::cpu());

// safetensors.torch.save_file / load_file. Tensors may live on any device.
void save_file(const TensorMap& tensors, const std::string& path, const Metadata& metadata = {});
TensorMap load_file(const std::string& path, Device device = Device::cpu());
// Writes file `name` of a folder saved as a unit (io::write_folder_atomic).
void write_file(io::FolderWriter& folder, const std::string& name, const TensorMap& tensors,
                const Metadata& metadata = {});
Loaded load_file_with_metadata(const std::string& path, Device device = Device::cpu());

// "F32" for kFloat32, ...
const char* dtype_code(DType dtype);

}  // namespace tg::safetensors
