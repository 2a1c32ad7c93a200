// LoRA fine-tuning of a causal LM from the command line: train::Trainer driven by flags.
//
//   lora_finetune --base TinyLlama-folder --data train.jsonl --steps 300
//   lora_finetune --base Qwen2.5-0.5B-Instruct --data chat.jsonl   # {"messages": [...]} rows, in the folder's dtype
//   lora_finetune --base out/toy/base.safetensors --data my_text.txt             # the toy, bytes as tokens
//
// --base is a Hugging Face folder (any family nn::from_pretrained reads, with its tokenizer) or a
// toy_transformer checkpoint. The data: JSONL ({"text"}, {"prompt", "completion"} with the prompt
// not learned, or conversations ({"messages"} with tools, ShareGPT's {"conversations"}) rendered
// with the folder's chat template, only the assistant turns learned), an llm.c token file (.bin)
// or text. Before the model loads: the data is read and cut into rows (refused when --seq cuts away
// what is learned; --show-labels prints rows and exits), --out is locked and refused when it holds
// another run (--overwrite-output-dir), the memory is estimated. LoRA wraps the target Linear layers
// (everything else frozen, norms included); the Trainer does the rest: AdamW, warmup and a decay
// schedule, clipping, gradient accumulation, evaluation every --eval-every steps (with a generated
// sample here), logs (<out>/log.csv, log.jsonl and the loss curve loss.svg), a checkpoint
// <out>/checkpoint-<step> every --save-every steps and on Ctrl-C, --resume that continues bit for
// bit (and refuses changed training flags or data; --steps may grow to extend a finished run). At
// the end the adapter (<out>/adapter, peft's format), with --merge the merged model, with
// --save-gguf f16 (or f32, bf16, q8_0) GGUF files for llama.cpp.
// --dtype auto (the folder's dtype) | f32 | bf16: the base loaded in it; bf16: the frozen base in
// bfloat16, the adapters in float32 (TrainingArguments::bf16). The end prints the run's time and
// how to use what it wrote (llama.cpp, Ollama, peft, vLLM, transformers, examples/generate).
// --load-in-4bit (QLoRA): the base's Linear layers but the head are quantised to NF4 (or
// --bnb-4bit-quant-type fp4; --bnb-4bit-use-double-quant) as the folder loads, computing in --dtype;
// a folder saved by transformers + bitsandbytes in 4-bit loads as it is, with or without the flag.
// --full trains every parameter instead of adapters and writes the model. --nproc N trains
// data-parallel on N GPUs (or start it with examples/launch or torchrun): --batch is split between
// the ranks, so the loss curve and the checkpoints are those of one process. On a GPU the step is
// replayed as a CUDA graph where it can be (--cuda-graph).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "data/chat_dataset.h"
#include "data/dataset.h"
#include "distributed/init.h"
#include "examples/common/base_model.h"
#include "examples/common/data.h"
#include "examples/common/data_parallel.h"
#include "examples/common/flags.h"
#include "examples/common/inputs.h"
#include "examples/common/precision.h"
#include "examples/common/preflight.h"
#include "examples/common/printable.h"
#include "examples/common/run_report.h"
#include "examples/common/training_data.h"
#include "examples/common/vocabulary.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/generation/generation.h"
#include "nn/models/pretrained.h"
#include "nn/state_dict.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "train/checkpoint.h"
#include "train/memory_estimate.h"
#include "train/output_dir.h"
#include "train/trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxThreads = 4096;
constexpr const char* kFlagsFile = "lora_finetune_flags.json";  // in each checkpoint folder
std::atomic<bool> interrupted{false};
void on_sigint(int) { interrupted = true; }

// Flags a resumed run may change; every other flag must be as the checkpoint recorded it.
// --gradient-checkpointing and --offload-activations change memory and time only: the gradients are
// bitwise the same.
// --steps and --num-train-epochs may grow: the Trainer extends the run and re-plans the schedule.
const std::vector<std::string> kResumeMayChange = {
    "out",        "device",       "threads",          "eval-every", "eval-batches",           "save-every",
    "stop-at",    "resume",       "merge",            "sample-tokens", "gradient-checkpointing", "nproc",
    "offload-activations", "tiled-mlp",
    "cuda-graph", "steps",        "log-every",        "save-total-limit", "num-train-epochs", "overwrite-output-dir",
    "show-labels", "ignore-base-mismatch", "allow-truncation"};

