// json::parse on any bytes: a tg::Error or a value whose dump parses back to the same dump.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::json::Value v;
  try {
    v = tg::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const tg::Error&) {
    return 0;
  }
  for (int indent : {-1, 2}) {
    const std::string once = tg::json::dump(v, indent, indent > 0);
    if (tg::json::dump(tg::json::parse(once), indent, indent > 0) != once) std::abort();
  }
  return 0;
}
