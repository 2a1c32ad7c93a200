// nn::from_pretrained's speed and host memory (issue 34): writes a bfloat16 Llama folder of a
// bench/real_llama.h config with save_pretrained (once; kept for the next run unless --rewrite),
// then times reading its files (page cache warm: one untimed pass first) and
// from_pretrained(dir, {bf16, device}) for each of --devices, with the process's peak RSS over each
// load (VmHWM of /proc/self/status, reset through /proc/self/clear_refs before each load; where the
// kernel refuses the reset the row's peak is the process's and says so on stdout: run one device a
// process then). Rows as bench/results/load.json: config, device, folder_bytes, seconds,
// read_seconds, peak_rss_mib (and rss_before_mib, largest_file_bytes, files).
// --quant none,nf4 also times the QLoRA load (options.quantization: every Linear but the head
// quantised to NF4 as it streams), with the device's peak of live tensors beside the peak RSS.
// --layers N makes the config N decoder layers deep (a smaller folder of the same shapes).
// With --construct, instead times building the config's model with its random init
// (LlamaForCausalLM(config, gen), float32 on the CPU, as a user does before .to(device)): rows of
// bench "construct_bench": config, parameters, seconds, threads, peak_rss_mib.
//   load_bench --config llama-1b --devices cpu,cuda --json out/load.json
//   load_bench --config llama3.2-1b --construct true
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/real_llama.h"
#include "core/cuda/runtime.h"
#include "core/memory.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "nn/models/pretrained.h"
#include "tapegrad.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A field of /proc/self/status in MiB ("VmHWM", "VmRSS"); -1 where there is none.
double status_mib(const std::string& field) {
  const std::optional<int64_t> kib = examples::proc_status_kib(field);
  return kib ? static_cast<double>(*kib) / 1024.0 : -1;
}

