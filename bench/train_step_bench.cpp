// One training step of a Llama config (forward, backward, AdamW), full fine-tuning and LoRA,
// timed on the host clock: median of --steps after --warmup. Prints one row per mode in the same
// shape as bench/torch_toy_lora.py, with the step's model FLOPs as TFLOP/s (bench/real_llama.h's
// step_flops). --config: tiny, small, bench-135m, or the real sizes llama-1b and llama3-8b
// (torch_toy_lora.py's shapes, batches and LoRA); --config-json: any Llama config.json a Hugging
// Face folder holds (nn::parse_pretrained_config), batch 1 x min(4096, max_position_embeddings)
// unless --batch / --seq say otherwise. The model is built by bench::fast_llama (parameters made on
// the device, no host init: seconds where the constructor takes minutes), or with --build
// constructor through LlamaForCausalLM's constructor.
// --dtype bf16: LoRA steps with the frozen base in bfloat16 and float32 adapters (peft's mixed
// precision); full steps with every parameter and gradient in bfloat16 (AdamW keeps float32
// moments for them, but there are no float32 master weights).
// --gradient-checkpointing: each decoder layer under tg::checkpoint (rows name the mode
// "lora+ckpt", "full+ckpt"), for the peak memory it saves and the recomputation it costs.
// --cuda-graph: after the warm-up, the step is captured once as a CUDA graph (tg::cuda::CUDAGraph)
// and the timed steps are its replays (rows "lora+graph", "full+graph"); the loss of the last
// eager and replayed steps are printed so a run shows the replay trains.
// On the GPU the timed steps run between cudaProfilerStart / Stop, so `ncu --profile-from-start
// off` sees them alone (scripts/gpu/bench.sh real-step's census).
// --cudnn-sdp false: attention on tapegrad's flash kernels instead of cuDNN's (tg::enable_cudnn_sdp).
// --sdp-deterministic false: cuDNN's attention backward with atomic dq, as PyTorch's cuDNN backend
// runs it (tg::set_cudnn_sdp_deterministic); rows say "sdp_deterministic": false.
// --qlora: each LoRA row is followed by its QLoRA twin (issue 37): the same LoRA on a base whose
// Linear layers (all but the head) are NF4 with double quantisation, bfloat16 compute
// (nn::replace_with_4bit_linear, timed), with where the memory goes: the 4-bit state, the dense
// parameters, LoRA and its optimizer state, the shared workspace, the checkpoints (one [B, T, d]
// tensor a layer) and the rest of the step's peak (activations of the recomputed layer, the loss).
// --fp8: each LoRA row is followed by its twin on an FP8 base (issue 52): the Linear layers but the
// head in e4m3 with 128x128 block scales (nn::replace_with_fp8_linear, timed), rows "lora-fp8",
// quant "fp8", with the same memory breakdown.
// --layers N builds only N of the config's decoder layers; --extrapolate-layers M (checkpointing
// on) adds to the peak (M - N) x what one more layer keeps (its weights, its LoRA with gradients
// and AdamW moments, its checkpoint): llama3-70b's 80 layers from 2 of them.
// --adjacent-weights false: q / k / v and gate / up weights each in their own allocation (rows say
// "adjacent_weights": false), as before nn::place_weights_adjacent, for an A/B in one call.
// --json: rows as bench/results/train_step-*.json; --real-json: rows as issue 36's
// bench/results/train_step-h200-real.json (impl, config, mode, graph, ckpt, ms, tflops, peak_mib;
// with --qlora also quant "none" / "nf4", layers, the breakdown in MiB, the extrapolated peak).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "bench/bench_json.h"
#include "bench/bench_measure.h"
#include "bench/real_llama.h"
#include "core/cuda/runtime.h"
#include "core/cuda_graph.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/file.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

