// nn::generate's speed (issue 26's table): greedy, random prompts of --prompt tokens, exactly
// --new-tokens new ones (no EOS), per batch size; the median of --runs after --warmup, on the host
// clock (generate waits for each step's tokens). The first streamed token marks the end of the
// prefill. bench/generate_bench_torch.py times transformers' generate the same way;
// scripts/gpu/bench.sh generate runs both. --caches: the dynamic KV cache (rows "kv cache"), the
// static one ("static cache": every decode step attends to the whole cache, masked) and the static
// one with the decode step replayed as a CUDA graph ("static cache + cuda graph").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "bench/bench_json.h"
#include "core/cuda/runtime.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "nn/generation/generation.h"
#include "nn/models/llama.h"
#include "tapegrad.h"

using namespace tg;

namespace {


struct Timing {
  double total_s, prefill_s;
};

Timing time_once(nn::Module& model, const std::vector<std::vector<int32_t>>& prompts, const nn::GenerationConfig& cfg) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto first = start;
  bool seen = false;
  const auto out = nn::generate(model, prompts, cfg, [&](int64_t, int32_t) {
    if (!seen) first = clock::now(), seen = true;
  });
  const auto end = clock::now();
  for (size_t b = 0; b < out.size(); ++b)
    if (out[b].size() != prompts[b].size() + static_cast<size_t>(cfg.max_new_tokens))
      throw std::runtime_error("sequence " + std::to_string(b) + " stopped early");
  return {std::chrono::duration<double>(end - start).count(), std::chrono::duration<double>(first - start).count()};
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("generate_bench", "Times nn::generate (greedy) on a Llama config with random weights.");
  flags.add("config", "bench-135m", "tiny | small | bench-135m")
      .add("device", "cuda", "cpu | cuda | auto")
      .add("dtype", "bf16", examples::kDtypeHelp)
      .add("batches", "1,32", "batch sizes")
      .add("prompt", "128", "prompt tokens per sequence")
      .add("new-tokens", "256", "new tokens per sequence")
      .add("warmup", "1", "untimed runs per batch size")
      .add("runs", "3", "timed runs per batch size (the median is reported)")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("caches", "dynamic", "dynamic, static and/or graph (static + a CUDA graph of the decode step)")
      .add("json", "", "also write the rows to this file (bench/results/generate.json's rows)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    if (flags.integer("threads") > 0) set_num_threads(static_cast<int>(flags.integer("threads")));
    const Device device = examples::device_flag(flags);
    const DType dtype = examples::dtype_flag(flags);
    const nn::LlamaConfig c = nn::LlamaConfig::by_name(flags.str("config"));
    const int64_t P = flags.integer("prompt"), N = flags.integer("new-tokens");
    Generator gen(0);
    auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
    model->to(dtype, device);
    for (const std::string& cache : flags.list("caches"))
      if (cache != "dynamic" && cache != "static" && cache != "graph")
        throw std::runtime_error("--caches wants dynamic, static or graph, got '" + cache + "'");
    bench::JsonRows rows("generate_bench", bench::machine(device));
    std::printf("%-10s %-6s %-8s %5s %6s %6s %10s %12s %11s %14s\n", "config", "dtype", "cache", "batch", "prompt", "new",
                "tok/s", "ms/token", "prefill ms", "decode ms/tok");
    for (const std::string& b : flags.list("batches")) {
      const std::optional<int64_t> parsed = io::parse_integer<int64_t>(b);
      if (!parsed || *parsed < 1 || *parsed > 4096)
        throw std::runtime_error("--batches wants sizes in [1, 4096], got '" + b + "'");
      const int64_t B = *parsed;
      std::vector<std::vector<int32_t>> prompts;  // the same for every cache
      for (int64_t i = 0; i < B; ++i) {
        std::vector<int32_t> p;
        for (int64_t v : randint(0, c.vocab_size, {P}, gen).to_vector<int64_t>()) p.push_back(static_cast<int32_t>(v));
        prompts.push_back(p);
      }
      for (const std::string& cache : flags.list("caches")) {
        nn::GenerationConfig cfg{.max_new_tokens = N};  // greedy, no EOS: exactly N tokens
        cfg.cache_implementation = cache == "dynamic" ? "dynamic" : "static";
        cfg.cuda_graph = cache == "graph";
        const char* variant = cache == "dynamic"  ? "kv cache"
                              : cache == "static" ? "static cache"
                                                  : "static cache + cuda graph";
        for (int64_t i = 0; i < flags.integer("warmup"); ++i) time_once(*model, prompts, cfg);
        std::vector<Timing> t;
        for (int64_t i = 0; i < flags.integer("runs"); ++i) t.push_back(time_once(*model, prompts, cfg));
        std::sort(t.begin(), t.end(), [](const Timing& a, const Timing& b) { return a.total_s < b.total_s; });
        const Timing med = t[t.size() / 2];
        const double tok_s = static_cast<double>(B * N) / med.total_s, ms_tok = 1e3 * med.total_s / static_cast<double>(N),
                     decode_ms = 1e3 * (med.total_s - med.prefill_s) / static_cast<double>(std::max<int64_t>(1, N - 1));
        std::printf("%-10s %-6s %-8s %5lld %6lld %6lld %10.1f %12.3f %11.2f %14.3f\n", flags.str("config").c_str(),
                    flags.str("dtype").c_str(), cache.c_str(), static_cast<long long>(B), static_cast<long long>(P),
                    static_cast<long long>(N), tok_s, ms_tok, 1e3 * med.prefill_s, decode_ms);
        rows.add()
            .str("impl", "tapegrad")
            .str("variant", variant)
            .str("config", flags.str("config"))
            .str("dtype", flags.str("dtype"))
            .num("batch", static_cast<double>(B))
            .num("prompt", static_cast<double>(P))
            .num("new_tokens", static_cast<double>(N))
            .num("tok_s", tok_s)
            .num("ms_per_token", ms_tok)
            .num("prefill_ms", 1e3 * med.prefill_s)
            .num("decode_ms_per_token", decode_ms);
      }
    }
    rows.write(flags.str("json"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
