// Tokenizer throughput: encodes the documents of a JSONL file ({"text": ...} a line) with a
// tokenizer.json / tokenizer.model / model folder, single-threaded (one document after another)
// and in parallel over the documents (Tokenizer::encode_batch), and prints one JSON object a
// mode: seconds (median of --repeat), MB/s, tokens and a checksum of every id, which
// bench/tokenizer_bench.py compares with Hugging Face tokenizers' ids in the same run.
//
//   tokenizer_bench --tokenizer folder --docs docs.jsonl [--threads 16] [--repeat 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/parallel.h"
#include "data/tokenizer.h"
#include "examples/common/flags.h"
#include "io/file.h"
#include "io/json.h"

using namespace tg;

namespace {

std::vector<std::string> read_docs(const std::string& path) {
  std::vector<uint8_t> bytes = io::read_file(path);
  std::string all(bytes.begin(), bytes.end());
  std::vector<std::string> docs;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) docs.push_back(json::parse(line).at("text").as_string());
  return docs;
}

// FNV-1a over the ids of every document in order, each document closed by a marker.
uint64_t checksum(const std::vector<std::vector<int32_t>>& ids) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const auto& d : ids) {
    for (int32_t v : d) mix(static_cast<uint32_t>(v));
    mix(0xFFFFFFFFull);
  }
  return h;
}

template <class F>
double median_seconds(int repeat, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("tokenizer_bench", "Encode the documents of a JSONL file, single-threaded and in parallel.");
  flags.add("tokenizer", "", "a model folder, tokenizer.json or tokenizer.model")
      .add("docs", "", "JSONL, one {\"text\": ...} per document")
      .add("threads", "0", "threads of the parallel run (0: all cores)")
      .add("repeat", "3", "timed runs of each mode (the median is reported)")
      .add("special", "false", "add special tokens (BOS/EOS) as the tokenizer does");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    const std::string path = flags.str("tokenizer");
    const data::Tokenizer tok = std::filesystem::is_directory(path) ? data::Tokenizer::from_pretrained(path)
                                                                    : data::Tokenizer::from_file(path);
    const std::vector<std::string> docs = read_docs(flags.str("docs"));
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();
    const int repeat = static_cast<int>(flags.integer("repeat"));
    const bool special = flags.boolean("special");
    if (flags.integer("threads") > 0) set_num_threads(static_cast<int>(flags.integer("threads")));
    const int threads = get_num_threads();

    std::vector<std::vector<int32_t>> ids(docs.size());
    auto single = [&] {
      for (size_t i = 0; i < docs.size(); ++i) ids[i] = tok.encode(docs[i], special);
    };
    auto parallel = [&] { ids = tok.encode_batch(docs, special); };
    single();  // warm: the word caches, as the reference's after its first pass
    for (auto [mode, n] : {std::pair{"single-thread", 1}, {"parallel", threads}}) {
      const double s = median_seconds(repeat, mode == std::string("parallel") ? std::function<void()>(parallel)
                                                                              : std::function<void()>(single));
      size_t tokens = 0;
      for (const auto& d : ids) tokens += d.size();
      std::printf("{\"impl\": \"tapegrad\", \"mode\": \"%s\", \"threads\": %d, \"seconds\": %.6f, \"mb_per_s\": %.3f, "
                  "\"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"checksum\": \"%016llx\", \"tokenizer\": \"%s\"}\n",
                  mode, n, s, static_cast<double>(bytes) / 1e6 / s, docs.size(), bytes, tokens,
                  static_cast<unsigned long long>(checksum(ids)), tok.description().c_str());
    }
    return 0;
  } catch (const examples::UsageError& e) {
    std::cerr << e.what();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