namespace {

// --config or --config-json, then --batch / --seq where given (0: the config's).
bench::BenchLlama config_of(const examples::Flags& flags, std::string& name) {
  bench::BenchLlama b;
  if (flags.str("config-json").empty()) {
    name = flags.str("config");
    b = bench::bench_llama(name);
  } else {
    name = flags.str("config-json");
    const std::vector<uint8_t> bytes = io::read_file(name);
    const nn::ModelBuilder parsed = nn::parse_pretrained_config(std::string(bytes.begin(), bytes.end()), name);
    const auto* llama = std::any_cast<nn::LlamaConfig>(&parsed.config);
    TG_CHECK(llama, "train_step_bench", "--config-json wants a Llama config.json (LlamaForCausalLM), got another ",
             "architecture in ", name);
    b.config = *llama;
    b.batch = 1;
    b.seq = std::min<int64_t>(4096, b.config.max_position_embeddings);
  }
  const int64_t layers = flags.integer("layers");
  TG_CHECK(layers >= 0, "train_step_bench", "--layers wants 0 (the config's) or a count, got ", layers);
  if (layers) b.config.num_hidden_layers = layers;
  const int64_t batch = flags.integer("batch"), seq = flags.integer("seq");
  TG_CHECK(batch >= 0 && seq >= 0 && seq <= b.config.max_position_embeddings, "train_step_bench",
           "--batch and --seq want 0 (the config's) or a positive size, --seq at most max_position_embeddings ",
           b.config.max_position_embeddings, ", got --batch ", batch, " --seq ", seq);
  if (batch) b.batch = batch;
  if (seq) b.seq = seq;
  return b;
}

// Where a model's bytes are, by the names of its parameters and buffers (each tensor's memory once:
// a shared workspace, not q / k / v's one allocation).
struct ModelBytes {
  double quant = 0, dense = 0, lora = 0, workspace = 0;
  double layer0 = 0, layer0_lora = 0;  // decoder layer 0's weights (4-bit or dense) and LoRA
};

ModelBytes model_bytes(nn::Module& model) {
  ModelBytes b;
  std::set<std::pair<const Storage*, int64_t>> seen;
  nn::NamedTensors all = model.named_parameters();
  for (auto& named : model.named_buffers()) all.push_back(named);
  for (const auto& [name, t] : all) {
    if (!seen.insert({t.storage().get(), t.storage_offset()}).second) continue;
    const double n = static_cast<double>(t.nbytes());
    const bool lora = name.find(".lora_") != std::string::npos, layer0 = name.starts_with("model.layers.0.");
    if (name.ends_with("workspace")) b.workspace += n;
    else if (lora) b.lora += n;
    else if (t.dtype() == kUInt8 || name.ends_with("absmax") || name.ends_with("quant_map") ||
             name.ends_with("weight_scale_inv"))
      b.quant += n;
    else b.dense += n;
    if (layer0 && !name.ends_with("workspace")) (lora ? b.layer0_lora : b.layer0) += n;
  }
  return b;
}

// --adjacent-weights false: each q / k / v and gate / up weight moved into its own allocation, as
// the models held them before nn::place_weights_adjacent, so one call times both layouts.
void separate_group_weights(nn::Module& model) {
  NoGradGuard no_grad;
  for (const auto& [name, w] : model.named_parameters())
    for (const char* part : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight"})
      if (name.ends_with(part)) {
        const Tensor own = Tensor::empty(w.shape(), w.options());
        copy_(own, w);
        w.impl().storage = own.storage();
        w.impl().offset = 0;
      }
}

constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("train_step_bench", "Times one training step of a Llama config.");
  flags.add("config", "tiny", "tiny | small | bench-135m | llama-1b | llama3-8b")
      .add("config-json", "", "a Llama config.json instead of --config")
      .add("batch", "0", "sequences a step (0: the config's)")
      .add("seq", "0", "tokens a sequence (0: the config's)")
      .add("build", "fast", "fast (bench::fast_llama) | constructor (LlamaForCausalLM's, host init)")
      .add("device", "cpu", "cpu | cuda | auto")
      .add("dtype", "f32", "f32 | bf16 (see the top of bench/train_step_bench.cpp)")
      .add("threads", "2", "CPU threads")
      .add("warmup", "3", "untimed steps")
      .add("steps", "20", "timed steps (the median is reported)")
      .add("modes", "full,lora", "full and/or lora")
      .add("qlora", "false", "also each LoRA step on an NF4 base (QLoRA), with a memory breakdown")
      .add("fp8", "false", "also each LoRA step on an FP8 base (e4m3, 128x128 block scales; bf16)")
      .add("layers", "0", "decoder layers to build (0: the config's)")
      .add("extrapolate-layers", "0", "with checkpointing: the peak extrapolated to this many layers (0: none)")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward")
      .add("cuda-graph", "false", "time replays of the step captured as one CUDA graph (GPU)")
      .add("cudnn-sdp", "true", "attention through cuDNN where it takes the call (tg::enable_cudnn_sdp)")
      .add("adjacent-weights", "true", "q / k / v and gate / up weights in one allocation each (false: apart)")
      .add("sdp-deterministic", "true", "cuDNN's attention backward without atomics (tg::set_cudnn_sdp_deterministic)")
      .add("json", "", "also write the rows to this file (bench/results/train_step.json's rows)")
      .add("real-json", "", "also write the rows to this file as issue 36's real-size rows");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    set_num_threads(static_cast<int>(flags.integer("threads")));
    enable_cudnn_sdp(flags.boolean("cudnn-sdp"));
    set_cudnn_sdp_deterministic(flags.boolean("sdp-deterministic"));
    Device device = examples::device_flag(flags);
    const DType dtype = examples::dtype_flag(flags);
    std::string name;
    const bench::BenchLlama bl = config_of(flags, name);
    const nn::LlamaConfig& c = bl.config;
    const int64_t B = bl.batch, T = bl.seq;
    const std::string build = flags.str("build");
    if (build != "fast" && build != "constructor")
      throw examples::UsageError("--build wants fast or constructor, got '" + build + "'\n");
    const bool checkpointing = flags.boolean("gradient-checkpointing"), graphed = flags.boolean("cuda-graph");
    std::printf("%-12s %-9s %-7s %-5s %10s %10s %10s %8s %10s %10s\n", "config", "mode", "device", "dtype", "ms/step",
                "min ms", "tok/s", "threads", "peak MiB", "TFLOP/s");
    bench::JsonRows rows("train_step_bench", bench::machine(device)), real_rows("train_step_real", bench::machine(device));
    const int64_t extrapolate = flags.integer("extrapolate-layers");
    TG_CHECK(extrapolate == 0 || (checkpointing && extrapolate >= c.num_hidden_layers), "train_step_bench",
             "--extrapolate-layers wants --gradient-checkpointing and a count of at least the model's ",
             c.num_hidden_layers, " layers, got ", extrapolate);
    std::vector<std::pair<std::string, std::string>> variants;  // mode, quantisation of the base
    for (const std::string& mode : flags.list("modes")) {
      if (mode != "lora" && mode != "full")
        throw examples::UsageError("--modes wants full and/or lora, got '" + mode + "'\n");
      variants.emplace_back(mode, "none");
      if (mode == "lora" && flags.boolean("qlora")) variants.emplace_back(mode, "nf4");
      if (mode == "lora" && flags.boolean("fp8")) variants.emplace_back(mode, "fp8");
    }
    for (const auto& [mode, quant] : variants) {
      Generator gen(0);
      const auto t_build = std::chrono::steady_clock::now();
      std::shared_ptr<nn::LlamaForCausalLM> model;
      if (build == "fast") {
        model = bench::fast_llama(c, dtype, device);
      } else {
        model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
        model->to(dtype, device);
      }
      if (!flags.boolean("adjacent-weights")) separate_group_weights(*model);
      if (quant != "none") {
        synchronize(device);
        int64_t dense_bytes = 0;
        for (auto& [name, p] : model->named_parameters())
          if (name.starts_with("model.layers.")) dense_bytes += static_cast<int64_t>(p.nbytes());
        const auto t0 = std::chrono::steady_clock::now();
        const auto paths =
            quant == "nf4"
                ? nn::replace_with_4bit_linear(
                      *model, {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true, .compute_dtype = dtype})
                : nn::replace_with_fp8_linear(*model, {.load_in_fp8 = true, .compute_dtype = dtype});
        synchronize(device);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%-12s %-9s quantised %zu linears (%.2f GB in %s) to %s on %s in %.3f s (%.1f GB/s)\n",
                    name.c_str(), quant == "nf4" ? "qlora" : "lora-fp8", paths.size(), dense_bytes / 1e9,
                    flags.str("dtype").c_str(), quant == "nf4" ? "NF4" : "FP8", device.str().c_str(), s,
                    dense_bytes / 1e9 / s);
      }
      if (mode == "lora") peft::apply_lora(*model, {});
      synchronize(device);
      const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();
      const bench::StepFlops flops = bench::step_flops(c, B, T, mode == "lora");
      std::printf("%-12s %-9s built (%s) in %.1f s; %.3g parameters; model FLOPs a step %.4g TFLOP (linear %.4g, attention %.4g)\n",
                  name.c_str(), mode.c_str(), build.c_str(), build_s, static_cast<double>(model->num_parameters()),
                  flops.total() / 1e12, flops.linear / 1e12, flops.attention / 1e12);
      if (checkpointing) model->gradient_checkpointing_enable();
      const std::string mode_name =
          (quant == "none" ? mode : quant == "nf4" ? "qlora" : "lora-fp8") + (checkpointing ? "+ckpt" : "") +
          (graphed ? "+graph" : "");
      reset_peak_memory_stats(device);
      optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3, .weight_decay = 0.01});
      Tensor ids = randint(0, c.vocab_size, {B, T}, gen, {.dtype = kInt64, .device = device});
      Tensor loss;
      auto body = [&] {
        opt.zero_grad();
        loss = model->loss(ids, ids);
        loss.backward();
        opt.step();
      };
      std::unique_ptr<cuda::CUDAGraph> graph;
      auto step = [&] {
        if (graph) graph->replay();
        else body();
        synchronize(device);
      };
      const int64_t warmup = flags.integer("warmup");
      for (int64_t i = 0; i < (graphed ? std::max<int64_t>(1, warmup) : warmup); ++i) step();  // a capture wants one
      if (graphed) {
        const double eager_loss = loss.item();
        graph = std::make_unique<cuda::CUDAGraph>(device);
        graph->capture(body);
        step();
        std::printf("%-12s %-9s captured after a step of loss %.6f; first replay's loss %.6f\n",
                    name.c_str(), mode_name.c_str(), eager_loss, loss.item());
      }
      std::vector<double> ms;
      bench::profiled(device, [&] {
        for (int64_t i = 0; i < flags.integer("steps"); ++i) {
          auto t0 = std::chrono::steady_clock::now();
          step();
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
      });
      TG_CHECK(!ms.empty(), "train_step_bench", "--steps wants at least 1, got ", flags.integer("steps"));
      std::sort(ms.begin(), ms.end());
      double med = ms[ms.size() / 2];
      // Peak bytes of live tensors over the steps, the model included (either allocator counts).
      const double peak_mib = memory_stats(device).peak_bytes / kMiB;
      // Where the peak goes: the model's tensors, LoRA's gradients and AdamW moments (float32,
      // three times its parameters), the checkpoints (one [B, T, d] tensor a layer in the model's
      // dtype), and the rest: the recomputed layer's activations, the loss, gradients in flight.
      const ModelBytes bytes = model_bytes(*model);
      const double ckpt_bytes = checkpointing ? static_cast<double>(c.num_hidden_layers * B * T * c.hidden_size) *
                                                    static_cast<double>(element_size(dtype))
                                              : 0.0;
      const double held = bytes.quant + bytes.dense + bytes.workspace + 4 * bytes.lora + ckpt_bytes;
      const double per_layer = bytes.layer0 + 4 * bytes.layer0_lora +
                               ckpt_bytes / static_cast<double>(std::max<int64_t>(1, c.num_hidden_layers));
      const double extrapolated_mib =
          extrapolate ? peak_mib + static_cast<double>(extrapolate - c.num_hidden_layers) * per_layer / kMiB : NAN;
      std::printf("%-12s %-9s memory: quantised linears %.2f GiB, dense parameters %.2f GiB, workspace %.2f GiB, LoRA "
                  "%.3f GiB (+ %.3f GiB of gradients and AdamW moments), checkpoints %.2f GiB; peak %.2f GiB, of "
                  "which %.2f GiB beyond those (activations of the recomputed layer, the loss, gradients)\n",
                  name.c_str(), mode_name.c_str(), bytes.quant / kGiB, bytes.dense / kGiB, bytes.workspace / kGiB,
                  bytes.lora / kGiB, 3 * bytes.lora / kGiB, ckpt_bytes / kGiB, peak_mib / 1024,
                  peak_mib / 1024 - held / kGiB);
      if (extrapolate)
        std::printf("%-12s %-9s extrapolated to %lld layers: %.2f GiB (+ %lld x %.3f GiB a layer: weights %.3f, LoRA "
                    "state %.3f, checkpoint %.3f)\n",
                    name.c_str(), mode_name.c_str(), static_cast<long long>(extrapolate), extrapolated_mib / 1024,
                    static_cast<long long>(extrapolate - c.num_hidden_layers), per_layer / kGiB, bytes.layer0 / kGiB,
                    4 * bytes.layer0_lora / kGiB,
                    ckpt_bytes / static_cast<double>(std::max<int64_t>(1, c.num_hidden_layers)) / kGiB);
      const double tflops = flops.total() / (med / 1e3) / 1e12;
      std::printf("%-12s %-9s %-7s %-5s %10.2f %10.2f %10.0f %8d %10.1f %10.3g\n", name.c_str(), mode_name.c_str(),
                  device.str().c_str(), flags.str("dtype").c_str(), med, ms.front(),
                  static_cast<double>(B * T) / (med / 1e3), get_num_threads(), peak_mib, tflops);
      rows.add()
          .str("config", name)
          .str("mode", mode_name)
          .str("device", device.is_cuda() ? "cuda" : "cpu")
          .str("dtype", flags.str("dtype"))
          .num("ms", med, 5)
          .num("min_ms", ms.front(), 5)
          .num("tok_s", static_cast<double>(B * T) / (med / 1e3), 5)
          .num("threads", get_num_threads())
          .num("peak_mib", peak_mib, 5)
          .num("tflops", tflops, 4);
      bench::JsonRow& real = real_rows.add();
      real.str("impl", "tapegrad")
          .str("config", name)
          .str("mode", mode)
          .boolean("graph", graphed)
          .boolean("ckpt", checkpointing)
          .boolean("sdp_deterministic", flags.boolean("sdp-deterministic"))
          .boolean("adjacent_weights", flags.boolean("adjacent-weights"))
          .str("dtype", flags.str("dtype"))
          .num("batch", static_cast<double>(B))
          .num("seq", static_cast<double>(T))
          .num("ms", med, 5)
          .num("min_ms", ms.front(), 5)
          .num("tok_s", static_cast<double>(B * T) / (med / 1e3), 5)
          .num("tflop", flops.total() / 1e12, 5)
          .num("tflops", tflops, 4)
          .num("peak_mib", peak_mib, 5);
      if (flags.boolean("qlora") || flags.boolean("fp8"))  // issue 37's rows (bench/make_results.py's QLoRA section)
        real.str("quant", quant)
            .num("layers", static_cast<double>(c.num_hidden_layers))
            .num("quant_mib", bytes.quant / kMiB, 5)
            .num("dense_mib", bytes.dense / kMiB, 5)
            .num("workspace_mib", bytes.workspace / kMiB, 5)
            .num("lora_state_mib", 4 * bytes.lora / kMiB, 5)
            .num("ckpt_mib", ckpt_bytes / kMiB, 5)
            .num("extrapolated_layers", static_cast<double>(extrapolate))
            .num("peak_mib_extrapolated", extrapolated_mib, 5);
    }
    rows.write(flags.str("json"));
    real_rows.write(flags.str("real-json"));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
