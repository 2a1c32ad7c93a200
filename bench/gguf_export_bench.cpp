// nn::save_gguf's speed and host memory (issue 51): writes a bfloat16 Llama folder of a
// bench/real_llama.h config (random weights; once, kept for the next run unless --rewrite), loads it
// as export_gguf does (bf16: the parameters map the files' pages), then for each of --dtypes times
// save_gguf against writing the same number of bytes to the same folder (io::write_file_atomic of
// zeros), with the process's peak RSS over the export (VmHWM, reset through /proc/self/clear_refs)
// beside the folder's bytes and its largest tensor's. The tokenizer is tests/fixtures' llama3 padded
// to the vocabulary (run from the repository's root, or pass --tokenizer). Rows as bench/results/gguf_export.json: config, dtype, gguf_bytes, seconds,
// write_seconds, peak_rss_mib, folder_mib, largest_tensor_mib, threads.
//   gguf_export_bench --config llama3-8b --dtypes f16,q8_0 --json out/gguf_export.json
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/peak_rss.h"
#include "core/memory.h"
#include "bench/real_llama.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "tapegrad.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("gguf_export_bench", "Times nn::save_gguf of a bf16 Llama folder against writing its bytes.");
  flags.add("config", "llama3-8b", "a bench/real_llama.h config: tiny, small, bench-135m, llama-1b, llama3-8b")
      .add("dir", "", "the folder (default: /tmp/tg_gguf_bench/<config>); written when it has no config.json")
      .add("rewrite", "false", "write the folder even when it exists")
      .add("dtypes", "f16,q8_0", "the GGUF types to write: f32, f16, bf16, q8_0")
      .add("tokenizer", "tests/fixtures/tokenizers/llama3", "the tokenizer folder (padded to the vocabulary)")
      .add("vocab", "0", "the vocabulary's size (0: the config's; the tiny configs' 256 is less than any fixture tokenizer)")
      .add("json", "", "also write the rows to this file (bench/results/gguf_export.json's rows)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    const std::string config = flags.str("config");
    std::vector<std::pair<std::string, gguf::TensorType>> dtypes;  // checked before the folder is written
    for (const std::string& name : flags.list("dtypes")) dtypes.emplace_back(name, examples::gguf_dtype_named(name, "dtypes"));
    nn::LlamaConfig c = bench::bench_llama(config).config;
    if (flags.integer("vocab", 0) > 0) c.vocab_size = flags.integer("vocab");
    const std::string dir = flags.str("dir").empty() ? "/tmp/tg_gguf_bench/" + config : flags.str("dir");
    if (flags.boolean("rewrite") || !fs::exists(fs::path(dir) / "config.json")) {
      const auto t0 = std::chrono::steady_clock::now();
      auto model = bench::fast_llama(c, kBFloat16, Device::cpu());
      fs::create_directories(fs::path(dir).parent_path());
      nn::save_pretrained(*model, dir, {.max_shard_bytes = 5000000000});
      std::printf("wrote %s (%.3g parameters, bf16) in %.1f s\n", dir.c_str(), static_cast<double>(c.num_parameters()),
                  seconds_since(t0));
    }
    empty_cache(Device::cpu());  // the written model's memory back to the system, out of the peaks
    int64_t folder_bytes = 0;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) folder_bytes += static_cast<int64_t>(e.file_size());
    const data::Tokenizer tok = data::Tokenizer::from_pretrained(flags.str("tokenizer"));
    std::shared_ptr<nn::CausalLM> model = nn::from_pretrained(dir, {.dtype = kBFloat16, .quiet = true});
    int64_t largest = 0;
    for (const auto& [name, t] : model->named_parameters()) largest = std::max<int64_t>(largest, static_cast<int64_t>(t.nbytes()));
    const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, c.vocab_size);
    const std::string out = (fs::path(dir).parent_path() / (config + ".gguf")).string();
    std::printf("%s: %.2f GB of bf16 (largest tensor %.0f MiB), %d threads\n", dir.c_str(), folder_bytes / 1e9,
                largest / 1048576.0, get_num_threads());
    std::printf("%-10s %-5s %10s %10s %10s %14s %12s\n", "config", "dtype", "GB", "export s", "write s", "peak RSS MiB",
                "folder MiB");
    bench::JsonRows rows("gguf_export_bench", bench::machine(Device::cpu()));
    for (const auto& [name, dtype] : dtypes) {
      const bool reset = bench::reset_peak_rss();
      const auto t0 = std::chrono::steady_clock::now();
      nn::save_gguf(*model, out, {.dtype = dtype, .metadata = vocab});
      const double export_s = seconds_since(t0), peak = bench::status_mib("VmHWM");
      const auto gguf_bytes = static_cast<int64_t>(fs::file_size(out));
      fs::remove(out);
      // The same bytes written through the same atomic writer: what the disk allows.
      const std::vector<char> zeros(size_t{64} << 20, 0);
      const auto t1 = std::chrono::steady_clock::now();
      io::write_file_atomic(out, [&](const io::ChunkWriter& w) {
        for (int64_t left = gguf_bytes; left > 0; left -= static_cast<int64_t>(zeros.size()))
          w(zeros.data(), static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(zeros.size()))));
      });
      const double write_s = seconds_since(t1);
      fs::remove(out);
      std::printf("%-10s %-5s %10.2f %10.2f %10.2f %14.0f %12.0f%s\n", config.c_str(), name.c_str(), gguf_bytes / 1e9,
                  export_s, write_s, peak, folder_bytes / 1048576.0, reset ? "" : "  (peak: the process's)");
      rows.add()
          .str("config", config)
          .str("dtype", name)
          .num("gguf_bytes", static_cast<double>(gguf_bytes), 12)
          .num("seconds", export_s, 5)
          .num("write_seconds", write_s, 5)
          .num("peak_rss_mib", peak, 6)
          .num("folder_mib", folder_bytes / 1048576.0, 6)
          .num("largest_tensor_mib", largest / 1048576.0, 6)
          .num("threads", get_num_threads())
          .boolean("peak_is_the_exports", reset);
    }
    rows.write(flags.str("json"));
  } catch (const examples::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
