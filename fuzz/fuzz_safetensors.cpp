// safetensors::deserialize on any bytes: a tg::Error, or tensors that serialize and read back
// to the same names, dtypes, shapes, bytes and metadata.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "io/safetensors.h"

namespace {

bool same(const tg::Tensor& a, const tg::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::safetensors::Loaded first;
  try {
    first = tg::safetensors::deserialize(data, size);
  } catch (const tg::Error&) {
    return 0;
  }
  const std::vector<uint8_t> bytes = tg::safetensors::serialize(first.tensors, first.metadata);
  const tg::safetensors::Loaded back = tg::safetensors::deserialize(bytes.data(), bytes.size());
  if (back.metadata != first.metadata || back.tensors.size() != first.tensors.size()) std::abort();
  for (const auto& [name, t] : first.tensors) {
    auto it = back.tensors.find(name);
    if (it == back.tensors.end() || !same(t, it->second)) std::abort();
  }
  return 0;
}
