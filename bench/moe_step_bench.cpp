// A mixture of experts' LoRA or QLoRA training step at real size (issue 49): the model a
// config.json describes (Qwen3-MoE, Mixtral, gpt-oss: tests/fixtures/hf/configs holds the released
// ones), random weights in bf16 on the device (bench/real_llama.h's pool fill), --layers of its
// layers (the peak extrapolated to all of them: one layer's weights and checkpoint each), LoRA r 16
// on q / k / v / o and, as peft's target_parameters, on the experts' gate_up_proj and down_proj;
// qlora: every Linear but the head and every expert weight in NF4 (double quantisation, bf16
// compute). Gradient checkpointing on; the loss with the router's load-balancing term where the
// config asks for it. The median of --steps timed steps after --warmup, in one cudaProfilerStart /
// Stop window with the timer's 3 warm-up steps (bench/timeline_census.py --steps <steps + 3>, each
// step after a 256 MB L2 flush). Rows {config, mode, layers, batch, seq, ms, tokens_per_s,
// peak_mib, peak_mib_extrapolated} into --json (bench/results/moe_step.json);
// bench/torch_moe_step.py times transformers + peft alike.
//   moe_step_bench --config-json tests/fixtures/hf/configs/gpt-oss-20b.json --layers 4 --batch 4 --seq 2048
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/bench_measure.h"
#include "bench/real_llama.h"
#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "io/json.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;

namespace {

constexpr double kMiB = 1048576.0;

// config.json with only its first `layers` layers (0: all): the per-layer lists cut to match.
std::string with_layers(const std::string& text, int64_t layers, int64_t context, int64_t* full) {
  json::Value config = json::parse(text);
  *full = config.at("num_hidden_layers").as_int("num_hidden_layers");
  if (layers > 0 && layers < *full) {
    config.set("num_hidden_layers", layers);
    if (const json::Value* types = config.find("layer_types"); types && types->is_array()) {
      std::vector<json::Value> kept(types->as_array().begin(), types->as_array().begin() + layers);
      config.set("layer_types", json::Value::array(std::move(kept)));
    }
    if (const json::Value* dense = config.find("mlp_only_layers"); dense && dense->is_array()) {
      json::Value kept = json::Value::array();
      for (const json::Value& l : dense->as_array())
        if (l.as_int("mlp_only_layers") < layers) kept.push_back(l);
      config.set("mlp_only_layers", kept);
    }
  }
  if (config.at("max_position_embeddings").as_int("max_position_embeddings") < context)
    config.set("max_position_embeddings", context);
  return json::dump(config);
}

// Bytes of the parameters and buffers under `prefix` (a decoder layer, as it is held).
double bytes_under(nn::Module& model, const std::string& prefix) {
  double bytes = 0;
  for (const auto& [name, t] : model.named_parameters())
    if (name.starts_with(prefix)) bytes += static_cast<double>(t.nbytes());
  for (const auto& [name, t] : model.named_buffers())
    if (name.starts_with(prefix) && t.defined()) bytes += static_cast<double>(t.nbytes());
  return bytes;
}

}  // namespace

