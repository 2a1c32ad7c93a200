// A chat template from any bytes, parsed, then rendered with a small budget over a few
// conversations with and without the generation prompt: a tg::Error, or valid UTF-8 within the
// budget whose {% generation %} spans lie inside it; never a crash, a hang or a blow-up.
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "core/detail/utf8.h"
#include "core/error.h"
#include "data/chat_template.h"

namespace {

using tg::data::ChatMessage;

const std::vector<std::vector<ChatMessage>> kConversations = {
    {},
    {{"user", "Hi"}},
    {{"system", "Be brief."}, {"user", "2 + 2?"}, {"assistant", "4."}, {"user", "Why?"}, {"assistant", "Arithmetic."}},
    {{"user", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\n\t"}, {"assistant", " "}, {"tool", ""}},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<tg::data::ChatTemplate> chat_template;
  try {
    chat_template.emplace(std::string(reinterpret_cast<const char*>(data), size),
                          std::vector<std::pair<std::string, std::string>>{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  } catch (const tg::Error&) {
    return 0;
  }
  std::tm now{};
  now.tm_year = 125, now.tm_mon = 2, now.tm_mday = 9, now.tm_hour = 14, now.tm_min = 5, now.tm_wday = 0, now.tm_yday = 67;
  // Small enough that a runaway template stops in milliseconds; a real one still renders these.
  const tg::data::ChatTemplateLimits limits{.steps = 50000, .items = 5000, .bytes = 1 << 16};
  for (const std::vector<ChatMessage>& messages : kConversations)
    for (bool prompt : {false, true}) {
      std::vector<std::pair<size_t, size_t>> spans;
      try {
        const std::string out = chat_template->render(messages, {.add_generation_prompt = prompt, .limits = limits}, &now, spans);
        if (static_cast<int64_t>(out.size()) > limits.bytes || !tg::utf8::is_valid(out)) std::abort();
        for (const auto& [begin, end] : spans)
          if (begin > end || end > out.size()) std::abort();
      } catch (const tg::Error&) {
      }
    }
  return 0;
}
