// Data-parallel training steps of a toy-transformer config on N GPUs (issue 27's tokens/s):
// each rank runs B sequences of T tokens (B: the config's batch, as torch DDP is measured: the
// per-GPU batch fixed), DataParallel all-reduces the trainable gradients, AdamW steps. Run as
// ranks: `data_parallel_bench --nproc N ...` (or examples/launch, or torchrun). Rank 0 prints
// the median step and the tokens/s of all ranks together and writes the rows
// (bench/results/data_parallel.json: impl, gpus, mode, tok_s).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "bench/bench_json.h"
#include "core/cuda/runtime.h"
#include "distributed/data_parallel.h"
#include "examples/common/data.h"
#include "examples/common/data_parallel.h"
#include "examples/common/flags.h"
#include "examples/common/launcher.h"
#include "examples/common/precision.h"
#include "nn/models/llama.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

int run(int argc, char** argv) {
  examples::Flags flags("data_parallel_bench", "Times data-parallel training steps (NCCL) of a toy-transformer config.");
  flags.add("config", "bench-135m", "tiny | small | bench-135m")
      .add("dtype", "bf16", "f32 | bf16 (as bench/train_step_bench)")
      .add("warmup", "5", "untimed steps")
      .add("steps", "20", "timed steps (the median is reported)")
      .add("modes", "lora,full", "lora and/or full")
      .add("bucket-mb", "25", "DataParallel's bucket cap in MiB")
      .add("json", "", "rank 0 writes the rows to this file");
  examples::add_nproc_flag(flags);
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  if (!distributed::launched()) {  // also one rank: the 1-GPU row goes through NCCL too
    if (flags.integer("nproc") < 1) throw examples::UsageError("--nproc wants at least 1, got " + flags.str("nproc") + "\n");
    return examples::launch_ranks(static_cast<int>(flags.integer("nproc")), examples::self_executable(),
                                  std::vector<std::string>(argv + 1, argv + argc));
  }
  Device device = Device::cuda();
  const examples::Ranks ranks = examples::join_if_launched(device, "cuda");
  const DType dtype = examples::dtype_flag(flags);
  nn::LlamaConfig c = nn::LlamaConfig::by_name(flags.str("config"));
  const int64_t B = examples::default_batch_size(flags.str("config")), T = c.max_position_embeddings;
  if (ranks.main())
    std::printf("%-12s %-5s %-5s %5s %10s %10s %12s\n", "config", "mode", "dtype", "gpus", "ms/step", "min ms", "tok/s");
  bench::JsonRows rows("data_parallel", bench::machine(device));
  for (const std::string& mode : flags.list("modes")) {
    Generator gen(0);
    auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
    model->to(dtype);
    if (mode == "lora") peft::apply_lora(*model, {});
    model->to(device);
    distributed::DataParallel dp(model->named_trainable_parameters(), *ranks.comm,
                                 {.bucket_cap_mb = flags.number("bucket-mb")});
    optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    Generator data(1 + static_cast<uint64_t>(ranks.rank));  // each rank its own rows
    Tensor ids = randint(0, c.vocab_size, {B, T}, data, {.dtype = kInt64, .device = device});
    auto step = [&] {
      opt.zero_grad();
      model->loss(ids, ids).backward();
      dp.sync_gradients();
      opt.step();
      synchronize(device);
    };
    for (int64_t i = 0; i < flags.integer("warmup"); ++i) step();
    std::vector<double> ms;
    for (int64_t i = 0; i < flags.integer("steps"); ++i) {
      auto t0 = std::chrono::steady_clock::now();
      step();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    // The slowest rank sets the pace: the step is the largest median.
    std::sort(ms.begin(), ms.end());
    std::vector<double> medians(static_cast<size_t>(ranks.world), 0.0);
    medians[static_cast<size_t>(ranks.rank)] = ms[ms.size() / 2];
    medians = examples::sum_over_ranks(ranks, medians, device);
    const double med = *std::max_element(medians.begin(), medians.end());
    const double tok_s = static_cast<double>(ranks.world * B * T) / (med / 1e3);
    if (ranks.main())
      std::printf("%-12s %-5s %-5s %5d %10.2f %10.2f %12.0f\n", flags.str("config").c_str(), mode.c_str(),
                  flags.str("dtype").c_str(), ranks.world, med, ms.front(), tok_s);
    rows.add()
        .str("impl", "tapegrad")
        .num("gpus", ranks.world)
        .str("mode", mode)
        .str("config", flags.str("config"))
        .str("dtype", flags.str("dtype"))
        .num("batch_per_gpu", static_cast<double>(B))
        .num("seq", static_cast<double>(T))
        .num("ms", med, 5)
        .num("tok_s", tok_s, 5);
  }
  if (ranks.main()) rows.write(flags.str("json"));
  return 0;
}

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