int run(int argc, char** argv) {
  examples::Flags flags("moe_step_bench", "Times a LoRA / QLoRA step of a mixture-of-experts config.json.");
  flags.add("config-json", "tests/fixtures/hf/configs/gpt-oss-20b.json", "the model's config.json")
      .add("layers", "0", "decoder layers to build (0: all); the peak is extrapolated to all")
      .add("device", "cuda", "cpu | cuda | auto")
      .add("modes", "lora,qlora", "lora (bf16 base) and / or qlora (NF4 base and experts)")
      .add("batch", "4", "sequences a step")
      .add("seq", "2048", "tokens a sequence")
      .add("r", "16", "LoRA rank")
      .add("warmup", "2", "untimed steps")
      .add("steps", "5", "timed steps (the median is reported)")
      .add("threads", "2", "CPU threads")
      .add("json", "", "also write the rows to this file (bench/results/moe_step.json's rows)");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const Device device = examples::device_flag(flags);
  set_num_threads(static_cast<int>(flags.integer("threads", 1, 1024)));
  const std::string path = flags.str("config-json");
  const int64_t B = flags.integer("batch", 1, 4096), T = flags.integer("seq", 1, INT32_MAX);
  const int64_t r = flags.integer("r", 1, 4096), layers = flags.integer("layers", 0, 1024);
  const int warmup = static_cast<int>(flags.integer("warmup", 0, 1000)),
            steps = static_cast<int>(flags.integer("steps", 1, 1000));
  int64_t full_layers = 0;
  const nn::ModelBuilder builder = nn::parse_pretrained_config(with_layers(examples::read_text_file(path), layers, T, &full_layers), path);
  const std::filesystem::path file(path);  // a folder's config.json is named by its folder
  const std::string name = (file.stem() == "config" ? file.parent_path().filename() : file.stem()).string();
  bench::JsonRows rows("moe_step_bench", bench::machine(device));
  bench::Timer timer(device);
  std::printf("%-16s %-6s %6s %12s %10s %10s %10s %14s\n", "config", "mode", "layers", "batch x seq", "ms", "tok/s",
              "peak MiB", "all layers MiB");
  for (const std::string& mode : flags.list("modes")) {
    if (mode != "lora" && mode != "qlora") throw examples::UsageError("--modes wants lora and / or qlora, got '" + mode + "'\n");
    Generator gen(0);
    std::shared_ptr<nn::CausalLM> model;
    {
      nn::init::SkipInitGuard no_init({.dtype = kBFloat16, .device = device});
      model = builder.build(gen);
    }
    model->to(kBFloat16, device);
    bench::fill_fast(*model, device, 0.02, gen);
    if (mode == "qlora")
      nn::replace_with_4bit_linear(*model, {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
                                            .compute_dtype = kBFloat16});
    peft::apply_lora(*model, {.r = r, .lora_alpha = static_cast<double>(2 * r),
                              .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"},
                              .target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}});
    model->gradient_checkpointing_enable();
    model->train();
    optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-5});
    const Tensor ids = randint(0, model->dims().vocab_size, {B, T}, gen, {.dtype = kInt64, .device = device});
    auto step = [&] {
      opt.zero_grad();
      model->loss(ids, ids).backward();
      opt.step();
    };
    for (int i = 0; i < warmup; ++i) step();
    synchronize(device);
    reset_peak_memory_stats(device);
    double ms = 0;
    bench::profiled(device, [&] { ms = timer.median_ms(step, steps); });
    const double peak = static_cast<double>(memory_stats(device).peak_bytes) / kMiB;
    // Each layer not built would add its weights and its checkpoint (a [B, T, hidden] bf16 input).
    const int64_t built = model->dims().num_layers;
    const double hidden = static_cast<double>(model->input_embeddings().weight.shape()[1]);
    const double per_layer = (bytes_under(*model, "model.layers.0.") + static_cast<double>(B * T) * hidden * 2) / kMiB;
    const double extrapolated = peak + static_cast<double>(full_layers - built) * per_layer;
    std::printf("%-16s %-6s %6lld %5lld x %-5lld %10.1f %10.0f %10.0f %14.0f\n", name.c_str(), mode.c_str(),
                static_cast<long long>(built), static_cast<long long>(B), static_cast<long long>(T), ms,
                static_cast<double>(B * T) / (ms / 1e3), peak, extrapolated);
    std::fflush(stdout);
    rows.add()
        .str("impl", "tapegrad")
        .str("config", name)
        .str("mode", mode)
        .num("layers", static_cast<double>(built))
        .num("full_layers", static_cast<double>(full_layers))
        .num("batch", static_cast<double>(B))
        .num("seq", static_cast<double>(T))
        .num("ms", ms, 5)
        .num("tokens_per_s", static_cast<double>(B * T) / (ms / 1e3), 5)
        .num("peak_mib", peak, 5)
        .num("peak_mib_extrapolated", extrapolated, 5);
  }
  rows.write(flags.str("json"));
  return 0;
}

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
