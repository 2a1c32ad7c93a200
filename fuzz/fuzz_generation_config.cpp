// generation_config.json from any bytes, read as GenerationConfig::from_pretrained reads a
// folder: a tg::Error, or a config that validates.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_scratch.h"
#include "nn/generation/generation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz_scratch_dir("generation_config");
  fuzz_write(dir + "/generation_config.json", data, size);
  tg::nn::GenerationConfig config;
  try {
    config = tg::nn::GenerationConfig::from_pretrained(dir);
  } catch (const tg::Error&) {
    return 0;
  }
  try {
    config.validate();
  } catch (const tg::Error&) {
    std::abort();  // from_pretrained returned a config generate would refuse
  }
  return 0;
}
