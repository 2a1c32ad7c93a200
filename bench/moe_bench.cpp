// One mixture-of-experts layer's sparse block, forward + backward: the router (softmax over every
// expert, top-k renormalised, as Qwen3-MoE and Mixtral), the SwiGLU experts on their tokens and the
// weighted sum, for x [T, H] that requires grad (a layer inside a model). Implementations:
//   grouped      nn::SparseMoeBlock: tokens grouped by expert, grouped_mm per projection (LoRA inside),
//                its experts' GEMMs one grouped cuBLAS launch a projection
//   grouped_gemm_per_expert  the same with one GEMM an expert (tg::enable_grouped_gemm(false))
//   expert_loop  the same parameters and routing, the experts as a loop of ordinary ops (linear per
//                expert and projection; LoRA as two more linears each)
//   grouped_4bit (mode qlora) the grouped block with its experts in NF4 (grouped_mm_4bit), against
//                the grouped block over the same experts dequantised
// Modes: lora (experts frozen, peft's target_parameters on gate_up_proj and down_proj, r 16, alpha
// 32, float32 adapters as peft's autocast), qlora (the same over 4-bit experts) and full (every
// parameter trains). Before timing, the second implementation's output and input gradient are
// compared with the first's. tflops counts the
// experts' base GEMMs only: 6 T k H I forward, as much again for dx, and again for dW in full.
// Rows {config, impl, mode, tokens, ms, tflops, peak_mib}; peak: the allocator's peak over one call
// beyond the parameters, x and their existing gradients. Timing as bench/bench_measure.h.
//   moe_bench [--device cuda|cpu] [--cases config:tokens,...] [--modes lora,qlora,full] [--reps N] [--json out]
// configs: qwen3-30b-a3b (H 2048, I 768, 128 experts, top 8), mixtral-8x7b (4096, 14336, 8, top 2),
// tiny (64, 32, 8, top 2). bench/torch_moe_ref.py times transformers' Qwen3MoeSparseMoeBlock on the
// same cases; scripts/gpu/bench.sh moe runs both (rows to bench/results/moe.json).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/bench_measure.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/number.h"
#include "tapegrad.h"

using namespace tg;

namespace {

struct LayerShape {
  int64_t hidden, intermediate, experts, top_k;
};

const std::map<std::string, LayerShape> kConfigs = {
    {"qwen3-30b-a3b", {2048, 768, 128, 8}}, {"mixtral-8x7b", {4096, 14336, 8, 2}}, {"tiny", {64, 32, 8, 2}}};

struct Case {
  std::string config;
  int64_t tokens;
};

// "config:tokens,..."
std::vector<Case> parse_cases(const std::string& list) {
  std::vector<Case> cases;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');) {
    const size_t colon = s.find(':');
    const std::optional<int64_t> t =
        colon == std::string::npos ? std::nullopt : io::parse_integer<int64_t>(s.substr(colon + 1));
    if (!t || *t < 1 || *t > (int64_t{1} << 24) || !kConfigs.count(s.substr(0, colon)))
      throw examples::UsageError("--cases wants config:tokens,... with a config of qwen3-30b-a3b, mixtral-8x7b, tiny "
                                 "and tokens in [1, 2^24], got '" + s + "'\n");
    cases.push_back({s.substr(0, colon), *t});
  }
  return cases;
}

// Expert e of a 3-D tensor as a 2-D one.
Tensor expert_of(const Tensor& t, int64_t e) { return squeeze(slice(t, 0, e, e + 1), 0); }

// x [n, in] through expert e's [out, in] weight, plus its LoRA update when `u` holds one.
Tensor project(const Tensor& x, const Tensor& w, const std::optional<nn::MoeExperts::Update>& u, int64_t e) {
  Tensor y = linear(x, expert_of(w, e));
  if (!u) return y;
  const Tensor a = tg::to(expert_of(u->lora_A, e), x.dtype()), b = tg::to(expert_of(u->lora_B, e), x.dtype());
  return add(y, mul(linear(linear(x, a), b), u->scaling));
}

