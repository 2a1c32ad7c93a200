// What a Tokenizer holds (internal to data/: data/tokenizer.h is the API).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/detail/utf8.h"
#include "data/detail/hf_tokenizer.h"
#include "data/detail/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"

namespace tg::data {

struct Tokenizer::Impl {
  std::unique_ptr<hf::HfTokenizer> hf;
  std::unique_ptr<sp::SpTokenizer> sp;
  std::optional<int32_t> bos, eos, pad;
  std::string description;
  std::optional<ChatTemplate> chat_template;
  std::string origin;  // the folder or file, for errors
  uint64_t serial = next_serial();  // names this tokenizer's word caches; never reused

  static uint64_t next_serial() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  // The calling thread's cache of this tokenizer's words.
  hf::WordCache& cache() const {
    thread_local std::unordered_map<uint64_t, hf::WordCache> caches;
    if (caches.size() > 8 && !caches.count(serial)) caches.clear();  // tokenizers long gone
    return caches[serial];
  }
  void encode(std::string_view text, bool add_special, std::vector<int32_t>& out) const {
    std::string repaired;
    if (!utf8::is_valid(text)) text = repaired = utf8::repair(text);
    if (hf) hf->encode(text, add_special, out, &cache());
    else sp->encode(text, add_special, out);
  }
};

}  // namespace tg::data
