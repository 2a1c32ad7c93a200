// One training step of the toy transformer (forward, backward, AdamW), full fine-tuning and
// LoRA, timed on the host clock: median of --steps after --warmup. Prints one row per mode in
// the same shape as ../shared/reference/torch_toy_lora.py, so bench/run_cpu_step.sh can put
// both in one table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "examples/common/flags.h"
#include "nn/llama.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

int main(int argc, char** argv) {
  examples::Flags flags("train_step_bench", "Times one training step of a toy-transformer config.");
  flags.add("config", "tiny", "tiny | small | bench-135m")
      .add("device", "cpu", "cpu | cuda")
      .add("threads", "2", "CPU threads")
      .add("warmup", "3", "untimed steps")
      .add("steps", "20", "timed steps (the median is reported)")
      .add("modes", "full,lora", "full and/or lora");
  try {
    if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
    set_num_threads(static_cast<int>(flags.integer("threads")));
    Device device = flags.str("device") == "cuda" ? Device::cuda() : Device::cpu();
    nn::LlamaConfig c = nn::LlamaConfig::by_name(flags.str("config"));
    const int64_t B = c.batch_size, T = c.max_position_embeddings;
    std::printf("%-12s %-5s %-7s %10s %10s %10s %8s\n", "config", "mode", "device", "ms/step", "min ms", "tok/s", "threads");
    for (const std::string& mode : flags.list("modes")) {
      Generator gen(0);
      auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
      if (mode == "lora") peft::apply_lora(*model, {});
      model->to(device);
      optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3, .weight_decay = 0.01});
      Tensor ids = randint(0, c.vocab_size, {B, T}, gen, {.dtype = kInt64, .device = device});
      auto step = [&] {
        opt.zero_grad();
        Tensor loss = model->loss(ids, ids);
        loss.backward();
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
      std::sort(ms.begin(), ms.end());
      double med = ms[ms.size() / 2];
      std::printf("%-12s %-5s %-7s %10.2f %10.2f %10.0f %8d\n", flags.str("config").c_str(), mode.c_str(),
                  device.str().c_str(), med, ms.front(), static_cast<double>(B * T) / (med / 1e3), get_num_threads());
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