// The block's computation with the experts as a loop of ordinary ops (nn/moe.cpp's routing).
Tensor expert_loop(nn::SparseMoeBlock& block, const Tensor& x) {
  const nn::MoeExperts& ex = *block.experts;
  const int64_t E = block.options.num_experts, k = block.options.top_k, I = block.options.intermediate_size;
  const int64_t H = x.shape()[1];
  const Tensor probs = softmax(tg::to(block.router->forward(x), kFloat32), -1);
  auto [weights, chosen] = topk(probs, k);
  weights = div(weights, sum(weights, {-1}, true));
  const ExpertOrder order = sort_by_expert(chosen, E);
  const std::vector<int64_t> counts = order.counts.to_vector<int64_t>();
  const Tensor grouped = embedding(x, order.token_of_row);
  const auto gate_up_update = ex.update("gate_up_proj"), down_update = ex.update("down_proj");
  std::vector<Tensor> outs;
  for (int64_t e = 0, r0 = 0; e < E; r0 += counts[e++]) {
    if (counts[e] == 0) continue;
    const Tensor rows = slice(grouped, 0, r0, r0 + counts[e]);
    const Tensor gate_up = project(rows, ex.gate_up_proj, gate_up_update, e);
    const Tensor act = silu_mul(slice(gate_up, 1, 0, I), slice(gate_up, 1, I, 2 * I));
    outs.push_back(project(act, ex.down_proj, down_update, e));
  }
  const Tensor per_choice = reshape(embedding(cat(outs, 0), order.row_of_choice), {-1, k, H});
  return sum(mul(per_choice, unsqueeze(tg::to(weights, x.dtype()), -1)), {1});
}

}  // namespace

