// A sentencepiece tokenizer.model from any bytes: a tg::Error, or a tokenizer that encodes and
// decodes a few texts, its ids inside its vocabulary.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz/fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz_scratch_dir("sentencepiece") + "/tokenizer.model";
  fuzz_write(path, data, size);
  std::optional<tg::data::Tokenizer> tok;
  try {
    tok = tg::data::Tokenizer::from_file(path);
  } catch (const tg::Error&) {
    return 0;
  }
  for (const char* text : {"Hello world", "", " caf\xC3\xA9 \xF0\x9F\x98\x80 12\n\t", "\xff\xfe invalid"}) {
    try {
      const std::vector<int32_t> ids = tok->encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) std::abort();
      tok->decode(ids, true);
    } catch (const tg::Error&) {
    }
  }
  return 0;
}