// Resets VmHWM to the current RSS; false where the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Every byte of `files`, in 64 MiB reads; the bytes read.
int64_t read_all(const std::vector<fs::path>& files) {
  constexpr size_t kChunk = 64 << 20;
  static const std::unique_ptr<char[]> buf(new char[kChunk]);  // one buffer, its pages touched by the warm-up
  int64_t total = 0;
  for (const fs::path& p : files) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    TG_CHECK(f != nullptr, "load_bench", "cannot open ", p.string());
    for (size_t n; (n = std::fread(buf.get(), 1, kChunk, f)) > 0;) total += static_cast<int64_t>(n);
    std::fclose(f);
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("load_bench", "Times nn::from_pretrained of a bf16 Llama folder against reading its files.");
  flags.add("config", "llama-1b", "a bench/real_llama.h config: tiny, small, bench-135m, llama-1b, llama3-8b")
      .add("layers", "0", "decoder layers (0: the config's; fewer make a smaller folder of the same shapes)")
      .add("dir", "", "the folder (default: /tmp/tg_load_bench/<config>); written when it has no config.json")
      .add("rewrite", "false", "write the folder even when it exists")
      .add("max-shard-bytes", "5000000000", "save_pretrained's shard size (transformers' default 5GB; 0: one file)")
      .add("devices", "cpu", "where to load: cpu and/or cuda")
      .add("quant", "none", "none and/or nf4 (QLoRA's load: quantised as it streams)")
      .add("dtype", "bf16", "the parameters' dtype: bf16 (the files': no conversion) or f32 (converted on the way)")
      .add("construct", "false", "time building the model with its random init instead of loading it")
      .add("json", "", "also write the rows to this file (bench/results/load.json's rows)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    nn::LlamaConfig c = bench::bench_llama(flags.str("config")).config;
    const int64_t layers = flags.integer("layers", 0, kMaxLayers);
    if (layers) c.num_hidden_layers = layers;
    const std::string config = flags.str("config") + (layers ? "-" + std::to_string(layers) + "layers" : "");
    TG_CHECK(flags.str("dtype") == "bf16" || flags.str("dtype") == "f32", "load_bench", "--dtype wants bf16 or f32, got '",
             flags.str("dtype"), "'");
    const DType dtype = flags.str("dtype") == "bf16" ? kBFloat16 : kFloat32;
    const std::string dir = flags.str("dir").empty() ? "/tmp/tg_load_bench/" + config : flags.str("dir");
    std::vector<Device> devices;
    for (const std::string& d : flags.list("devices")) {
      if (d != "cpu" && d != "cuda") throw examples::UsageError("--devices wants cpu and/or cuda, got '" + d + "'\n" + flags.usage());
      devices.push_back(d == "cuda" ? Device::cuda() : Device::cpu());
    }
    if (flags.boolean("construct")) {
      bench::JsonRows rows("construct_bench", bench::machine(Device::cpu()));
      reset_peak_rss();
      Generator gen(0);
      const auto t0 = std::chrono::steady_clock::now();
      auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
      const double s = seconds_since(t0), peak = status_mib("VmHWM");
      std::printf("%s: built with its random init (%.3g parameters, float32) in %.2f s on %d threads, peak RSS %.0f MiB\n",
                  config.c_str(), static_cast<double>(c.num_parameters()), s, get_num_threads(), peak);
      rows.add()
          .str("config", config)
          .num("parameters", static_cast<double>(c.num_parameters()), 12)
          .num("seconds", s, 5)
          .num("threads", get_num_threads())
          .num("peak_rss_mib", peak, 6);
      rows.write(flags.str("json"));
      return 0;
    }
    if (flags.boolean("rewrite") || !fs::exists(fs::path(dir) / "config.json")) {
      const auto t0 = std::chrono::steady_clock::now();
      auto model = bench::fast_llama(c, kBFloat16, Device::cpu());
      fs::create_directories(fs::path(dir).parent_path());
      nn::save_pretrained(*model, dir, {.max_shard_bytes = flags.integer("max-shard-bytes")});
      std::printf("wrote %s (%.3g parameters, bf16) in %.1f s\n", dir.c_str(), static_cast<double>(c.num_parameters()),
                  seconds_since(t0));
    }
    empty_cache(Device::cpu());
    std::vector<fs::path> files;
    int64_t folder_bytes = 0, largest = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      files.push_back(e.path());
      folder_bytes += static_cast<int64_t>(e.file_size());
      largest = std::max(largest, static_cast<int64_t>(e.file_size()));
    }
    read_all(files);  // the page cache warm
    auto t_read = std::chrono::steady_clock::now();
    TG_CHECK(read_all(files) == folder_bytes, "load_bench", "read fewer bytes than ", dir, " holds");
    const double read_s = seconds_since(t_read);
    std::printf("%s: %zu files, %.3f GB (largest %.3f GB); reading them (warm): %.3f s, %.2f GB/s\n", dir.c_str(),
                files.size(), folder_bytes / 1e9, largest / 1e9, read_s, folder_bytes / 1e9 / read_s);
    std::printf("%-10s %-6s %-5s %10s %10s %8s %14s %14s %16s\n", "config", "device", "quant", "load s", "read s",
                "load/read", "peak RSS MiB", "RSS before MiB", "device peak MiB");
    bench::JsonRows rows("load_bench", bench::machine(devices.back()));
    for (const std::string& quant : flags.list("quant"))
    for (const Device& device : devices) {
      if (quant != "none" && quant != "nf4") throw examples::UsageError("--quant wants none and/or nf4, got '" + quant + "'\n");
      const double before = status_mib("VmRSS");
      const bool reset = reset_peak_rss();
      if (!reset) std::printf("note: /proc/self/clear_refs refused: the %s row's peak RSS is the process's\n",
                              device.str().c_str());
      reset_peak_memory_stats(device);
      const size_t live_before = memory_stats(device).bytes_in_use;
      const auto t0 = std::chrono::steady_clock::now();
      nn::PretrainedOptions options{.dtype = dtype, .device = device};
      if (quant == "nf4") options.quantization = {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true};
      std::shared_ptr<nn::Module> model = nn::from_pretrained(dir, options);
      synchronize(device);
      const double load_s = seconds_since(t0), peak = status_mib("VmHWM");
      const double device_peak = (memory_stats(device).peak_bytes - live_before) / 1048576.0;
      model.reset();
      empty_cache(Device::cpu());
      std::printf("%-10s %-6s %-5s %10.3f %10.3f %8.2f %14.0f %14.0f %16.0f\n", config.c_str(),
                  device.is_cuda() ? "cuda" : "cpu", quant.c_str(), load_s, read_s, load_s / read_s, peak, before,
                  device_peak);
      rows.add()
          .str("config", config)
          .str("device", device.is_cuda() ? "cuda" : "cpu")
          .str("quant", quant)
          .num("device_peak_mib", device_peak, 6)
          .str("dtype", dtype_name(dtype))
          .num("folder_bytes", static_cast<double>(folder_bytes), 12)
          .num("largest_file_bytes", static_cast<double>(largest), 12)
          .num("files", static_cast<double>(files.size()))
          .num("seconds", load_s, 5)
          .num("read_seconds", read_s, 5)
          .num("peak_rss_mib", peak, 6)
          .num("rss_before_mib", before, 6)
          .boolean("peak_is_the_loads", reset);
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
