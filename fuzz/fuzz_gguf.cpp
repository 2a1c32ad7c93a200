// gguf::parse_header on any bytes: a tg::Error, or a header whose metadata and tensors, written
// again (with the tensors' bytes from the input), read back the same.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "fuzz/fuzz_scratch.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::gguf::Header first;
  try {
    first = tg::gguf::parse_header(data, size);
  } catch (const tg::Error&) {
    return 0;
  }
  std::vector<tg::gguf::TensorData> tensors;
  for (const tg::gguf::TensorInfo& t : first.tensors)
    tensors.push_back({t, [&, t](const tg::io::ChunkWriter& out) { out(data + first.data_start + t.offset, t.nbytes()); }});
  static const std::string path = fuzz_scratch_dir("gguf") + "/rewritten.gguf";
  try {
    tg::gguf::write_file(path, first.metadata, tensors);
  } catch (const tg::Error&) {
    return 0;  // what llama.cpp could not read either (a name over 63 bytes, a bad alignment type)
  }
  const tg::gguf::Reader back(path);
  if (!(back.header().metadata == first.metadata) || back.header().tensors.size() != first.tensors.size()) std::abort();
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    const tg::gguf::TensorInfo &a = first.tensors[i], &b = back.header().tensors[i];
    if (a.name != b.name || a.ne != b.ne || a.type != b.type) std::abort();
    const std::vector<uint8_t> bytes = back.bytes(b);
    if (!bytes.empty() && std::memcmp(bytes.data(), data + first.data_start + a.offset, bytes.size()) != 0) std::abort();
  }
  return 0;
}
