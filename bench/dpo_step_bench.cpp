// Preference training's costs (issue 50) on a Llama config with LoRA (q/k/v/o, r 8; the frozen
// base in --dtype, float32 adapters):
//   --mode step: a DPO step: --pairs pairs of a chosen and a rejected sequence of --seq tokens
//     each (the first --prompt of them the prompt), the policy's completion log-probs through the
//     fused head, the reference's with the adapters switched off under no-grad in the same step
//     (--reference none: reference-free), the sigmoid loss, backward, AdamW; ms a step and peak memory.
//   --mode rollout: GRPO's rollouts: nn::generate sampling --generations completions of each of
//     --prompts random prompts of --prompt tokens, exactly --new-tokens each (no EOS), the adapters
//     (B non-zero) not merged, as GRPOTrainer generates; new tokens a second.
// The median of --runs after --warmup. bench/torch_preference_bench.py times transformers + peft
// (TRL's loss; transformers' generate) the same way; `scripts/gpu/bench.sh preference` runs both:
//   dpo_step_bench --config llama-1b --pairs 4 --seq 1024 --device cuda --dtype bf16 --json out.json
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <vector>

#include "bench/bench_json.h"
#include "bench/real_llama.h"
#include "core/memory.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "nn/generation/generation.h"
#include "ops/shape.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "train/detail/preference_step.h"
#include "train/preference_losses.h"

using namespace tg;

