// One training step of the toy transformer (forward, backward, AdamW), full fine-tuning and
// LoRA, timed on the host clock: median of --steps after --warmup. Prints one row per mode in
// the same shape as ../shared/reference/torch_toy_lora.py, so bench/run_cpu_step.sh can put
// both in one table. --dtype bf16: LoRA steps with the frozen base in bfloat16 and float32
// adapters (peft's mixed precision); full steps with every parameter and gradient in bfloat16
// (AdamW keeps float32 moments for them, but there are no float32 master weights).
// --gradient-checkpointing: each decoder layer under tg::checkpoint (rows name the mode
// "lora+ckpt", "full+ckpt"), for the peak memory it saves and the recomputation it costs.
// --cuda-graph: after the warm-up, the step is captured once as a CUDA graph (tg::cuda::CUDAGraph)
// and the timed steps are its replays (rows "lora+graph", "full+graph"); the loss of the last
// eager and replayed steps are printed so a run shows the replay trains.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "bench/bench_json.h"
#include "core/cuda/runtime.h"
#include "core/cuda_graph.h"
#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "nn/llama.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

int main(int argc, char** argv) {
  examples::Flags flags("train_step_bench", "Times one training step of a toy-transformer config.");
  flags.add("config", "tiny", "tiny | small | bench-135m")
      .add("device", "cpu", "cpu | cuda")
      .add("dtype", "f32", "f32 | bf16 (see the top of bench/train_step_bench.cpp)")
      .add("threads", "2", "CPU threads")
      .add("warmup", "3", "untimed steps")
      .add("steps", "20", "timed steps (the median is reported)")
      .add("modes", "full,lora", "full and/or lora")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward")
      .add("cuda-graph", "false", "time replays of the step captured as one CUDA graph (GPU)")
      .add("json", "", "also write the rows to this file (bench/results/train_step.json's rows)");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    set_num_threads(static_cast<int>(flags.integer("threads")));
    Device device = flags.str("device") == "cuda" ? Device::cuda() : Device::cpu();
    const DType dtype = examples::dtype_flag(flags);
    nn::LlamaConfig c = nn::LlamaConfig::by_name(flags.str("config"));
    const int64_t B = examples::default_batch_size(flags.str("config")), T = c.max_position_embeddings;
    const bool checkpointing = flags.boolean("gradient-checkpointing"), graphed = flags.boolean("cuda-graph");
    std::printf("%-12s %-9s %-7s %-5s %10s %10s %10s %8s %10s\n", "config", "mode", "device", "dtype", "ms/step",
                "min ms", "tok/s", "threads", "peak MiB");
    bench::JsonRows rows("train_step_bench", bench::machine(device));
    for (const std::string& mode : flags.list("modes")) {
      Generator gen(0);
      auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
      model->to(dtype);
      if (mode == "lora") peft::apply_lora(*model, {});
      model->to(device);
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
                    flags.str("config").c_str(), mode_name.c_str(), eager_loss, loss.item());
      }
      std::vector<double> ms;
      for (int64_t i = 0; i < flags.integer("steps"); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        step();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      double med = ms[ms.size() / 2];
      // Peak bytes of live tensors over the steps, the model included (either allocator counts).
      const double peak_mib = memory_stats(device).peak_bytes / 1048576.0;
      std::printf("%-12s %-9s %-7s %-5s %10.2f %10.2f %10.0f %8d %10.1f\n", flags.str("config").c_str(), mode_name.c_str(),
                  device.str().c_str(), flags.str("dtype").c_str(), med, ms.front(),
                  static_cast<double>(B * T) / (med / 1e3), get_num_threads(), peak_mib);
      rows.add()
          .str("config", flags.str("config"))
          .str("mode", mode_name)
          .str("device", device.is_cuda() ? "cuda" : "cpu")
          .str("dtype", flags.str("dtype"))
          .num("ms", med, 5)
          .num("min_ms", ms.front(), 5)
          .num("tok_s", static_cast<double>(B * T) / (med / 1e3), 5)
          .num("threads", get_num_threads())
          .num("peak_mib", peak_mib, 5);
    }
    rows.write(flags.str("json"));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
