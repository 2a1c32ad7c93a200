// A JSONL training file from any bytes, tokenized byte by byte: a tg::Error (naming its line), or
// examples whose labels are the ids or -100, packed and padded into rows of any length.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data/dataset.h"
#include "fuzz/fuzz_scratch.h"
#include "io/json.h"

namespace {

// A byte-level BPE without merges: id = the byte, EOS 256.
const tg::data::Tokenizer& byte_tokenizer(const std::string& dir) {
  static const tg::data::Tokenizer tok = [&] {
    tg::json::Value vocab = tg::json::Value::object();
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      std::string s;
      if (c < 0x80) s += static_cast<char>(c);
      else s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
      vocab.set(s, b);
    }
    const std::string json = R"({"added_tokens": [{"id": 256, "content": "<eos>", "special": true}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
        "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "merges": [], "vocab": )" + tg::json::dump(vocab) + "}}";
    std::ofstream(dir + "/tokenizer.json") << json;
    std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<eos>"})";
    return tg::data::Tokenizer::from_pretrained(dir);
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz_scratch_dir("jsonl");
  const tg::data::Tokenizer& tok = byte_tokenizer(dir);
  fuzz_write(dir + "/data.jsonl", data, size);
  std::shared_ptr<const tg::data::TokenCorpus> corpus;
  for (bool binary : {false, true}) {
    try {
      corpus = tg::data::tokenize_jsonl_file(dir + "/data.jsonl", tok, {.allow_binary = binary, .warn = [](const std::string&) {}});
    } catch (const tg::Error&) {
      continue;
    }
    std::vector<int32_t> ids(static_cast<size_t>(corpus->size())), labels(ids.size());
    corpus->read(0, corpus->size(), ids.data(), labels.data());
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] > 256 || (labels[i] != ids[i] && labels[i] != tg::data::kIgnoreIndex)) std::abort();
    for (auto layout : {tg::data::Layout::Pack, tg::data::Layout::Pad}) {
      const tg::data::SequenceDataset rows(corpus, 2 + static_cast<int64_t>(size % 7), layout, 256);
      if (rows.rows() > 0) rows.batch(static_cast<int64_t>(size % 5), 3, size, tg::Device::cpu());
    }
  }
  return 0;
}