// A flag's value as a checkpoint records it: --dtype resolved ("auto" is the folder's f32 or bf16).
std::string recorded(const examples::Flags& flags, const std::string& name, DType dtype) {
  return name == "dtype" ? (dtype == kBFloat16 ? "bf16" : "f32") : flags.str(name);
}

json::Value training_flags(const examples::Flags& flags, DType dtype) {
  json::Value v = json::Value::object();
  for (const auto& name : flags.names())
    if (std::find(kResumeMayChange.begin(), kResumeMayChange.end(), name) == kResumeMayChange.end())
      v.set(name, recorded(flags, name, dtype));
  return v;
}

// --resume with a flag that changes training is refused, naming each such flag.
void check_resume_flags(const examples::Flags& flags, DType dtype, const std::string& checkpoint) {
  const fs::path file = fs::path(checkpoint) / kFlagsFile;
  if (!fs::exists(file)) return;  // a checkpoint of another program: the Trainer checks its arguments
  const std::vector<uint8_t> bytes = io::read_file(file.string());
  const json::Value then = json::parse(std::string(bytes.begin(), bytes.end()));
  std::string changed;
  for (const auto& name : then.keys()) {
    const std::string was = then.at(name).as_string();
    const auto& names = flags.names();
    const std::string now =
        std::find(names.begin(), names.end(), name) != names.end() ? recorded(flags, name, dtype) : "(no such flag now)";
    if (was != now) changed += "\n  --" + name + ": '" + was + "' then, '" + now + "' now";
  }
  if (changed.empty()) return;
  std::string may_change;
  for (const auto& n : kResumeMayChange) may_change += (may_change.empty() ? "--" : ", --") + n;
  throw examples::UsageError("--resume: " + checkpoint + " was written with other training flags:" + changed +
                             "\nresume with the same values (these may change: " + may_change +
                             "), or start afresh in another --out\n");
}

// The checkpoint folder --resume names: the newest of --out (a bare --resume) or the one given.
std::string resume_folder(const std::string& flag, const std::string& out) {
  if (flag == "false") return "";
  if (flag == "true") {
    const auto found = train::complete_checkpoints(out);
    if (found.empty())
      throw examples::UsageError("--resume: no checkpoint in --out '" + out + "' (checkpoint-<step> folders holding " +
                                 train::kTrainingStateFile + "); to continue a run written elsewhere, pass its " +
                                 "folder: --resume <its out>/checkpoint-<step>\n");
    return found.back().second;
  }
  if (!fs::exists(fs::path(flag) / train::kTrainingStateFile))
    throw examples::UsageError("--resume '" + flag + "' is not a checkpoint folder (no " + train::kTrainingStateFile +
                               " in it): pass --resume alone for the newest checkpoint of --out, or a " +
                               "<out>/checkpoint-<step> folder\n");
  return flag;
}

// --warmup auto: a tenth of --steps, or on a resume the checkpoint's (so --steps may grow).
// steps_from: where the steps come from, for the error ("--steps 300").
int64_t warmup_steps(const examples::Flags& flags, int64_t steps, const std::string& steps_from,
                     const std::string& checkpoint) {
  if (flags.str("warmup") != "auto") {
    const int64_t warmup = flags.integer("warmup", 0);
    if (warmup >= steps)
      throw examples::UsageError("--warmup " + flags.str("warmup") + " is not below " + steps_from +
                                 ": the run would end in its warmup, at the peak learning rate (lower --warmup)\n");
    return warmup;
  }
  if (checkpoint.empty()) return steps / 10;
  const train::CheckpointMetadata meta =
      train::training_state_metadata((fs::path(checkpoint) / train::kTrainingStateFile).string());
  const auto args = meta.find("training_args");
  if (args == meta.end()) return steps / 10;  // the Trainer names what is missing
  return json::parse(args->second).at("warmup_steps").as_int("warmup_steps");
}

std::string sample_text(const examples::BaseModel& base, const std::vector<int32_t>& ids) {
  if (!base.tokenizer) return examples::printable(std::string(ids.begin(), ids.end()));
  return examples::printable(examples::decode_lenient(*base.tokenizer, ids));  // the model may have padding rows
}

