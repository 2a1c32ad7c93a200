// LoRA fine-tuning of a causal LM from the command line: train::Trainer driven by flags.
//
//   lora_finetune --base TinyLlama-folder --data train.jsonl --steps 300
//   lora_finetune --base Qwen2.5-0.5B-Instruct --data chat.jsonl --dtype bf16   # {"messages": [...]} rows
//   lora_finetune --base out/toy/base.safetensors --data my_text.txt             # the toy, bytes as tokens
//
// --base is a Hugging Face folder (any family nn::from_pretrained reads, with its tokenizer) or a
// toy_transformer checkpoint. The data: JSONL ({"text"}, {"prompt", "completion"} with the prompt
// not learned, or {"messages"} conversations rendered with the folder's chat template, only the
// assistant turns learned), an llm.c token file (.bin) or text. LoRA wraps the target Linear layers
// (everything else frozen, norms included); the Trainer does the rest: AdamW, warmup and a decay
// schedule, clipping, gradient accumulation, evaluation every --eval-every steps (with a generated
// sample here), logs (<out>/log.csv, log.jsonl and the loss curve loss.svg), a checkpoint
// <out>/checkpoint-<step> every --save-every steps and on Ctrl-C, --resume that continues bit for
// bit (and refuses changed training flags or data; --steps may grow to extend a finished run). At
// the end the adapter (<out>/adapter, peft's format), with --merge the merged model.
// --dtype bf16: the frozen base in bfloat16, the adapters in float32 (TrainingArguments::bf16).
// --load-in-4bit (QLoRA): the base's Linear layers but the head are quantised to NF4 (or
// --bnb-4bit-quant-type fp4; --bnb-4bit-use-double-quant) as the folder loads, computing in --dtype;
// a folder saved by transformers + bitsandbytes in 4-bit loads as it is, with or without the flag.
// --full trains every parameter instead of adapters and writes the model. --nproc N trains
// data-parallel on N GPUs (or start it with examples/launch or torchrun): --batch is split between
// the ranks, so the loss curve and the checkpoints are those of one process. On a GPU the step is
// replayed as a CUDA graph where it can be (--cuda-graph).
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "data/chat_dataset.h"
#include "data/dataset.h"
#include "distributed/init.h"
#include "examples/common/base_model.h"
#include "examples/common/data.h"
#include "examples/common/data_parallel.h"
#include "examples/common/flags.h"
#include "examples/common/inputs.h"
#include "examples/common/precision.h"
#include "examples/common/printable.h"
#include "examples/common/vocabulary.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/generation/generation.h"
#include "nn/models/pretrained.h"
#include "nn/state_dict.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxThreads = 4096;
constexpr const char* kFlagsFile = "lora_finetune_flags.json";  // in each checkpoint folder
std::atomic<bool> interrupted{false};
void on_sigint(int) { interrupted = true; }

// Flags a resumed run may change; every other flag must be as the checkpoint recorded it.
// --gradient-checkpointing changes memory and time only: the gradients are bitwise the same.
// --steps may grow: the Trainer extends the run and re-plans the schedule.
const std::vector<std::string> kResumeMayChange = {
    "out",        "device",       "threads",          "eval-every", "eval-batches",           "save-every",
    "stop-at",    "resume",       "merge",            "sample-tokens", "gradient-checkpointing", "nproc",
    "cuda-graph", "steps",        "log-every",        "save-total-limit"};

json::Value training_flags(const examples::Flags& flags) {
  json::Value v = json::Value::object();
  for (const auto& name : flags.names())
    if (std::find(kResumeMayChange.begin(), kResumeMayChange.end(), name) == kResumeMayChange.end())
      v.set(name, flags.str(name));
  return v;
}