int run(int argc, char** argv) {
  examples::Flags flags("moe_bench", "Times a sparse MoE block (grouped_mm experts) against a per-expert loop, fwd+bwd.");
  flags.add("device", "cuda", "cuda | cpu | auto")
      .add("dtype", "bf16", examples::kDtypeHelp)
      .add("cases", "", "config:tokens,... (default: qwen3-30b-a3b:4096,qwen3-30b-a3b:16384,mixtral-8x7b:4096 on "
                        "cuda, tiny:64 on cpu)")
      .add("modes", "lora,qlora,full", "lora (frozen experts, LoRA on them), qlora (the same over 4-bit experts), full")
      .add("reps", "20", "timed calls per case (the median is reported)")
      .add("threads", "2", "CPU threads")
      .add("json", "", "also write the rows to this file (bench/results/moe.json's rows)");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const Device device = examples::device_flag(flags);
  if (device.is_cuda() && !cuda_is_available()) throw Error("moe_bench: --device cuda, but no CUDA device");
  set_num_threads(static_cast<int>(flags.integer("threads")));
  const DType dtype = examples::dtype_flag(flags);
  const int reps = static_cast<int>(flags.integer("reps", 1, 100000));
  const std::vector<Case> cases =
      parse_cases(flags.was_set("cases") ? flags.str("cases")
                  : device.is_cuda()    ? "qwen3-30b-a3b:4096,qwen3-30b-a3b:16384,mixtral-8x7b:4096"
                                        : "tiny:64");
  const std::vector<std::string> modes = flags.list("modes");
  for (const std::string& m : modes)
    if (m != "lora" && m != "qlora" && m != "full")
      throw examples::UsageError("--modes wants lora, qlora and / or full, got '" + m + "'\n");
  const double tolerance = dtype == kBFloat16 ? 3e-2 : 1e-4;  // the loop and grouped_mm sum alike but in other kernels

  bench::Timer timer(device);
  bench::JsonRows rows("moe", bench::machine(device));
  std::printf("%-16s %7s %-5s %-24s %10s %8s %10s %10s\n", "config", "tokens", "mode", "impl", "ms", "TFLOP/s",
              "peak MiB", "rel err");
  for (const Case& c : cases) {
    const LayerShape s = kConfigs.at(c.config);
    for (const std::string& mode : modes) {
      // The block (the same draws each time); with `four_bit` its experts in NF4, else with
      // `dequantised` the NF4 experts' values held dense.
      auto make_block = [&](bool four_bit, bool dequantised) {
        Generator gen(1);
        nn::MoeOptions o{.num_experts = s.experts, .top_k = s.top_k, .intermediate_size = s.intermediate};
        auto block = std::make_unique<nn::SparseMoeBlock>(s.hidden, o, gen);
        block->to(device);
        {
          NoGradGuard g;  // transformers' init: N(0, 0.02) everywhere, drawn where the block lives
          for (auto& [name, p] : block->named_parameters()) copy_(p, mul(randn(p.shape(), gen, p.options()), 0.02));
        }
        block->to(dtype);
        if (four_bit || dequantised) {
          for (const char* p : {"gate_up_proj", "down_proj"}) block->experts->quantize_4bit(p);
          if (dequantised) block->experts->dequantize();
        }
        if (mode != "full") {
          peft::apply_lora(*block, {.r = 16, .lora_alpha = 32, .target_modules = {},
                                    .target_parameters = {"experts.gate_up_proj", "experts.down_proj"}}, gen);
          NoGradGuard g;  // B away from zero, so the adapters take part in the comparison
          for (auto& [name, p] : block->named_parameters())
            if (name.find("lora_B") != std::string::npos) copy_(p, mul(randn(p.shape(), gen, p.options()), 0.02));
        }
        return block;
      };
      const bool qlora = mode == "qlora";
      const std::unique_ptr<nn::SparseMoeBlock> block = make_block(qlora, false),
                                                 twin = qlora ? make_block(false, true) : nullptr;
      Generator gen(2);
      Tensor x = tg::to(randn({c.tokens, s.hidden}, gen, {kFloat32, device}), dtype).requires_grad_(true);
      const Tensor dy = tg::to(randn({c.tokens, s.hidden}, gen, {kFloat32, device}), dtype);
      using Impl = std::pair<std::string, std::function<Tensor()>>;
      auto per_expert_gemms = [&] {  // left off through the backward that follows; the next impl restores it
        enable_grouped_gemm(false);
        return block->forward(x);
      };
      auto with_grouped_gemm = [](std::function<Tensor()> f) {
        return [f] {
          enable_grouped_gemm(true);
          return f();
        };
      };
      const std::vector<Impl> impls =
          qlora ? std::vector<Impl>{{"grouped_4bit", with_grouped_gemm([&] { return block->forward(x); })},
                                    {"grouped", with_grouped_gemm([&] { return twin->forward(x); })}}
                : std::vector<Impl>{{"grouped", with_grouped_gemm([&] { return block->forward(x); })},
                                    {"expert_loop", with_grouped_gemm([&] { return expert_loop(*block, x); })},
                                    {"grouped_gemm_per_expert", per_expert_gemms}};
      // Each implementation's output and dx, compared before anything is timed.
      std::vector<std::pair<Tensor, Tensor>> results;
      for (const auto& [impl, forward] : impls) {
        x.set_grad(Tensor());
        const Tensor y = forward();
        y.backward(dy);
        results.emplace_back(y.detach(), x.grad());
      }
      double err = 0.0;
      for (size_t i = 1; i < results.size(); ++i)
        err = std::max({err, bench::relative_error(results[i].first, results[0].first),
                        bench::relative_error(results[i].second, results[0].second)});
      results.clear();
      if (!(err <= tolerance))
        throw Error("moe_bench: at " + c.config + ":" + std::to_string(c.tokens) + " (" + mode +
                    ") an implementation differs from " + impls[0].first + " by " + std::to_string(err) +
                    " (relative), wanted at most " + std::to_string(tolerance));
      const double gemms = mode == "full" ? 3.0 : 2.0;  // forward, dx, and dW when the experts train
      const double flops = gemms * 6.0 * static_cast<double>(c.tokens * s.top_k * s.hidden * s.intermediate);
      for (const auto& [impl, forward] : impls) {
        auto step = [&] { forward().backward(dy); };  // gradients accumulate into the existing .grad
        step();
        const double peak = bench::peak_mib_above(device, step);
        const double ms = timer.median_ms(step, reps);
        std::printf("%-16s %7lld %-5s %-24s %10.3f %8.1f %10.1f %10.2e\n", c.config.c_str(),
                    static_cast<long long>(c.tokens), mode.c_str(), impl.c_str(), ms, flops / ms * 1e-9, peak, err);
        rows.add()
            .str("config", c.config)
            .str("impl", impl)
            .str("mode", mode)
            .str("dtype", flags.str("dtype"))
            .num("tokens", static_cast<double>(c.tokens))
            .num("ms", ms, 5)
            .num("tflops", flops / ms * 1e-9, 4)
            .num("peak_mib", peak, 5);
      }
    }
  }
  rows.write(flags.str("json"));
  return 0;
}

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
