// safetensors (https://github.com/huggingface/safetensors), the format of Hugging Face checkpoints
// and peft adapters: F64, F32, BF16, I64, I32, BOOL read and written, F16 read as float32. Reading
// validates everything (tg::Error naming the file and the problem, never a crash); FileReader reads
// a file tensor by tensor; writing is atomic (io/file.h). The layout: docs/api.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "io/file.h"

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

// One tensor of a file's header.
struct TensorInfo {
  std::string name;
  std::string code;  // the file's dtype: "BF16", "F16", ...
  DType dtype;       // the tensor it is read as (F16: kFloat32)
  Shape shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data area
};
struct Header {
  std::vector<TensorInfo> tensors;  // in the order of their data
  Metadata metadata;
  uint64_t data_start = 0;  // the data area's offset in the file
};
// Reads bytes [offset, offset + n) of the file into `out`.
using RangeReader = std::function<void(uint64_t offset, void* out, size_t n)>;
// Reads and checks the header of a file of `file_size` bytes, as deserialize does (the same
// errors): the header length, the JSON, every dtype, shape and data_offsets, and that the
// tensors tile the data area.
Header read_header(const RangeReader& read, uint64_t file_size, const std::string& source);

// A safetensors file read tensor by tensor (from_pretrained's shards): the header read and
// checked once, then each tensor's bytes read from the file straight into a tensor of any dtype,
// device and strides, through one reused host buffer of at most a few chunks, so a shard is
// never held in memory whole.
class FileReader {
 public:
  explicit FileReader(io::File file);
  const Header& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  // Reads tensor `t` of the header into `dst` (t's shape), converted as copy_ converts;
  // `progress` is told the file bytes of each chunk read. To a GPU the bytes go through `upload`'s
  // pinned buffers (made for the call when null), each read overlapping the previous chunk's copy;
  // a conversion then runs on the device.
  void read(const TensorInfo& t, const Tensor& dst, const std::function<void(size_t)>& progress = {},
            HostToDevice* upload = nullptr);
  // Tensor `t` as a host tensor of its own memory, copied there by the kernel (io::File::
  // copy_to_memory): the fastest way into fresh memory, and the file is not read again. Undefined
  // where its bytes are not its elements (F16, BOOL), it is empty, or the system refuses (read()
  // into a tensor then).
  Tensor owned(const TensorInfo& t);

 private:
  void read_parallel(uint64_t offset, void* out, uint64_t n);
  void read_to_device(const TensorInfo& t, const Tensor& dst, HostToDevice& up, const std::function<void(size_t)>& told);

  io::File file_;
  Header header_;
  Tensor staging_, widened_;  // the file's bytes of a chunk; F16 and BOOL chunks decoded
};

}  // namespace tg::safetensors
