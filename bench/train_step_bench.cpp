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
// off` sees them alone (scripts/gpu/run_real_step.sh's census).
// --cudnn-sdp false: attention on tapegrad's flash kernels instead of cuDNN's (tg::enable_cudnn_sdp).
// --json: rows as bench/results/train_step-*.json; --real-json: rows as issue 36's
// bench/results/train_step-h200-real.json (impl, config, mode, graph, ckpt, ms, tflops, peak_mib).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "bench/bench_json.h"
#include "bench/real_llama.h"
#include "core/cuda/runtime.h"
#include "core/cuda_graph.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/file.h"
#include "nn/llama.h"
#include "nn/pretrained.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"
#ifdef TG_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

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
    const nn::PretrainedConfig parsed = nn::parse_pretrained_config(std::string(bytes.begin(), bytes.end()), name);
    TG_CHECK(std::holds_alternative<nn::LlamaConfig>(parsed), "train_step_bench",
             "--config-json wants a Llama config.json (LlamaForCausalLM), got another architecture in ", name);
    b.config = std::get<nn::LlamaConfig>(parsed);
    b.batch = 1;
    b.seq = std::min<int64_t>(4096, b.config.max_position_embeddings);
  }
  const int64_t batch = flags.integer("batch"), seq = flags.integer("seq");
  TG_CHECK(batch >= 0 && seq >= 0 && seq <= b.config.max_position_embeddings, "train_step_bench",
           "--batch and --seq want 0 (the config's) or a positive size, --seq at most max_position_embeddings ",
           b.config.max_position_embeddings, ", got --batch ", batch, " --seq ", seq);
  if (batch) b.batch = batch;
  if (seq) b.seq = seq;
  return b;
}

void profiler(bool start, Device device) {
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) TG_CHECK((start ? cudaProfilerStart() : cudaProfilerStop()) == cudaSuccess, "train_step_bench",
                                 "cudaProfilerStart / Stop failed");
#else
  (void)start, (void)device;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("train_step_bench", "Times one training step of a Llama config.");
  flags.add("config", "tiny", "tiny | small | bench-135m | llama-1b | llama3-8b")
      .add("config-json", "", "a Llama config.json instead of --config")
      .add("batch", "0", "sequences a step (0: the config's)")
      .add("seq", "0", "tokens a sequence (0: the config's)")
      .add("build", "fast", "fast (bench::fast_llama) | constructor (LlamaForCausalLM's, host init)")
      .add("device", "cpu", "cpu | cuda")
      .add("dtype", "f32", "f32 | bf16 (see the top of bench/train_step_bench.cpp)")
      .add("threads", "2", "CPU threads")
      .add("warmup", "3", "untimed steps")
      .add("steps", "20", "timed steps (the median is reported)")
      .add("modes", "full,lora", "full and/or lora")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward")
      .add("cuda-graph", "false", "time replays of the step captured as one CUDA graph (GPU)")
      .add("cudnn-sdp", "true", "attention through cuDNN where it takes the call (tg::enable_cudnn_sdp)")
      .add("json", "", "also write the rows to this file (bench/results/train_step.json's rows)")
      .add("real-json", "", "also write the rows to this file as issue 36's real-size rows");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    set_num_threads(static_cast<int>(flags.integer("threads")));
    enable_cudnn_sdp(flags.boolean("cudnn-sdp"));
    Device device = flags.str("device") == "cuda" ? Device::cuda() : Device::cpu();
    const DType dtype = examples::dtype_flag(flags);
    std::string name;
    const bench::BenchLlama bl = config_of(flags, name);
    const nn::LlamaConfig& c = bl.config;
    const int64_t B = bl.batch, T = bl.seq;
    const std::string build = flags.str("build");
    if (build != "fast" && build != "constructor")
      throw examples::UsageError("--build wants fast or constructor, got '" + build + "'\n" + flags.usage());
    const bool checkpointing = flags.boolean("gradient-checkpointing"), graphed = flags.boolean("cuda-graph");
    std::printf("%-12s %-9s %-7s %-5s %10s %10s %10s %8s %10s %10s\n", "config", "mode", "device", "dtype", "ms/step",
                "min ms", "tok/s", "threads", "peak MiB", "TFLOP/s");
    bench::JsonRows rows("train_step_bench", bench::machine(device)), real_rows("train_step_real", bench::machine(device));
    for (const std::string& mode : flags.list("modes")) {
      if (mode != "lora" && mode != "full")
        throw examples::UsageError("--modes wants full and/or lora, got '" + mode + "'\n" + flags.usage());
      Generator gen(0);
      const auto t_build = std::chrono::steady_clock::now();
      std::shared_ptr<nn::LlamaForCausalLM> model;
      if (build == "fast") {
        model = bench::fast_llama(c, dtype, device);
      } else {
        model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
        model->to(dtype, device);
      }
      if (mode == "lora") peft::apply_lora(*model, {});
      synchronize(device);
      const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();
      const bench::StepFlops flops = bench::step_flops(c, B, T, mode == "lora");
      std::printf("%-12s %-9s built (%s) in %.1f s; %.3g parameters; model FLOPs a step %.4g TFLOP (linear %.4g, attention %.4g)\n",
                  name.c_str(), mode.c_str(), build.c_str(), build_s, static_cast<double>(model->num_parameters()),
                  flops.total() / 1e12, flops.linear / 1e12, flops.attention / 1e12);
      if (checkpointing) model->gradient_checkpointing_enable();
      const std::string mode_name = mode + (checkpointing ? "+ckpt" : "") + (graphed ? "+graph" : "");
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
      profiler(true, device);
      for (int64_t i = 0; i < flags.integer("steps"); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        step();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      profiler(false, device);
      TG_CHECK(!ms.empty(), "train_step_bench", "--steps wants at least 1, got ", flags.integer("steps"));
      std::sort(ms.begin(), ms.end());
      double med = ms[ms.size() / 2];
      // Peak bytes of live tensors over the steps, the model included (either allocator counts).
      const double peak_mib = memory_stats(device).peak_bytes / 1048576.0;
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
      real_rows.add()
          .str("impl", "tapegrad")
          .str("config", name)
          .str("mode", mode)
          .boolean("graph", graphed)
          .boolean("ckpt", checkpointing)
          .str("dtype", flags.str("dtype"))
          .num("batch", static_cast<double>(B))
          .num("seq", static_cast<double>(T))
          .num("ms", med, 5)
          .num("min_ms", ms.front(), 5)
          .num("tok_s", static_cast<double>(B * T) / (med / 1e3), 5)
          .num("tflop", flops.total() / 1e12, 5)
          .num("tflops", tflops, 4)
          .num("peak_mib", peak_mib, 5);
    }
    rows.write(flags.str("json"));
    real_rows.write(flags.str("real-json"));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