namespace {

// The median seconds of `runs` calls of fn(i) after `warmup` untimed ones.
double median_seconds(int64_t warmup, int64_t runs, const std::function<void(int64_t)>& fn) {
  std::vector<double> s;
  for (int64_t i = 0; i < warmup + runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    if (i >= warmup) s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

void dpo_step(const examples::Flags& flags, nn::CausalLM& model, const bench::BenchLlama& bl, Device device,
              bench::JsonRow& row) {
  const int64_t pairs = flags.integer("pairs", 1), seq = flags.integer("seq", 2, bl.config.max_position_embeddings),
                prompt = flags.integer("prompt", 1, seq - 1);
  const std::string reference = flags.str("reference");
  if (reference != "in-step" && reference != "none")
    throw examples::UsageError("--reference wants in-step or none, got '" + reference + "'\n");
  optim::AdamW opt(model.named_trainable_parameters(), {.lr = 1e-5, .weight_decay = 0.0});
  Generator gen(13);
  const Tensor ids = randint(0, bl.config.vocab_size, {2 * pairs, seq}, gen, {.dtype = kInt64, .device = device});
  std::vector<int64_t> lv = ids.to_vector<int64_t>();
  for (size_t i = 0; i < lv.size(); ++i)
    if (static_cast<int64_t>(i) % seq < prompt) lv[i] = -100;
  const Tensor labels = from_vector(lv, ids.shape(), device);
  const std::vector<int64_t> tokens(static_cast<size_t>(pairs), seq - prompt);
  const train::DPOConfig config{.reference_free = reference == "none"};
  double loss = 0;
  auto step = [&](int64_t i) {
    if (i == flags.integer("warmup", 0)) reset_peak_memory_stats(device);
    opt.zero_grad();
    const Tensor lp = train::detail::completion_log_probs(model, ids, labels);
    train::PairLogProbs p{slice(lp, 0, 0, pairs), slice(lp, 0, pairs, 2 * pairs), {}, {}, tokens, tokens};
    if (reference == "in-step") {
      const Tensor ref = train::detail::reference_log_probs(model, ids, labels);
      p.ref_chosen = slice(ref, 0, 0, pairs), p.ref_rejected = slice(ref, 0, pairs, 2 * pairs);
    }
    const train::PreferenceLoss l = train::dpo_loss(config, p);  // reads the log-probs on the host: a sync
    l.loss.backward();
    opt.step();
    loss = l.loss.item();
  };
  const double ms = 1e3 * median_seconds(flags.integer("warmup", 0), flags.integer("runs", 1), step);
  const double peak_gib = device.is_cuda() ? static_cast<double>(memory_stats(device).peak_bytes) / (1 << 30) : NAN;
  std::printf("dpo step: %lld pairs of 2 x %lld tokens (prompt %lld), reference %s: %.2f ms (median), peak %.2f GiB, "
              "loss %.5f\n",
              static_cast<long long>(pairs), static_cast<long long>(seq), static_cast<long long>(prompt),
              reference.c_str(), ms, peak_gib, loss);
  row.num("pairs", static_cast<double>(pairs))
      .num("seq", static_cast<double>(seq))
      .num("prompt", static_cast<double>(prompt))
      .str("reference", reference)
      .num("ms", ms, 4)
      .num("peak_gib", peak_gib, 3);
}

void rollout(const examples::Flags& flags, nn::CausalLM& model, const bench::BenchLlama& bl, Device device,
             bench::JsonRow& row) {
  const int64_t prompts = flags.integer("prompts", 1), G = flags.integer("generations", 1),
                prompt = flags.integer("prompt", 1), new_tokens = flags.integer("new-tokens", 1);
  const std::string cache = flags.str("cache");
  if (cache != "dynamic" && cache != "static" && cache != "graph")
    throw examples::UsageError("--cache wants dynamic, static or graph, got '" + cache + "'\n");
  Generator gen(13);
  {
    NoGradGuard g;  // trained adapters: B non-zero
    for (auto& [path, l] : peft::lora_layers(model))
      copy_(l->lora_B->weight, mul(randn(l->lora_B->weight.shape(), gen, {.device = device}), 0.01));
  }
  std::vector<std::vector<int32_t>> inputs;
  for (int64_t p = 0; p < prompts; ++p) {
    std::vector<int32_t> ids;
    for (int64_t v : randint(0, bl.config.vocab_size, {prompt}, gen).to_vector<int64_t>()) ids.push_back(static_cast<int32_t>(v));
    for (int64_t g = 0; g < G; ++g) inputs.push_back(ids);
  }
  nn::GenerationConfig config{.max_new_tokens = new_tokens, .do_sample = true, .top_k = 0,
                              .cache_implementation = cache == "dynamic" ? "dynamic" : "static",
                              .cuda_graph = cache == "graph"};
  const double s = median_seconds(flags.integer("warmup", 0), flags.integer("runs", 1), [&](int64_t i) {
    config.seed = static_cast<uint64_t>(i);
    nn::generate(model, inputs, config);
  });
  const double tokens_per_s = static_cast<double>(prompts * G * new_tokens) / s;
  std::printf("rollout, %s cache: %lld prompts x %lld generations, %lld + %lld tokens: %.3f s (median), %.0f new "
              "tokens/s\n",
              cache.c_str(), static_cast<long long>(prompts), static_cast<long long>(G), static_cast<long long>(prompt),
              static_cast<long long>(new_tokens), s, tokens_per_s);
  row.str("cache", cache)
      .num("batch", static_cast<double>(prompts * G))
      .num("prompt", static_cast<double>(prompt))
      .num("new_tokens", static_cast<double>(new_tokens))
      .num("s", s, 4)
      .num("tokens_per_s", tokens_per_s, 5);
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("dpo_step_bench", "A LoRA DPO step's time and memory, or GRPO's rollouts' tokens a second.");
  flags.add("mode", "step", "step (a DPO step) | rollout (GRPO's sampled completions)")
      .add("config", "llama-1b", "tiny | small | bench-135m | llama-1b | llama3-8b (bench/real_llama.h)")
      .add("pairs", "4", "step: pairs a step (2 x pairs sequences)")
      .add("seq", "1024", "step: tokens of each sequence (prompt + completion)")
      .add("prompt", "512", "tokens of each prompt")
      .add("reference", "in-step", "step: in-step | none (reference-free)")
      .add("prompts", "8", "rollout: prompts a generation")
      .add("generations", "8", "rollout: completions of each prompt (GRPO's num_generations)")
      .add("new-tokens", "256", "rollout: tokens of each completion")
      .add("cache", "dynamic", "rollout: dynamic | static | graph (static + the decode step as a CUDA graph)")
      .add("device", "cuda", "cpu | cuda | auto")
      .add("dtype", "bf16", examples::kDtypeHelp)
      .add("warmup", "3", "untimed runs")
      .add("runs", "10", "timed runs (the median is reported)")
      .add("json", "", "also write the row to this file (bench/results/dpo_step.json's or grpo_rollout.json's)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    const std::string mode = flags.str("mode");
    if (mode != "step" && mode != "rollout") throw examples::UsageError("--mode wants step or rollout, got '" + mode + "'\n");
    const Device device = examples::device_flag(flags);
    const DType dtype = examples::dtype_flag(flags);
    const bench::BenchLlama bl = bench::bench_llama(flags.str("config"));
    auto model = bench::fast_llama(bl.config, dtype, device, 7);
    Generator gen(11);
    peft::apply_lora(*model, {}, gen);  // q/k/v/o, r 8; float32 adapters on a bf16 base
    std::printf("dpo_step_bench %s %s %s\n", flags.str("config").c_str(), flags.str("dtype").c_str(),
                device.str().c_str());
    bench::JsonRows rows(mode == "step" ? "dpo_step_bench" : "grpo_rollout_bench", bench::machine(device));
    bench::JsonRow& row = rows.add().str("impl", "tapegrad").str("config", flags.str("config")).str("dtype", flags.str("dtype"));
    if (mode == "step") dpo_step(flags, *model, bl, device, row);
    else rollout(flags, *model, bl, device, row);
    rows.write(flags.str("json"));
    return 0;
  } catch (const examples::UsageError& e) {
    std::cerr << e.what() << flags.usage();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