// --resume with a flag that changes training is refused, naming each such flag.
void check_resume_flags(const examples::Flags& flags, const std::string& checkpoint) {
  const fs::path file = fs::path(checkpoint) / kFlagsFile;
  if (!fs::exists(file)) return;  // a checkpoint of another program: the Trainer checks its arguments
  const std::vector<uint8_t> bytes = io::read_file(file.string());
  const json::Value then = json::parse(std::string(bytes.begin(), bytes.end()));
  std::string changed;
  for (const auto& name : then.keys()) {
    const std::string was = then.at(name).as_string();
    const auto& names = flags.names();
    const std::string now =
        std::find(names.begin(), names.end(), name) != names.end() ? flags.str(name) : "(no such flag now)";
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
int64_t warmup_steps(const examples::Flags& flags, int64_t steps, const std::string& checkpoint) {
  if (flags.str("warmup") != "auto") {
    const int64_t warmup = flags.integer("warmup", 0);
    if (warmup >= steps)
      throw examples::UsageError("--warmup " + flags.str("warmup") + " is not below --steps " + flags.str("steps") +
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

// "\n" and "\t" in a flag value (--doc-separator '\n\n').
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == 't')) out += s[++i] == 'n' ? '\n' : '\t';
    else out += s[i];
  }
  return out;
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
  examples::Flags flags("lora_finetune", "LoRA fine-tuning of a causal LM (a Hugging Face folder, or the toy "
                                         "transformer's checkpoint) on your data, with train::Trainer.");
  flags.add("base", "out/toy/base.safetensors", "a Hugging Face model folder (config.json, model.safetensors, "
                                                "tokenizer) or a toy_transformer checkpoint (.safetensors)")
      .add("config", "auto", "toy checkpoints only: tiny | small | bench-135m (auto: the one the checkpoint records)")
      .add("data", "", "training data: .jsonl ({\"text\"}, {\"prompt\", \"completion\"} or {\"messages\"}), .bin "
                       "(llm.c token file) or text (default, toy base only: a generated 'logbook' corpus)")
      .add("val", "", "validation data, as --data (default: the last --val-fraction of --data)")
      .add("val-fraction", "0.1", "the share of --data that validates when there is no --val")
      .add("doc-separator", "", "text files: the string between documents (\\n and \\t escapes; default: one document)")
      .add("layout", "auto", "pack (windows of the concatenated examples) | pad (one example a row, padded) | "
                             "pack-separate (whole examples packed into rows, each attending only to itself) | "
                             "auto (pack-separate for {\"messages\"} data, else pack)")
      .add("bytes", "false", "train on --data / --val files that are not UTF-8 text (invalid bytes, NUL) anyway")
      .add("out", "out/lora", "directory for the adapter, logs and checkpoints")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "f32", examples::kDtypeHelp)
      .add("rank", "8", "LoRA rank r")
      .add("alpha", "16", "LoRA alpha (scale alpha / r)")
      .add("dropout", "0", "dropout on the LoRA path")
      .add("targets", "auto", "comma-separated module names to adapt (auto: the architecture's, e.g. "
                              "q_proj,k_proj,v_proj,o_proj for Llama, c_attn,c_proj for GPT-2)")
      .add("target-parameters", "", "comma-separated expert weights to adapt too, as peft's target_parameters "
                                    "(Qwen3-MoE, Mixtral, gpt-oss: mlp.experts.gate_up_proj,mlp.experts.down_proj)")
      .add("lr", "2e-3", "peak learning rate")
      .add("lr-scheduler", "cosine", "linear | cosine | constant | constant_with_warmup (transformers' schedules)")
      .add("weight-decay", "0.01", "AdamW weight decay")
      .add("warmup", "auto", "linear warmup steps, below --steps (auto: a tenth of --steps)")
      .add("steps", "300", "optimizer steps in all")
      .add("batch", "8", "sequences per micro-batch (split between the ranks with --nproc)")
      .add("grad-accum", "1", "micro-batches per optimizer step (gradient accumulation)")
      .add("seq", "128", "tokens per sequence (at most the model's context)")
      .add("clip", "1.0", "gradient clipping by global norm (0: off)")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward instead of "
                                              "keeping them: less memory, one more forward per step, the same "
                                              "gradients bit for bit")
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
      .add("full", "false", "full fine-tuning: every parameter trains, no LoRA (--rank, --alpha, --dropout and "
                            "--targets unused); writes <out>/model (a Hugging Face folder) or <out>/model.safetensors "
                            "(toy) instead of an adapter")
      .add("cuda-graph", "auto", "auto | on | off: replay the training step as one CUDA graph on the GPU (auto: "
                                 "LoRA on a Llama-family model with --grad-accum 1, --dropout 0, no "
                                 "--gradient-checkpointing, one process)")
      .add("merge", "false", "also write the merged model (LoRA folded into the base weights, in --dtype): "
                             "<out>/merged (a Hugging Face folder) or <out>/merged.safetensors (toy)")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("seed", "0", "seed of the LoRA init, the data order and dropout");
  examples::add_quantization_flags(flags);
  examples::add_nproc_flag(flags);
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  if (const int status = examples::launch_if_asked(flags, argc, argv); status >= 0) return status;
  const std::string dev = flags.str("device");
  if (dev != "auto" && dev != "cpu" && dev != "cuda")
    throw examples::UsageError("--device wants cpu, cuda or auto, got '" + dev + "'\n" + flags.usage());
  if (dev == "cuda" && !cuda_is_available()) throw examples::UsageError("--device cuda: this machine has no CUDA device\n");
  const bool on_gpu = dev == "cuda" || (dev == "auto" && cuda_is_available());
  const DType dtype = examples::dtype_flag(flags);
  // Started as a rank (--nproc, examples/launch, torchrun): the Trainer joins the group.
  const distributed::LaunchInfo launch = distributed::launched() ? distributed::launch_info() : distributed::LaunchInfo{};
  const bool main_rank = launch.rank == 0;
  if (distributed::launched() && dev == "cpu")
    throw examples::UsageError("--device cpu with data parallelism: the ranks reduce over NCCL, which wants one GPU each\n");
  if (distributed::launched()) distributed::check_can_join(launch);
  if (const int64_t threads = flags.integer("threads", 0, kMaxThreads); threads > 0) set_num_threads(static_cast<int>(threads));
  // Bounds far above any real run, below where the sizes below would overflow or exhaust memory.
  const int64_t steps = flags.integer("steps", 1, int64_t{1} << 40), batch = flags.integer("batch", 1, int64_t{1} << 20),
                seq = flags.integer("seq", 2, int64_t{1} << 24), accum = flags.integer("grad-accum", 1, int64_t{1} << 20);
  if (batch * seq > (int64_t{1} << 30))
    throw examples::UsageError("--batch " + flags.str("batch") + " x --seq " + flags.str("seq") + " is " +
                               std::to_string(batch * seq) + " tokens a micro-batch, more than 2^30: lower them (and "
                               "raise --grad-accum)\n");
  if (steps > INT64_MAX / accum / batch)
    throw examples::UsageError("--steps x --grad-accum x --batch overflows the row count: lower them\n");
  examples::check_batch_splits(batch, launch.world_size);
  std::string layout_name = flags.str("layout");
  if (layout_name == "auto") layout_name = data::holds_conversations(flags.str("data")) ? "pack-separate" : "pack";
  if (layout_name != "pack" && layout_name != "pad" && layout_name != "pack-separate")
    throw examples::UsageError("--layout wants auto, pack, pad or pack-separate, got '" + layout_name + "'\n" +
                               flags.usage());
  const data::Layout layout = layout_name == "pack"  ? data::Layout::Pack
                              : layout_name == "pad" ? data::Layout::Pad
                                                     : data::Layout::PackSeparate;
  const std::string out = flags.str("out");
  const int64_t seed = flags.integer("seed", 0);
  // Every numeric flag read now: a bad value is reported before any file is touched.
  const int64_t rank = flags.integer("rank", 1, 1 << 16), eval_every = flags.integer("eval-every", 0),
                save_every = flags.integer("save-every", 0), stop_at = flags.integer("stop-at", 0),
                sample_tokens = flags.integer("sample-tokens", 0, INT32_MAX),
                log_every = flags.integer("log-every", 1), save_limit = flags.integer("save-total-limit", 0);
  const double alpha = flags.number("alpha"), lora_dropout = flags.number("dropout", 0, 1), lr = flags.number("lr", 0),
               weight_decay = flags.number("weight-decay", 0), clip = flags.number("clip", 0),
               val_fraction = flags.number("val-fraction", 0, 1);
  if (lr == 0) throw examples::UsageError("--lr wants a learning rate > 0, got " + flags.str("lr") + "\n");
  if (lora_dropout == 1) throw examples::UsageError("--dropout wants a probability in [0, 1), got 1\n");
  if (val_fraction == 0 || val_fraction == 1)
    throw examples::UsageError("--val-fraction wants a fraction in (0, 1), got " + flags.str("val-fraction") + "\n");
  const int64_t eval_batches = flags.integer("eval-batches", 0, INT32_MAX);
  const bool allow_binary = flags.boolean("bytes"), merge = flags.boolean("merge"),
             checkpointing = flags.boolean("gradient-checkpointing"), full = flags.boolean("full");
  if (full && merge) throw examples::UsageError("--merge folds LoRA into the base: with --full the model itself is written\n");
  const std::string scheduler = flags.str("lr-scheduler");
  if (scheduler != "linear" && scheduler != "cosine" && scheduler != "constant" && scheduler != "constant_with_warmup")
    throw examples::UsageError("--lr-scheduler wants linear, cosine, constant or constant_with_warmup, got '" +
                               scheduler + "'\n");

  const nn::QuantizationConfig quantization = examples::quantization_flags(flags, dtype);
  if (full && quantization.load_in_4bit)
    throw examples::UsageError("--full trains every weight, and 4-bit weights cannot train: drop --load-in-4bit\n");

  std::string graph_flag = flags.str("cuda-graph");
  if (graph_flag != "auto" && graph_flag != "on" && graph_flag != "off")
    throw examples::UsageError("--cuda-graph wants auto, on or off, got '" + graph_flag + "'\n" + flags.usage());
  if (graph_flag == "auto" && quantization.load_in_4bit && on_gpu) {
    graph_flag = "off";  // what auto captures has run under capture on the H200; a 4-bit base has not
    std::printf("CUDA graph: off for a 4-bit base (not validated under capture yet; --cuda-graph on tries it)\n");
  }
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

  // Every file checked before the model loads (minutes for a large one).
  examples::check_model_path(flags, "base");
  const bool hf_base = fs::is_directory(flags.str("base"));
  if (flags.str("data").empty() && hf_base)
    throw examples::UsageError("--data is needed with a Hugging Face base\n" + flags.usage());
  for (const char* name : {"data", "val"})
    if (!flags.str(name).empty()) examples::check_data_file(flags.str(name), name);
  const std::string checkpoint = resume_folder(flags.str("resume"), out);
  if (!checkpoint.empty()) check_resume_flags(flags, checkpoint);
  const int64_t warmup = warmup_steps(flags, steps, checkpoint);
  if (hf_base) examples::check_folder_vocabulary(flags.str("base"), "lora_finetune", "--base");

  // The base model, frozen, with LoRA on the targets.
  // A 4-bit base is quantised as it streams to the device it trains on (the Trainer's: LOCAL_RANK's GPU).
  const Device device = on_gpu ? Device::cuda(launch.local_rank) : Device::cpu();
  examples::BaseModel base = examples::load_base(
      flags.str("base"), flags.str("config"), "lora_finetune", "--base",
      quantization.load_in_4bit ? nn::PretrainedOptions{.dtype = dtype, .device = device, .quantization = quantization}
                                : nn::PretrainedOptions{});
  if (base.tokenizer)
    examples::check_vocabulary(*base.tokenizer, examples::embedding_rows(*base.model), "lora_finetune", "--base",
                               flags.str("base"));
  if (seq > base.context)
    throw examples::UsageError("--seq " + std::to_string(seq) + " exceeds the model's context of " +
                               std::to_string(base.context) + " tokens\n" + flags.usage());
  std::vector<std::string> targets = flags.str("targets") == "auto" ? base.default_targets : flags.list("targets");
  const std::vector<std::string> target_parameters =
      flags.str("target-parameters").empty() ? std::vector<std::string>{} : flags.list("target-parameters");
  peft::LoraConfig lora{.r = rank, .lora_alpha = alpha, .lora_dropout = lora_dropout, .target_modules = targets,
                        .target_parameters = target_parameters,
                        .base_model_name_or_path = base.hf_folder ? flags.str("base") : ""};
  nn::CausalLM& model = *base.model;
  Generator init(static_cast<uint64_t>(seed));
  if (!full) peft::apply_lora(model, lora, init);
  if (main_rank) {
    std::printf("base: %s (%s%s), %lld-token context\n", flags.str("base").c_str(), base.architecture.c_str(),
                base.tokenizer ? (", " + base.tokenizer->description()).c_str() : ", bytes as tokens",
                static_cast<long long>(base.context));
    peft::print_trainable_parameters(model);
    if (checkpointing) std::printf("gradient checkpointing: each decoder layer recomputed at backward\n");
  }

  // The data: rows of --seq tokens, validation from --val or the end of --data.
  const std::string separator = unescape(flags.str("doc-separator"));
  std::shared_ptr<const data::TokenCorpus> corpus;
  if (flags.str("data").empty()) {
    const std::string text = examples::generate_corpus("logbook", 1, 1 << 20);
    corpus = data::corpus_from_examples({std::vector<int32_t>(text.begin(), text.end())});
  } else {
    corpus = examples::load_corpus(flags.str("data"), "data", base, separator, allow_binary);
  }
  // Token files hold ids of whatever tokenizer made them: checked once against the embedding.
  const int64_t vocab_rows = examples::embedding_rows(model);
  auto check_ids = [&](const data::TokenCorpus& c, const char* flag) {
    if (const int64_t top = data::max_token_id(c); top >= vocab_rows)
      throw examples::UsageError(std::string("--") + flag + " '" + flags.str(flag) + "' holds token id " +
                                 std::to_string(top) + ", outside the model's embedding of " + std::to_string(vocab_rows) +
                                 " rows (a token file made with another tokenizer?)\n");
  };
  if (!flags.str("data").empty()) check_ids(*corpus, "data");
  const int32_t pad_id = base.tokenizer && base.tokenizer->pad_token_id() ? *base.tokenizer->pad_token_id()
                         : base.tokenizer && base.tokenizer->eos_token_id() ? *base.tokenizer->eos_token_id() : 0;
  data::SequenceDataset all(corpus, seq, layout, pad_id);
  std::optional<data::SequenceDataset> train_rows, val_rows;
  if (!flags.str("val").empty()) {
    train_rows = all;
    const auto val_corpus = examples::load_corpus(flags.str("val"), "val", base, separator, allow_binary);
    check_ids(*val_corpus, "val");
    val_rows = data::SequenceDataset(val_corpus, seq, layout, pad_id);
  } else {
    auto [v, t] = all.split(val_fraction);
    train_rows = t, val_rows = v;
  }
  const std::string data_name = flags.str("data").empty() ? "the generated corpus" : "--data '" + flags.str("data") + "'";
  if (train_rows->rows() == 0)
    throw examples::UsageError(data_name + " holds " + std::to_string(corpus->size()) + " tokens: no training row of --seq " +
                               std::to_string(seq) + " tokens" + (flags.str("val").empty() ? " after the validation split" : "") +
                               " (lower --seq or give more data)\n");
  if (val_rows->rows() == 0)
    throw examples::UsageError(flags.str("val").empty()
                                   ? "the validation split (--val-fraction " + flags.str("val-fraction") + " of " + data_name +
                                         ") holds no row of --seq " + std::to_string(seq) +
                                         " tokens (raise --val-fraction, lower --seq or pass --val)\n"
                                   : "--val '" + flags.str("val") + "' holds no row of --seq " + std::to_string(seq) +
                                         " tokens (lower --seq or give more validation data)\n");
  // --eval-batches x --batch rows validate: the head of the validation rows that split leaves.
  const int64_t val_limit = eval_batches * batch, val_all = val_rows->rows();
  if (eval_batches > 0 && val_limit < val_all)
    val_rows = val_rows->split(static_cast<double>(val_all - val_limit) / static_cast<double>(val_all)).second;
  if (main_rank)
    std::printf("data: %lld training rows, %lld validation rows of %lld tokens (%s)%s\n",
                static_cast<long long>(train_rows->rows()), static_cast<long long>(val_rows->rows()),
                static_cast<long long>(seq), layout_name.c_str(),
                train_rows->truncated() ? (", " + std::to_string(train_rows->truncated()) + " examples cut at --seq").c_str()
                                        : "");

  const int64_t per_rank = batch / launch.world_size;
  train::TrainingArguments args{
      .output_dir = out, .learning_rate = lr, .weight_decay = weight_decay, .lr_scheduler_type = scheduler,
      .warmup_steps = warmup, .max_steps = steps, .per_device_train_batch_size = per_rank,
      .per_device_eval_batch_size = per_rank, .gradient_accumulation_steps = accum, .max_grad_norm = clip,
      .bf16 = dtype == kBFloat16 && !full, .gradient_checkpointing = checkpointing, .logging_steps = log_every,
      .eval_steps = eval_every, .save_steps = save_every, .save_total_limit = save_limit,
      .resume_from_checkpoint = checkpoint, .seed = seed, .use_cpu = !on_gpu, .cuda_graph = graph_flag};
  // bf16 full fine-tuning: every weight in bfloat16 (TrainingArguments::bf16 keeps trainable ones float32).
  if (full) model.to(dtype);
  train::Trainer trainer(base.model, std::make_shared<data::SequenceDataset>(*train_rows), args,
                         std::make_shared<data::SequenceDataset>(*val_rows));
  if (!full) trainer.set_lora_config(lora);

  // The sample's prompt: the start of the first validation row; greedy, up to the EOS.
  std::vector<int32_t> prompt;
  for (int64_t id : val_rows->rows_batch(0, 1, Device::cpu()).ids.to_vector<int64_t>())
    prompt.push_back(static_cast<int32_t>(id));
  prompt.resize(static_cast<size_t>(std::min<int64_t>(16, seq / 2)));
  nn::GenerationConfig sample_config{.max_new_tokens = std::min<int64_t>(
                                         sample_tokens, base.context - static_cast<int64_t>(prompt.size()))};
  if (base.tokenizer && base.tokenizer->eos_token_id()) sample_config.eos_token_id = {*base.tokenizer->eos_token_id()};
  auto callbacks = std::make_shared<ProgramCallbacks>();
  callbacks->stop_at = stop_at;
  callbacks->flags = training_flags(flags);
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
      examples::copy_tokenizer_files(flags.str("base"), out + "/" + name);
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
  if (merge) {
    peft::merge_and_unload(model);
    save_model("merged", "merged");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
