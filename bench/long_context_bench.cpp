// Long sequences on one GPU (bench/long_context): a LoRA (or QLoRA: NF4 base) training step of a
// Llama config at --batch (1) and T doubled from --start until the step runs out of memory, --max-seq,
// or the time budget a configuration gets (--budget-s: the next length is skipped when its step,
// predicted from the last one as quadratic in T, would not fit in what is left), for each --quant
// and --offload. Gradient checkpointing on, the gated MLPs tiled (--tiled-mlp tokens a chunk),
// bf16 base with float32 LoRA on every projection. A step is timed once after --warmup untimed
// ones at each length (a longer length's buffers, the offload's pinned host ones too, are allocated
// in its first step). Rows {impl, config, quant, offload, mlp_chunk_tokens, T, ms, tokens_per_s,
// peak_mib (the allocator's peak of live tensors), host_peak_mib (the offloaded activations' peak),
// plan_mib (train::estimate_training_memory's plan for the run), fits} into --json; the first
// length that does not fit is a row with fits false.
// --layers N builds N of the config's layers (a quick look at the per-layer peak).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/real_llama.h"
#include "core/activation_offload.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "nn/mlp.h"
#include "nn/models/quantization.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "train/memory_estimate.h"

using namespace tg;

namespace {

constexpr double kMiB = 1048576.0;
const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

bool out_of_memory(const Error& e) { return std::string(e.what()).find("out of memory") != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("long_context_bench", "Times LoRA steps of a Llama config at doubling sequence lengths.");
  flags.add("config", "llama3-8b", "a bench/real_llama.h config (tiny, llama-1b, llama3-8b, ...)")
      .add("layers", "0", "decoder layers to build (0: the config's)")
      .add("device", "cuda", "cpu | cuda | auto")
      .add("quant", "none,nf4", "none (bf16 base) and/or nf4 (QLoRA)")
      .add("offload", "false,true", "offload the checkpointed activations: false and/or true")
      .add("tiled-mlp", "8192", "tokens a chunk of the tiled MLP (0: untiled)")
      .add("batch", "1", "sequences a step")
      .add("start", "16384", "the first sequence length")
      .add("max-seq", "524288", "the longest sequence length tried")
      .add("budget-s", "100", "seconds of steps a configuration (quant x offload) may take")
      .add("warmup", "1", "untimed steps before each length's timed one")
      .add("r", "16", "LoRA rank")
      .add("json", "", "also write the rows to this file (bench/results/long_context.json's rows)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    const Device device = examples::device_flag(flags);
    const std::string name = flags.str("config");
    bench::BenchLlama bl = bench::bench_llama(name);
    nn::LlamaConfig& c = bl.config;
    if (const int64_t layers = flags.integer("layers", 0, 1024)) c.num_hidden_layers = layers;
    const int64_t B = flags.integer("batch", 1, 4096);
    const int64_t start = flags.integer("start", 1, INT32_MAX), max_seq = flags.integer("max-seq", 1, INT32_MAX);
    const int64_t chunk = flags.integer("tiled-mlp", 0, INT32_MAX), r = flags.integer("r", 1, 4096);
    const double budget_s = flags.number("budget-s");
    const int64_t warmup = flags.integer("warmup", 0, 100);
    c.max_position_embeddings = std::max(c.max_position_embeddings, max_seq);
    std::vector<train::WeightShape> weights;
    train::ModelSizes sizes{.hidden = c.hidden_size, .layers = c.num_hidden_layers, .intermediate = c.intermediate_size,
                            .vocab = c.vocab_size, .q_width = c.num_attention_heads * c.head_dim(),
                            .kv_width = c.kv_heads() * c.head_dim()};
    bench::JsonRows rows("long_context_bench", bench::machine(device));
    std::printf("%-10s %-5s %-7s %8s %10s %10s %10s %10s %10s\n", "config", "quant", "offload", "T", "ms", "tok/s",
                "peak MiB", "host MiB", "plan MiB");
    for (const std::string& quant : flags.list("quant")) {
      if (quant != "none" && quant != "nf4") throw examples::UsageError("--quant wants none and/or nf4, got '" + quant + "'\n");
      std::shared_ptr<nn::LlamaForCausalLM> model = bench::fast_llama(c, kBFloat16, device);
      weights.clear();
      for (const auto& [pname, p] : model->named_parameters()) weights.push_back({pname, p.shape()});
      if (quant == "nf4")
        nn::replace_with_4bit_linear(*model, {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
                                              .compute_dtype = kBFloat16});
      peft::apply_lora(*model, {.r = r, .lora_alpha = static_cast<double>(2 * r), .target_modules = kTargets});
      if (chunk > 0) nn::tile_mlps(*model, chunk);
      optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-4});
      for (const std::string& offload_flag : flags.list("offload")) {
        if (offload_flag != "false" && offload_flag != "true")
          throw examples::UsageError("--offload wants false and/or true, got '" + offload_flag + "'\n");
        const bool offload = offload_flag == "true";
        model->gradient_checkpointing_enable({.offload_activations = offload});
        double spent = 0, last_ms = 0;
        int64_t last_T = 0;
        for (int64_t T = start; T <= max_seq; T *= 2) {
          const double predicted_s = last_T ? last_ms / 1e3 * static_cast<double>(T * T) / static_cast<double>(last_T * last_T) *
                                                   static_cast<double>(1 + warmup)
                                             : 0;
          if (last_T && spent + predicted_s > budget_s) {
            std::printf("%-10s %-5s %-7s %8lld skipped: its step would take about %.0f s, %.0f s of the budget left\n",
                        name.c_str(), quant.c_str(), offload_flag.c_str(), static_cast<long long>(T), predicted_s,
                        budget_s - spent);
            break;
          }
          const train::MemoryEstimate plan = train::estimate_training_memory(
              weights, sizes, {.dtype = kBFloat16, .load_in_4bit = quant == "nf4", .lora_r = r, .lora_targets = kTargets,
                               .batch = B, .seq = T, .gradient_checkpointing = true, .offload_activations = offload,
                               .mlp_chunk_tokens = chunk});
          bench::JsonRow& row = rows.add();
          row.str("impl", "tapegrad").str("config", name).str("quant", quant).boolean("offload", offload)
              .num("mlp_chunk_tokens", static_cast<double>(chunk))
              .num("layers", static_cast<double>(c.num_hidden_layers)).num("batch", static_cast<double>(B))
              .num("T", static_cast<double>(T))
              .num("plan_mib", static_cast<double>(plan.total()) / kMiB, 5);
          Generator gen(static_cast<uint64_t>(T));
          const Tensor ids = randint(0, c.vocab_size, {B, T}, gen, {.dtype = kInt64, .device = device});
          auto step = [&] {
            opt.zero_grad();
            Tensor loss = model->loss(ids, ids);
            loss.backward();
            opt.step();
            synchronize(device);
          };
          double ms = 0;
          try {
            for (int64_t i = 0; i < warmup; ++i) step();
            synchronize(device);
            reset_peak_memory_stats(device);
            reset_offload_peak_memory_stats();
            const auto t0 = std::chrono::steady_clock::now();
            step();
            ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          } catch (const Error& e) {
            if (!out_of_memory(e)) throw;
            row.boolean("fits", false);
            std::printf("%-10s %-5s %-7s %8lld out of memory (plan %.0f MiB)\n", name.c_str(), quant.c_str(),
                        offload_flag.c_str(), static_cast<long long>(T), static_cast<double>(plan.total()) / kMiB);
            empty_cache(device);
            break;
          }
          spent += ms / 1e3 * static_cast<double>(1 + warmup);
          last_ms = ms, last_T = T;
          const double peak = static_cast<double>(memory_stats(device).peak_bytes) / kMiB;
          const double host = static_cast<double>(offload_memory_stats().peak_bytes) / kMiB;
          row.boolean("fits", true).num("ms", ms, 5).num("tokens_per_s", static_cast<double>(B * T) / (ms / 1e3), 5)
              .num("peak_mib", peak, 5).num("host_peak_mib", host, 5);
          std::printf("%-10s %-5s %-7s %8lld %10.1f %10.0f %10.0f %10.0f %10.0f\n", name.c_str(), quant.c_str(),
                      offload_flag.c_str(), static_cast<long long>(T), ms, static_cast<double>(B * T) / (ms / 1e3), peak,
                      host, static_cast<double>(plan.total()) / kMiB);
          std::fflush(stdout);
        }
      }
    }
    rows.write(flags.str("json"));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
