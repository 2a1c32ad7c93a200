// A tokenizer.json, then after a "\n#TEXT#\n" line the text to encode: loading is a tg::Error or
// a tokenizer whose encodings hold only ids it can decode, and whose decode of any of its ids
// (the encoding, every id up to vocab_size) is a tg::Error for a gap only, never a crash.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz/fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz_scratch_dir("tokenizer") + "/tokenizer.json";
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find("\n#TEXT#\n");
  const std::string_view json = input.substr(0, sep);
  const std::string_view text = sep == std::string_view::npos ? std::string_view("Hello world") : input.substr(sep + 8);
  fuzz_write(path, reinterpret_cast<const uint8_t*>(json.data()), json.size());
  std::optional<tg::data::Tokenizer> tok;
  try {
    tok = tg::data::Tokenizer::from_file(path);
  } catch (const tg::Error&) {
    return 0;
  }
  if (tok->vocab_size() > (int64_t{1} << 22)) return 0;  // a valid, merely large vocabulary: too slow to sweep
  for (bool special : {true, false}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text, special);
    } catch (const tg::Error&) {
      continue;  // e.g. a regex over its limits
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    for (bool skip : {false, true}) {
      try {
        tok->decode(ids, skip);
      } catch (const tg::Error&) {  // an encoding may hold an id with no string (a post-processor's)
      }
    }
  }
  for (int32_t id = 0; id < tok->vocab_size() && id < 4096; ++id) {
    try {
      const int32_t one[] = {id};
      tok->decode(one);
      tok->is_special(id);
    } catch (const tg::Error&) {  // a gap in the ids
    }
  }
  return 0;
}