// What the program adds to the Trainer's loop: Ctrl-C and --stop-at stop it (after a checkpoint),
// each evaluation prints a greedy sample, each checkpoint records the training flags.
struct ProgramCallbacks : train::TrainerCallback {
  int64_t stop_at = 0;
  std::function<void()> sample;
  json::Value flags;
  void on_step_end(const train::TrainerState& s, train::TrainerControl& c) override {
    c.should_training_stop = interrupted || s.global_step == stop_at;
  }
  void on_evaluate(const train::TrainerState& s, const train::LogEntry& metrics) override {
    if (s.is_world_process_zero && metrics.has("eval_loss")) sample();
  }
  void on_save(const train::TrainerState& s, const std::string& dir) override {
    if (s.is_world_process_zero) io::write_file_atomic(dir + "/" + kFlagsFile, json::dump(flags, 2) + "\n");
  }
};

int run(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  examples::Flags flags("lora_finetune", "LoRA fine-tuning of a causal LM (a Hugging Face folder, or the toy "
                                         "transformer's checkpoint) on your data, with train::Trainer.");
  flags.add("base", "out/toy/base.safetensors", "a Hugging Face model folder (config.json, model.safetensors, "
                                                "tokenizer) or a toy_transformer checkpoint (.safetensors)")
      .add("config", "auto", "toy checkpoints only: tiny | small | bench-135m (auto: the one the checkpoint records)");
  examples::add_data_flags(flags);
  flags.add("out", "out/lora", "directory for the adapter, logs and checkpoints (one run's: a fresh run into a folder "
                               "holding another's is refused)")
      .add("overwrite-output-dir", "false", "start afresh in an --out holding another run's files, removing them first "
                                            "(transformers' overwrite_output_dir)")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "auto", examples::kModelDtypeHelp)
      .add("rank", "8", "LoRA rank r")
      .add("alpha", "16", "LoRA alpha (scale alpha / r)")
      .add("dropout", "0", "dropout on the LoRA path")
      .add("targets", "auto", "comma-separated Linear layers to adapt, or all-linear (every Linear but the head); "
                              "auto: peft's default for the architecture (q_proj,v_proj for Llama, Mistral, Qwen and "
                              "Gemma, c_attn for GPT-2; Phi-3 has none: name them)")
      .add("target-parameters", "", "comma-separated expert weights to adapt too, as peft's target_parameters "
                                    "(Qwen3-MoE, Mixtral, gpt-oss: mlp.experts.gate_up_proj,mlp.experts.down_proj)")
      .add("lr", "2e-3", "peak learning rate")
      .add("lr-scheduler", "cosine", "linear | cosine | constant | constant_with_warmup (transformers' schedules)")
      .add("weight-decay", "0.01", "AdamW weight decay")
      .add("warmup", "auto", "linear warmup steps, below the run's steps (auto: a tenth of them)")
      .add("steps", "300", "optimizer steps in all (given, it wins over --num-train-epochs, as transformers' max_steps)")
      .add("num-train-epochs", "", "passes over the training rows instead of --steps (the steps counted as "
                                   "transformers counts them; fractions allowed)")
      .add("batch", "8", "sequences per micro-batch (split between the ranks with --nproc)")
      .add("grad-accum", "1", "micro-batches per optimizer step (gradient accumulation)")
      .add("seq", "128", "tokens per sequence (at most the model's context)")
      .add("clip", "1.0", "gradient clipping by global norm (0: off)")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward instead of "
                                              "keeping them: less memory, one more forward per step, the same "
                                              "gradients bit for bit")
      .add("tiled-mlp", "0", "the gated MLPs over chunks of this many tokens, each recomputed at backward "
                             "(0: whole; long sequences: their [tokens, intermediate] activations a chunk at a time)")
      .add("offload-activations", "false", "with --gradient-checkpointing: each layer's checkpointed input waits in "
                                           "host memory until backward (long sequences; the same gradients)")
      .add("log-every", "10", "a log row (loss, lr, grad norm, tokens/s) every N steps")
      .add("eval-every", "100", "validate (and print a sample) every N steps (0: only at the end)")
      .add("eval-batches", "8", "validation batches of --batch rows (0: every validation row)")
      .add("sample-tokens", "32", "tokens generated (greedy, nn::generate) as a sample at each validation (0: none; at "
                                  "most what the context leaves after the prompt of up to 16 tokens)")
      .add("save-every", "100", "write a checkpoint every N steps (0: only at the end and on Ctrl-C)")
      .add("save-total-limit", "0", "keep only the newest N checkpoints (0: all)")
      .add("stop-at", "0", "stop after this step as if interrupted (checkpoint written); 0: run to the end")
      .add("resume", "false", "continue from the newest checkpoint of --out (--resume), or from a checkpoint folder "
                              "(--resume out/lora/checkpoint-200, also of another --out); training flags must be "
                              "unchanged, --steps may grow")
      .add("ignore-base-mismatch", "false", "--resume: continue a checkpoint whose adapter was trained on another base")
      .add("full", "false", "full fine-tuning: every parameter trains, no LoRA (--rank, --alpha, --dropout and "
                            "--targets unused); writes <out>/model (a Hugging Face folder) or <out>/model.safetensors "
                            "(toy) instead of an adapter")
      .add("cuda-graph", "auto", "auto | on | off: replay the training step as one CUDA graph on the GPU (auto: "
                                 "LoRA on a Llama-family model with --grad-accum 1, --dropout 0, no "
                                 "--gradient-checkpointing, one process)")
      .add("merge", "false", "also write the merged model (LoRA folded into the base weights, in --dtype): "
                             "<out>/merged (a Hugging Face folder) or <out>/merged.safetensors (toy)")
      .add("save-gguf", "none", "also write GGUF files for llama.cpp, Ollama and LM Studio, of this type: f32 | f16 | "
                                "bf16 | q8_0 (none: no GGUF); Hugging Face base only: <out>/model.gguf (the "
                                "fine-tuned model, LoRA merged) and, with LoRA, <out>/adapter.gguf (llama.cpp's --lora)")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("seed", "0", "seed of the LoRA init, the data order and dropout");
  examples::add_quantization_flags(flags);
  examples::add_nproc_flag(flags);
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  if (const int status = examples::launch_if_asked(flags, argc, argv); status >= 0) return status;
  const std::string dev = flags.str("device");
  if (dev != "auto" && dev != "cpu" && dev != "cuda")
    throw examples::UsageError("--device wants cpu, cuda or auto, got '" + dev + "'\n");
  if (dev == "cuda" && !cuda_is_available()) throw examples::UsageError("--device cuda: this machine has no CUDA device\n");
  const bool on_gpu = dev == "cuda" || (dev == "auto" && cuda_is_available());
  // Started as a rank (--nproc, examples/launch, torchrun): the Trainer joins the group.
  const distributed::LaunchInfo launch = distributed::launched() ? distributed::launch_info() : distributed::LaunchInfo{};
  const bool main_rank = launch.rank == 0;
  if (distributed::launched() && dev == "cpu")
    throw examples::UsageError("--device cpu with data parallelism: the ranks reduce over NCCL, which wants one GPU each\n");
  if (distributed::launched()) distributed::check_can_join(launch);
  if (const int64_t threads = flags.integer("threads", 0, kMaxThreads); threads > 0) set_num_threads(static_cast<int>(threads));
  // Bounds far above any real run, below where the sizes below would overflow or exhaust memory.
  const int64_t batch = flags.integer("batch", 1, int64_t{1} << 20), seq = flags.integer("seq", 2, int64_t{1} << 24),
                accum = flags.integer("grad-accum", 1, int64_t{1} << 20);
  int64_t steps = flags.integer("steps", 1, int64_t{1} << 40);
  const std::optional<double> epochs =
      flags.str("num-train-epochs").empty() ? std::nullopt : std::optional(flags.number("num-train-epochs", 0, 1e6));
  if (epochs && *epochs == 0) throw examples::UsageError("--num-train-epochs wants a number > 0, got 0\n");
  if (batch * seq > (int64_t{1} << 30))
    throw examples::UsageError("--batch " + flags.str("batch") + " x --seq " + flags.str("seq") + " is " +
                               std::to_string(batch * seq) + " tokens a micro-batch, more than 2^30: lower them (and "
                               "raise --grad-accum)\n");
  if (on_gpu && seq > kCudaAttentionMaxSeq)
    throw examples::UsageError("--seq " + flags.str("seq") + " on a GPU: attention there takes rows of at most " +
                               std::to_string(kCudaAttentionMaxSeq) + " tokens; lower --seq\n");
  if (steps > INT64_MAX / accum / batch)
    throw examples::UsageError("--steps x --grad-accum x --batch overflows the row count: lower them\n");
  examples::check_batch_splits(batch, launch.world_size);
  const std::string out = flags.str("out");
  const int64_t seed = flags.integer("seed", 0);
  // Every numeric flag read now: a bad value is reported before any file is touched.
  const int64_t rank = flags.integer("rank", 1, 1 << 16), eval_every = flags.integer("eval-every", 0),
                save_every = flags.integer("save-every", 0), stop_at = flags.integer("stop-at", 0),
                sample_tokens = flags.integer("sample-tokens", 0, INT32_MAX),
                log_every = flags.integer("log-every", 1), save_limit = flags.integer("save-total-limit", 0),
                show_labels = flags.integer("show-labels", 0, INT32_MAX);
  const double alpha = flags.number("alpha"), lora_dropout = flags.number("dropout", 0, 1), lr = flags.number("lr", 0),
               weight_decay = flags.number("weight-decay", 0), clip = flags.number("clip", 0);
  if (lr == 0) throw examples::UsageError("--lr wants a learning rate > 0, got " + flags.str("lr") + "\n");
  if (lora_dropout == 1) throw examples::UsageError("--dropout wants a probability in [0, 1), got 1\n");
  const int64_t eval_batches = flags.integer("eval-batches", 0, INT32_MAX);
  const bool merge = flags.boolean("merge"), checkpointing = flags.boolean("gradient-checkpointing"),
             offload = flags.boolean("offload-activations"),
             full = flags.boolean("full"), overwrite = flags.boolean("overwrite-output-dir");
  const int64_t tiled_mlp = flags.integer("tiled-mlp", 0, INT32_MAX);
  if (offload && !checkpointing)
    throw examples::UsageError("--offload-activations offloads the checkpointed activations: add --gradient-checkpointing\n");
  if (full && merge) throw examples::UsageError("--merge folds LoRA into the base: with --full the model itself is written\n");
  const std::string scheduler = flags.str("lr-scheduler");
  if (scheduler != "linear" && scheduler != "cosine" && scheduler != "constant" && scheduler != "constant_with_warmup")
    throw examples::UsageError("--lr-scheduler wants linear, cosine, constant or constant_with_warmup, got '" +
                               scheduler + "'\n");

  std::string graph_flag = flags.str("cuda-graph");
  if (graph_flag != "auto" && graph_flag != "on" && graph_flag != "off")
    throw examples::UsageError("--cuda-graph wants auto, on or off, got '" + graph_flag + "'\n");
  // What the flags alone tell against a captured step (the Trainer checks the model too).
  const std::string graph_blocker = !on_gpu           ? "the device is the CPU"
                                    : accum != 1       ? "--grad-accum is " + std::to_string(accum)
                                    : lora_dropout > 0 ? "--dropout is " + flags.str("dropout")
                                    : checkpointing    ? "--gradient-checkpointing is on"
                                    : launch.world_size > 1
                                        ? "it trains data-parallel (" + std::to_string(launch.world_size) + " ranks)"
                                        : "";
  if (graph_flag == "on" && !graph_blocker.empty())
    throw examples::UsageError("--cuda-graph on: cannot capture the step, " + graph_blocker + "\n");

  // Every file checked, and the data read, before the model loads (minutes for a large one).
  examples::check_model_path(flags, "base");
  const std::string base_path = flags.str("base");
  const bool hf_base = fs::is_directory(base_path);
  const DType dtype = examples::model_dtype_flag(flags, base_path);
  const nn::QuantizationConfig quantization = examples::quantization_flags(flags, dtype);
  if (full && quantization.load_in_4bit)
    throw examples::UsageError("--full trains every weight, and 4-bit weights cannot train: drop --load-in-4bit\n");
  if (full && quantization.load_in_fp8)
    throw examples::UsageError("--full trains every weight, and FP8 weights cannot train: drop --load-in-fp8\n");
  std::optional<gguf::TensorType> gguf_dtype;
  if (flags.str("save-gguf") != "none") gguf_dtype = examples::gguf_dtype_flag(flags, "save-gguf");
  const char* quantised = quantization.load_in_4bit ? "a 4-bit base" : quantization.load_in_fp8 ? "an FP8 base" : nullptr;
  if (gguf_dtype && quantised)
    throw examples::UsageError(std::string("--save-gguf with --load-in-") +
                               (quantization.load_in_4bit ? "4bit" : "fp8") + ": tapegrad writes no GGUF of " +
                               quantised + "; export the adapter later with export_gguf --model <base> "
                               "--adapter " + out + "/adapter\n");
  if (graph_flag == "auto" && quantised && on_gpu) {
    graph_flag = "off";  // what auto captures has run under capture on the H200; a quantised base has not
    std::printf("CUDA graph: off for %s (not validated under capture yet; --cuda-graph on tries it)\n", quantised);
  }
  if (flags.str("data").empty() && hf_base) throw examples::UsageError("--data is needed with a Hugging Face base\n");
  for (const char* name : {"data", "val"})
    if (!flags.str(name).empty()) examples::check_data_file(flags.str(name), name);
  const std::string checkpoint = resume_folder(flags.str("resume"), out);
  if (!checkpoint.empty()) check_resume_flags(flags, dtype, checkpoint);
  if (!checkpoint.empty() && !full) examples::check_checkpoint_base(checkpoint, base_path, flags.boolean("ignore-base-mismatch"));
  if (hf_base) examples::check_folder_vocabulary(base_path, "lora_finetune", "--base");
  // Steps from --num-train-epochs unless --steps is given (transformers: max_steps > 0 wins): then
  // known once the rows are counted.
  const bool steps_from_epochs = epochs && !flags.was_set("steps");
  if (epochs && !steps_from_epochs && main_rank)
    std::printf("--steps %lld given: --num-train-epochs is unused (as transformers' max_steps over num_train_epochs)\n",
                static_cast<long long>(steps));
  int64_t warmup = steps_from_epochs ? 0 : warmup_steps(flags, steps, "--steps " + std::to_string(steps), checkpoint);
  const std::vector<std::string> targets = examples::lora_targets(flags, base_path, full);
  std::optional<data::Tokenizer> tokenizer = examples::load_tokenizer(base_path, "lora_finetune", "--base");
  const int32_t pad_id = tokenizer && tokenizer->pad_token_id() ? *tokenizer->pad_token_id()
                         : tokenizer && tokenizer->eos_token_id() ? *tokenizer->eos_token_id() : 0;
  const examples::TrainingData data =
      examples::load_training_data(flags, tokenizer, seq, batch, eval_batches, pad_id);
  if (show_labels > 0) {
    examples::show_labels(data, tokenizer, show_labels, seq, examples::truncation_flag(flags));
    return 0;
  }
  if (steps_from_epochs) {
    steps = train::steps_for_epochs(*epochs, data.train->rows(), batch, accum);
    warmup = warmup_steps(flags, steps,
                          "the " + std::to_string(steps) + " steps of --num-train-epochs " + flags.str("num-train-epochs"),
                          checkpoint);
  }
  const std::shared_ptr<train::OutputDirLock> out_lock = main_rank ? examples::claim_out(out, overwrite, checkpoint.empty())
                                                                     : nullptr;
  if (hf_base && main_rank)
    examples::check_memory(base_path, {.dtype = dtype, .load_in_4bit = quantization.load_in_4bit,
                                         .load_in_fp8 = quantization.load_in_fp8, .full = full, .lora_r = rank,
                             .lora_targets = targets, .batch = batch / launch.world_size, .seq = seq,
                             .gradient_checkpointing = checkpointing, .offload_activations = offload,
                             .mlp_chunk_tokens = tiled_mlp},
                 on_gpu ? Device::cuda(launch.local_rank) : Device::cpu());
  if (gguf_dtype && !hf_base)
    throw examples::UsageError("--save-gguf needs a Hugging Face --base folder (llama.cpp runs no toy checkpoint)\n");

  // The base model, frozen, with LoRA on the targets: loaded in --dtype on the device it trains on
  // (the Trainer's: LOCAL_RANK's GPU), a 4-bit base quantised as it streams there.
  const Device device = on_gpu ? Device::cuda(launch.local_rank) : Device::cpu();
  examples::BaseModel base =
      examples::load_base(base_path, flags.str("config"), "lora_finetune", "--base",
                          nn::PretrainedOptions{.dtype = dtype, .device = device, .quantization = quantization},
                          std::move(tokenizer));
  if (base.tokenizer)
    examples::check_vocabulary(*base.tokenizer, examples::embedding_rows(*base.model), "lora_finetune", "--base",
                               base_path);
  // What llama.cpp cannot take is refused now, not after training: the family and its config, the tokenizer.
  gguf::Metadata gguf_vocab;
  if (gguf_dtype) {
    nn::gguf_model(*base.model);
    gguf_vocab = data::gguf_tokenizer_metadata(*base.tokenizer, base.model->dims().vocab_size);
  }
  if (seq > base.context)
    throw examples::UsageError("--seq " + std::to_string(seq) + " exceeds the model's context of " +
                               std::to_string(base.context) + " tokens\n");
  // Token files hold ids of whatever tokenizer made them: checked once against the embedding.
  if (const int64_t rows = examples::embedding_rows(*base.model); data.largest_id >= rows)
    throw examples::UsageError("--data '" + flags.str("data") + "'" +
                               (flags.str("val").empty() ? "" : " or --val '" + flags.str("val") + "'") +
                               " holds token id " + std::to_string(data.largest_id) +
                               ", outside the model's embedding of " + std::to_string(rows) +
                               " rows (a token file made with another tokenizer?)\n");
  const std::vector<std::string> target_parameters =
      flags.str("target-parameters").empty() ? std::vector<std::string>{} : flags.list("target-parameters");
  peft::LoraConfig lora{.r = rank, .lora_alpha = alpha, .lora_dropout = lora_dropout, .target_modules = targets,
                        .target_parameters = target_parameters,
                        .base_model_name_or_path = base.hf_folder ? base_path : ""};
  nn::CausalLM& model = *base.model;
  Generator init(static_cast<uint64_t>(seed));
  if (!full) peft::apply_lora(model, lora, init);
  // llama.cpp's GGUF adapters hold no expert weights (peft::save_adapter_gguf): the merged model only.
  const bool gguf_adapter = gguf_dtype && !full && target_parameters.empty();
  if (gguf_dtype && !full && !gguf_adapter && main_rank)
    std::printf("--save-gguf: %s/model.gguf (LoRA merged) will be written, no adapter.gguf: llama.cpp's GGUF adapters "
                "hold no expert weights (--target-parameters)\n", out.c_str());
  if (tiled_mlp > 0) nn::tile_mlps(model, tiled_mlp);
  if (main_rank) {
    std::printf("base: %s (%s%s, %s), %lld-token context\n", base_path.c_str(), base.architecture.c_str(),
                base.tokenizer ? (", " + base.tokenizer->description()).c_str() : ", bytes as tokens",
                dtype_name(dtype), static_cast<long long>(base.context));
    peft::print_trainable_parameters(model);
    if (checkpointing)
      std::printf("gradient checkpointing: each decoder layer recomputed at backward%s\n",
                  offload ? ", its input kept in host memory until then" : "");
    if (tiled_mlp > 0) std::printf("tiled MLP: %lld tokens a chunk\n", static_cast<long long>(tiled_mlp));
    std::printf("data: %lld training rows, %lld validation rows of %lld tokens (%s)%s\n",
                static_cast<long long>(data.train->rows()), static_cast<long long>(data.val->rows()),
                static_cast<long long>(seq), data.layout.c_str(),
                data.train->truncated() ? (", " + std::to_string(data.train->truncated()) + " examples cut at --seq").c_str()
                                        : "");
  }

  const int64_t per_rank = batch / launch.world_size;
  train::TrainingArguments args{
      .output_dir = out, .overwrite_output_dir = overwrite, .learning_rate = lr, .weight_decay = weight_decay,
      .lr_scheduler_type = scheduler, .warmup_steps = warmup, .max_steps = steps, .per_device_train_batch_size = per_rank,
      .per_device_eval_batch_size = per_rank, .gradient_accumulation_steps = accum, .max_grad_norm = clip,
      .bf16 = dtype == kBFloat16 && !full, .gradient_checkpointing = checkpointing,
      .gradient_checkpointing_kwargs = {.offload_activations = offload}, .logging_steps = log_every,
      .eval_steps = eval_every, .save_steps = save_every, .save_total_limit = save_limit,
      .resume_from_checkpoint = checkpoint, .seed = seed, .use_cpu = !on_gpu, .cuda_graph = graph_flag};
  train::Trainer trainer(base.model, std::make_shared<data::SequenceDataset>(*data.train), args,
                         std::make_shared<data::SequenceDataset>(*data.val));
  if (!full) trainer.set_lora_config(lora);

  // The sample's prompt: the start of the first validation row; greedy, up to the EOS.
  std::vector<int32_t> prompt;
  for (int64_t id : data.val->rows_batch(0, 1, Device::cpu()).ids.to_vector<int64_t>())
    prompt.push_back(static_cast<int32_t>(id));
  prompt.resize(static_cast<size_t>(std::min<int64_t>(16, seq / 2)));
  nn::GenerationConfig sample_config{.max_new_tokens = std::min<int64_t>(
                                         sample_tokens, base.context - static_cast<int64_t>(prompt.size()))};
  if (base.tokenizer && base.tokenizer->eos_token_id()) sample_config.eos_token_id = {*base.tokenizer->eos_token_id()};
  auto callbacks = std::make_shared<ProgramCallbacks>();
  callbacks->stop_at = stop_at;
  callbacks->flags = training_flags(flags, dtype);
  callbacks->sample = [&] {
    if (sample_tokens <= 0) return;
    const bool was_training = model.is_training();
    model.eval();  // no dropout: the default generator's draws stay those of training
    const std::vector<int32_t> ids = nn::generate(model, {prompt}, sample_config)[0];
    model.train(was_training);
    const std::vector<int32_t> more(ids.begin() + static_cast<int64_t>(prompt.size()), ids.end());
    std::printf("  sample (greedy): \"%s\" -> \"%s\"\n", sample_text(base, prompt).c_str(), sample_text(base, more).c_str());
    std::fflush(stdout);
  };
  trainer.add_callback(callbacks);

  std::signal(SIGINT, on_sigint);
  if (trainer.device().is_cuda()) reset_peak_memory_stats(trainer.device());  // the peak of training, model included
  const train::TrainOutput result = trainer.train();
  if (result.global_step < trainer.state().max_steps) {
    if (main_rank)
      std::printf("stopped at step %lld; checkpoint in %s (continue with --resume)\n",
                  static_cast<long long>(result.global_step),
                  train::checkpoint_dir(out, result.global_step).c_str());
    return interrupted ? 130 : 0;
  }
  if (!main_rank) return 0;  // rank 0 validates and writes

  // The whole model, as the base came: a Hugging Face folder (with its tokenizer) or a toy file.
  auto save_model = [&](const std::string& name, const char* what) {
    if (base.hf_folder) {
      nn::save_pretrained(model, out + "/" + name);
      examples::copy_tokenizer_files(base_path, out + "/" + name);
      std::printf("%s model: %s/%s (transformers' from_pretrained loads it)\n", what, out.c_str(), name.c_str());
    } else {
      nn::save_state_dict(model, out + "/" + name + ".safetensors");
      std::printf("%s model: %s/%s.safetensors\n", what, out.c_str(), name.c_str());
    }
  };
  // What was trained is written first: nothing after it (the validation's sample) may lose it.
  if (full) {
    save_model("model", "fine-tuned");
  } else {
    trainer.save_model(out + "/adapter");
    std::printf("adapter: %s/adapter (adapter_model.safetensors + adapter_config.json)\n", out.c_str());
  }
  if (eval_every == 0 || steps % eval_every != 0) trainer.evaluate();  // the end's, unless the loop just did it
  std::printf("%s\n", examples::peak_memory_line(trainer.device()).c_str());
  if (offload)
    std::printf("offloaded activations: %.2f GiB of host memory at the peak\n",
                static_cast<double>(offload_memory_stats().peak_bytes) / (1024.0 * 1024.0 * 1024.0));
  if (gguf_adapter) {
    peft::save_adapter_gguf(model, out + "/adapter.gguf", {.dtype = *gguf_dtype});
    std::printf("adapter GGUF: %s/adapter.gguf (llama.cpp's --lora, on a GGUF of the base)\n", out.c_str());
  }
  if (merge || (gguf_dtype && !full)) peft::merge_and_unload(model);
  if (merge) save_model("merged", "merged");
  if (gguf_dtype) {
    nn::save_gguf(model, out + "/model.gguf", {.dtype = *gguf_dtype, .metadata = gguf_vocab});
    std::printf("GGUF: %s/model.gguf (%s)\n", out.c_str(), flags.str("save-gguf").c_str());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%s", examples::run_report(seconds, {.base = base_path, .out = out, .hf_base = base.hf_folder,
                                                   .full = full, .merged = merge, .gguf = gguf_dtype.has_value(),
                                                   .gguf_adapter = gguf_adapter})
                        .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
