// LoRA fine-tuning of a Llama checkpoint: the script to copy and adapt.
//
//   lora_finetune --base out/toy/base.safetensors --config tiny --data my_text.txt --steps 300
//
// Loads the base weights (safetensors, transformers' names), wraps the target Linear layers
// with LoRA (everything else frozen, norms included), trains the adapters with AdamW, linear
// warmup + cosine decay and gradient clipping, evaluates, and saves a peft adapter. Along the
// way: a live progress line, a CSV + SVG loss log, a checkpoint every --save-every steps (and
// on Ctrl-C), --resume that continues bit-exactly, and optionally the merged model. With
// --dtype bf16 the frozen base runs in bfloat16 and the adapters train in float32; on a GPU the
// report ends with the peak GPU memory.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "examples/common/checkpoint.h"
#include "examples/common/data.h"
#include "examples/common/evaluate.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "examples/common/train_log.h"
#include "nn/checkpoint.h"
#include "io/safetensors.h"
#include "nn/llama.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

std::atomic<bool> interrupted{false};
void on_sigint(int) { interrupted = true; }

int run(int argc, char** argv) {
  examples::Flags flags("lora_finetune", "LoRA fine-tuning of a Llama checkpoint on a text file (bytes as tokens).");
  flags.add("base", "out/toy/base.safetensors", "base model weights (safetensors; examples/toy_transformer writes one)")
      .add("config", "auto", "model shape of the base: tiny | small | bench-135m (auto: the one the base records)")
      .add("data", "", "training text (default: the generated 'logbook' corpus); the last 10% validates")
      .add("out", "out/lora", "directory for the adapter, logs and checkpoints")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "f32", examples::kDtypeHelp)
      .add("rank", "8", "LoRA rank r")
      .add("alpha", "16", "LoRA alpha (scale alpha / r)")
      .add("dropout", "0", "dropout on the LoRA path")
      .add("targets", "q_proj,k_proj,v_proj,o_proj", "comma-separated module names to adapt")
      .add("lr", "2e-3", "peak learning rate")
      .add("weight-decay", "0.01", "AdamW weight decay")
      .add("warmup", "30", "linear warmup steps")
      .add("steps", "300", "optimizer steps in all")
      .add("batch", "8", "sequences per step")
      .add("seq", "128", "bytes per sequence (at most the config's context)")
      .add("clip", "1.0", "gradient clipping by global norm (0: off)")
      .add("eval-every", "100", "validate every N steps (0: only at the end)")
      .add("eval-batches", "8", "validation batches")
      .add("save-every", "100", "write a checkpoint every N steps (0: only at the end and on Ctrl-C)")
      .add("stop-at", "0", "stop after this step as if interrupted (checkpoint written); 0: run to the end")
      .add("resume", "false", "continue from <out>/checkpoint.safetensors")
      .add("merge", "false", "also write <out>/merged.safetensors (LoRA folded into the base weights, in --dtype)")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("seed", "0", "seed of the LoRA init and the data order");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const std::string dev = flags.str("device");
  if (dev != "auto" && dev != "cpu" && dev != "cuda")
    throw examples::UsageError("--device wants cpu, cuda or auto, got '" + dev + "'\n" + flags.usage());
  Device device = dev == "auto" ? default_device() : dev == "cuda" ? Device::cuda() : Device::cpu();
  const DType dtype = examples::dtype_flag(flags);
  if (flags.integer("threads") > 0) set_num_threads(static_cast<int>(flags.integer("threads")));
  const int64_t steps = flags.integer("steps"), batch = flags.integer("batch"), seq = flags.integer("seq");
  if (steps < 1 || batch < 1 || seq < 2)
    throw examples::UsageError("--steps and --batch want at least 1, --seq at least 2\n" + flags.usage());
  const std::string out = flags.str("out"), ckpt = out + "/checkpoint.safetensors";
  fs::create_directories(out);

  peft::LoraConfig lora{.r = flags.integer("rank"), .lora_alpha = flags.number("alpha"),
                        .lora_dropout = flags.number("dropout"), .target_modules = flags.list("targets")};

  // The base model, frozen, with LoRA on the targets.
  if (!fs::exists(flags.str("base")))
    throw Error("lora_finetune: no base checkpoint at '" + flags.str("base") +
                "' (run examples/toy_transformer first, or pass --base)");
  std::string config_name = flags.str("config");
  if (config_name == "auto") {  // toy_transformer records the config in the checkpoint's metadata
    auto meta = safetensors::load_file_with_metadata(flags.str("base")).metadata;
    config_name = meta.count("config") ? meta["config"] : "tiny";
  }
  nn::LlamaConfig config = nn::LlamaConfig::by_name(config_name);
  if (seq > config.max_position_embeddings)
    throw examples::UsageError("--seq " + std::to_string(seq) + " exceeds the config's context of " +
                               std::to_string(config.max_position_embeddings) + "\n" + flags.usage());
  auto model = std::make_shared<nn::LlamaForCausalLM>(config);
  nn::load_state_dict_file(*model, flags.str("base"));
  model->to(dtype);  // before apply_lora, which then makes float32 adapters for a bfloat16 base
  Generator init(static_cast<uint64_t>(flags.integer("seed")));
  peft::apply_lora(*model, lora, init);
  model->to(device);
  peft::print_trainable_parameters(*model);

  std::string text = flags.str("data").empty() ? examples::generate_corpus("logbook", 1, 1 << 20)
                                               : examples::read_text_file(flags.str("data"));
  examples::ByteDataset data(text);
  Generator data_gen(static_cast<uint64_t>(flags.integer("seed")) + 100);

  optim::AdamW opt(model->named_trainable_parameters(),
                   {.lr = flags.number("lr"), .weight_decay = flags.number("weight-decay")});
  optim::WarmupCosineLR schedule(opt, std::min(flags.integer("warmup"), steps), steps, 0.1);
  int64_t start = 0;
  if (flags.boolean("resume")) {
    start = examples::load_training_checkpoint(ckpt, *model, opt, data_gen);
    schedule.set_step(start);
    std::printf("resumed from %s at step %lld\n", ckpt.c_str(), static_cast<long long>(start));
  }

  std::signal(SIGINT, on_sigint);
  if (device.is_cuda()) reset_peak_memory_stats(device);  // the peak of training, model included
  examples::TrainLog log("lora", steps, batch * seq, out + "/loss.csv", /*append=*/start > 0);
  const int64_t eval_every = flags.integer("eval-every"), save_every = flags.integer("save-every"),
                stop_at = flags.integer("stop-at");
  const int eval_batches = static_cast<int>(flags.integer("eval-batches"));
  const double clip = flags.number("clip");
  for (int64_t step = start + 1; step <= steps; ++step) {
    Tensor ids = data.batch(true, batch, seq, data_gen, device);
    opt.zero_grad();
    Tensor loss = model->loss(ids, ids);
    loss.backward();
    if (clip > 0) optim::clip_grad_norm_(model->trainable_parameters(), clip);
    opt.step();
    schedule.step();
    log.step(step, loss.item(), opt.lr());
    if (eval_every > 0 && step % eval_every == 0 && step < steps)
      log.eval(step, "validation", examples::evaluate(*model, data, batch, seq, eval_batches, device));
    bool stop = interrupted || step == stop_at;
    if (stop || (save_every > 0 && step % save_every == 0) || step == steps)
      examples::save_training_checkpoint(ckpt, *model, opt, step, data_gen);
    if (stop) {
      log.finish();
      std::printf("stopped at step %lld; checkpoint in %s (continue with --resume)\n", static_cast<long long>(step),
                  ckpt.c_str());
      return interrupted ? 130 : 0;
    }
  }
  log.eval(steps, "validation", examples::evaluate(*model, data, batch, seq, eval_batches, device));
  log.finish();

  peft::save_adapter(*model, out + "/adapter", lora);
  std::printf("adapter: %s/adapter (adapter_model.safetensors + adapter_config.json)\n", out.c_str());
  if (device.is_cuda()) std::printf("%s\n", examples::peak_memory_line(device).c_str());
  if (flags.boolean("merge")) {
    peft::merge_and_unload(*model);
    nn::save_state_dict(*model, out + "/merged.safetensors");
    std::printf("merged model: %s/merged.safetensors\n", out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
