// LoRA fine-tuning of a causal LM: the script to copy and adapt.
//
//   lora_finetune --base TinyLlama-folder --data train.jsonl --steps 300
//   lora_finetune --base out/toy/base.safetensors --data my_text.txt      # the toy, bytes as tokens
//
// --base is a Hugging Face folder (Llama or GPT-2 of any shape from config.json, its tokenizer)
// or a toy_transformer checkpoint. The data: JSONL ({"text"} or {"prompt", "completion"}, the
// prompt not learned), an llm.c token file (.bin) or text. Wraps the target Linear layers with
// LoRA (everything else frozen, norms included), trains the adapters with AdamW, linear warmup
// + cosine decay, gradient clipping and optional gradient accumulation, evaluates (with a
// generated sample), and saves a peft adapter. Along the way: a live progress line, a CSV + SVG
// loss log, a checkpoint every --save-every steps (and on Ctrl-C), --resume that continues
// bit-exactly (and refuses changed training flags), and with --merge the merged model (a folder
// transformers loads, for a Hugging Face base). With --dtype bf16 the frozen base runs in
// bfloat16 and the adapters train in float32; on a GPU the report ends with the peak GPU memory.
// --gradient-checkpointing keeps less of it: each layer's activations are recomputed at backward.
// --nproc N trains data-parallel on N GPUs (or start it with examples/launch or torchrun): each
// rank takes --batch / N rows of every micro-batch, the gradients are averaged over NCCL, rank 0
// logs, evaluates and writes; the loss curve and the checkpoints are those of one process, so a
// run may resume on another number of GPUs. --full trains every parameter instead of adapters
// (full fine-tuning) and writes the model.
// On a GPU the step is captured as a CUDA graph after its first run and replayed (--cuda-graph:
// the same numbers bit for bit, without the host's launch cost) where it can be: one micro-batch,
// no LoRA dropout, no checkpointing, one process (auto: LoRA on a Llama-family model, what has
// run under capture on the H200).
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "data/chat_dataset.h"
#include "data/dataset.h"
#include "examples/common/base_model.h"
#include "examples/common/checkpoint.h"
#include "examples/common/data.h"
#include "examples/common/data_parallel.h"
#include "examples/common/evaluate.h"
#include "examples/common/flags.h"
#include "examples/common/graphed_step.h"
#include "examples/common/inputs.h"
#include "examples/common/printable.h"
#include "examples/common/precision.h"
#include "examples/common/train_log.h"
#include "examples/common/vocabulary.h"
#include "nn/checkpoint.h"
#include "nn/generation.h"
#include "io/json.h"
#include "nn/loss.h"
#include "nn/pretrained.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "distributed/data_parallel.h"
#include "peft/lora.h"
#include "tapegrad.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxThreads = 4096;
std::atomic<bool> interrupted{false};
void on_sigint(int) { interrupted = true; }

// Flags a resumed run may change; every other flag must be as the checkpoint recorded it.
// --gradient-checkpointing changes memory and time only: the gradients are bitwise the same.
const std::vector<std::string> kResumeMayChange = {"out",     "device",      "threads", "eval-every", "eval-batches",
                                                   "save-every", "stop-at",  "resume",  "merge",      "sample-tokens",
                                                   "gradient-checkpointing", "nproc", "cuda-graph"};

std::string training_flags_json(const examples::Flags& flags) {
  json::Value v = json::Value::object();
  for (const auto& name : flags.names())
    if (std::find(kResumeMayChange.begin(), kResumeMayChange.end(), name) == kResumeMayChange.end())
      v.set(name, flags.str(name));
  return json::dump(v);
}

// --resume with a flag that changes training is refused, naming each such flag.
void check_resume_flags(const examples::Flags& flags, const examples::CheckpointMetadata& saved, const std::string& ckpt) {
  auto it = saved.find("training_flags");
  if (it == saved.end()) return;  // written before flags were recorded
  const json::Value then = json::parse(it->second);
  std::string changed;
  for (const auto& name : then.keys()) {
    const std::string was = then.at(name).as_string();
    const std::string now = flags.names().end() != std::find(flags.names().begin(), flags.names().end(), name)
                                ? flags.str(name) : "(no such flag now)";
    if (was != now) changed += "\n  --" + name + ": '" + was + "' then, '" + now + "' now";
  }
  if (changed.empty()) return;
  std::string may_change;
  for (const auto& n : kResumeMayChange) may_change += (may_change.empty() ? "--" : ", --") + n;
  throw examples::UsageError("--resume: " + ckpt + " was written with other training flags:" + changed +
                             "\nresume with the same values (these may change: " + may_change +
                             "), or start afresh in another --out\n");
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

int run(int argc, char** argv) {
  examples::Flags flags("lora_finetune", "LoRA fine-tuning of a Llama or GPT-2 model (a Hugging Face folder, or the "
                                         "toy transformer's checkpoint) on your data.");
  flags.add("base", "out/toy/base.safetensors", "a Hugging Face model folder (config.json, model.safetensors, "
                                                "tokenizer) or a toy_transformer checkpoint (.safetensors)")
      .add("config", "auto", "toy checkpoints only: tiny | small | bench-135m (auto: the one the checkpoint records)")
      .add("data", "", "training data: .jsonl ({\"text\"} or {\"prompt\", \"completion\"}), .bin (llm.c token file) "
                       "or text (default, toy base only: a generated 'logbook' corpus)")
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
      .add("targets", "auto", "comma-separated module names to adapt (auto: q_proj,k_proj,v_proj,o_proj for Llama, "
                              "c_attn,c_proj for GPT-2)")
      .add("lr", "2e-3", "peak learning rate")
      .add("weight-decay", "0.01", "AdamW weight decay")
      .add("warmup", "30", "linear warmup steps")
      .add("steps", "300", "optimizer steps in all")
      .add("batch", "8", "sequences per micro-batch")
      .add("grad-accum", "1", "micro-batches per optimizer step (gradient accumulation)")
      .add("seq", "128", "tokens per sequence (at most the model's context)")
      .add("clip", "1.0", "gradient clipping by global norm (0: off)")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward instead of "
                                              "keeping them: less memory, one more forward per step, the same "
                                              "gradients bit for bit")
      .add("eval-every", "100", "validate (and print a sample) every N steps (0: only at the end)")
      .add("eval-batches", "8", "validation batches")
      .add("sample-tokens", "32", "tokens generated (greedy, nn::generate) as a sample at each validation (0: none; at "
                                  "most what the context leaves after the prompt of up to 16 tokens)")
      .add("save-every", "100", "write a checkpoint every N steps (0: only at the end and on Ctrl-C)")
      .add("stop-at", "0", "stop after this step as if interrupted (checkpoint written); 0: run to the end")
      .add("resume", "false", "continue from <out>/checkpoint.safetensors (training flags must be unchanged; "
                              "these may change: --out, --device, --threads, --eval-every, --eval-batches, "
                              "--save-every, --stop-at, --merge, --sample-tokens, --gradient-checkpointing, "
                              "--cuda-graph)")
      .add("full", "false", "full fine-tuning: every parameter trains, no LoRA (--rank, --alpha, --dropout and "
                            "--targets unused); writes <out>/model (a Hugging Face folder) or <out>/model.safetensors "
                            "(toy) instead of an adapter")
      .add("cuda-graph", "auto", "auto | on | off: replay the training step as one CUDA graph on the GPU (auto: "
                                 "LoRA on a Llama-family model with --grad-accum 1, --dropout 0, no "
                                 "--gradient-checkpointing, one process)")
      .add("merge", "false", "also write the merged model (LoRA folded into the base weights, in --dtype): "
                             "<out>/merged (a Hugging Face folder) or <out>/merged.safetensors (toy)")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("seed", "0", "seed of the LoRA init and the data order");
  examples::add_nproc_flag(flags);
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  if (const int status = examples::launch_if_asked(flags, argc, argv); status >= 0) return status;
  const std::string dev = flags.str("device");
  if (dev != "auto" && dev != "cpu" && dev != "cuda")
    throw examples::UsageError("--device wants cpu, cuda or auto, got '" + dev + "'\n" + flags.usage());
  Device device = dev == "auto" ? default_device() : dev == "cuda" ? Device::cuda() : Device::cpu();
  const DType dtype = examples::dtype_flag(flags);
  const examples::Ranks ranks = examples::join_if_launched(device, dev);
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
  examples::check_batch_splits(batch, ranks);
  std::string layout_name = flags.str("layout");
  if (layout_name == "auto") layout_name = data::holds_conversations(flags.str("data")) ? "pack-separate" : "pack";
  if (layout_name != "pack" && layout_name != "pad" && layout_name != "pack-separate")
    throw examples::UsageError("--layout wants auto, pack, pad or pack-separate, got '" + layout_name + "'\n" +
                               flags.usage());
  const data::Layout layout = layout_name == "pack"  ? data::Layout::Pack
                              : layout_name == "pad" ? data::Layout::Pad
                                                     : data::Layout::PackSeparate;
  const std::string out = flags.str("out"), ckpt = out + "/checkpoint.safetensors";
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 0));
  // Every numeric flag read now: a bad value is reported before any file is touched.
  const int64_t rank = flags.integer("rank", 1, 1 << 16), warmup = flags.integer("warmup", 0),
                eval_every = flags.integer("eval-every", 0), save_every = flags.integer("save-every", 0),
                stop_at = flags.integer("stop-at", 0), sample_tokens = flags.integer("sample-tokens", 0, INT32_MAX);
  const double alpha = flags.number("alpha"), lora_dropout = flags.number("dropout", 0, 1), lr = flags.number("lr", 0),
               weight_decay = flags.number("weight-decay", 0), clip = flags.number("clip", 0),
               val_fraction = flags.number("val-fraction", 0, 1);
  if (lora_dropout == 1) throw examples::UsageError("--dropout wants a probability in [0, 1), got 1\n");
  if (val_fraction == 0 || val_fraction == 1)
    throw examples::UsageError("--val-fraction wants a fraction in (0, 1), got " + flags.str("val-fraction") + "\n");
  const int eval_batches = static_cast<int>(flags.integer("eval-batches", 0, INT32_MAX));
  const bool allow_binary = flags.boolean("bytes"), resume = flags.boolean("resume"), merge = flags.boolean("merge"),
             checkpointing = flags.boolean("gradient-checkpointing"), full = flags.boolean("full");
  if (full && merge) throw examples::UsageError("--merge folds LoRA into the base: with --full the model itself is written\n");

  const std::string graph_flag = flags.str("cuda-graph");
  if (graph_flag != "auto" && graph_flag != "on" && graph_flag != "off")
    throw examples::UsageError("--cuda-graph wants auto, on or off, got '" + graph_flag + "'\n" + flags.usage());
  // What a captured step cannot hold: a host-weighted sum of micro-batches, fresh dropout masks,
  // checkpointing's recomputation (not validated under capture).
  std::string graph_blocker = !device.is_cuda() ? "the device is the CPU"
                              : accum != 1      ? "--grad-accum is " + std::to_string(accum)
                              : lora_dropout > 0 ? "--dropout is " + flags.str("dropout")
                              : checkpointing    ? "--gradient-checkpointing is on"
                              : layout == data::Layout::PackSeparate ? "--layout is pack-separate"
                              : ranks.comm       ? "it trains data-parallel (" + std::to_string(ranks.world) + " ranks)"
                                                 : "";
  if (graph_flag == "on" && !graph_blocker.empty())
    throw examples::UsageError("--cuda-graph on: cannot capture the step, " + graph_blocker + "\n");
  bool use_graph = graph_flag != "off" && graph_blocker.empty();

  // Every file checked before the model loads (minutes for a large one).
  examples::check_model_path(flags, "base");
  const bool hf_base = fs::is_directory(flags.str("base"));
  if (flags.str("data").empty() && hf_base)
    throw examples::UsageError("--data is needed with a Hugging Face base\n" + flags.usage());
  for (const char* name : {"data", "val"})
    if (!flags.str(name).empty()) examples::check_data_file(flags.str(name), name);
  if (resume && !fs::exists(ckpt)) throw examples::UsageError("--resume: no checkpoint at " + ckpt + "\n");
  if (hf_base) examples::check_folder_vocabulary(flags.str("base"), "lora_finetune", "--base");

  // The base model, frozen, with LoRA on the targets.
  examples::BaseModel base = examples::load_base(flags.str("base"), flags.str("config"));
  if (base.tokenizer)
    examples::check_vocabulary(*base.tokenizer, examples::embedding_rows(*base.model), "lora_finetune", "--base",
                               flags.str("base"));
  if (seq > base.context)
    throw examples::UsageError("--seq " + std::to_string(seq) + " exceeds the model's context of " +
                               std::to_string(base.context) + " tokens\n" + flags.usage());
  std::vector<std::string> targets = flags.str("targets") == "auto" ? base.default_targets : flags.list("targets");
  peft::LoraConfig lora{.r = rank, .lora_alpha = alpha, .lora_dropout = lora_dropout, .target_modules = targets,
                        .base_model_name_or_path = base.hf_folder ? flags.str("base") : ""};
  nn::Module& model = *base.model;
  model.to(dtype);  // before apply_lora, which then makes float32 adapters for a bfloat16 base
  Generator init(seed);
  if (!full) peft::apply_lora(model, lora, init);
  model.to(device);
  if (checkpointing) model.gradient_checkpointing_enable();
  // auto captures what has run under capture on the H200 (Llama-family LoRA); on tries the rest.
  const std::string unvalidated = full                                        ? "full fine-tuning"
                                  : base.architecture.rfind("GPT2", 0) == 0 ? "a GPT-2 model"
                                                                              : "";
  if (use_graph && graph_flag == "auto" && !unvalidated.empty()) {
    use_graph = false;
    if (ranks.main())
      std::printf("CUDA graph: off for %s (not validated under capture yet; --cuda-graph on tries it)\n",
                  unvalidated.c_str());
  }
  if (ranks.main()) std::printf("base: %s (%s%s), %lld-token context\n", flags.str("base").c_str(), base.architecture.c_str(),
              base.tokenizer ? (", " + base.tokenizer->description()).c_str() : ", bytes as tokens",
              static_cast<long long>(base.context));
  if (ranks.main()) peft::print_trainable_parameters(model);
  if (checkpointing && ranks.main()) std::printf("gradient checkpointing: each decoder layer recomputed at backward\n");

  // The data: rows of --seq tokens, validation from --val or the end of --data.
  const std::string separator = unescape(flags.str("doc-separator"));
  std::shared_ptr<const data::TokenCorpus> corpus;
  if (flags.str("data").empty()) {
    if (base.tokenizer) throw examples::UsageError("--data is needed with a Hugging Face base\n" + flags.usage());
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
  if (ranks.main()) std::printf("data: %lld training rows, %lld validation rows of %lld tokens (%s)%s\n",
              static_cast<long long>(train_rows->rows()), static_cast<long long>(val_rows->rows()),
              static_cast<long long>(seq), layout_name.c_str(),
              train_rows->truncated() ? (", " + std::to_string(train_rows->truncated()) + " examples cut at --seq").c_str() : "");

  optim::AdamW opt(model.named_trainable_parameters(), {.lr = lr, .weight_decay = weight_decay});
  optim::WarmupCosineLR schedule(opt, std::min(warmup, steps), steps, 0.1);
  const examples::CheckpointMetadata run_meta = {{"training_flags", training_flags_json(flags)}};
  int64_t start = 0;
  if (resume) {
    // Flags first: a changed --rank would otherwise fail as a shape mismatch.
    check_resume_flags(flags, examples::checkpoint_metadata(ckpt), ckpt);
    start = examples::load_training_checkpoint(ckpt, model, opt);
    if (start > steps)
      throw examples::UsageError("--resume: " + ckpt + " is at step " + std::to_string(start) + ", beyond --steps " +
                                 std::to_string(steps) + "\n");
    schedule.set_step(start);
    if (ranks.main()) std::printf("resumed from %s at step %lld\n", ckpt.c_str(), static_cast<long long>(start));
  }
  if (ranks.main()) fs::create_directories(out);
  // Rank 0's adapter weights (the same seed gives the same anyway), gradients averaged.
  std::optional<distributed::DataParallel> dp;
  if (ranks.comm) dp.emplace(model.named_trainable_parameters(), *ranks.comm);

  std::signal(SIGINT, on_sigint);
  if (device.is_cuda()) reset_peak_memory_stats(device);  // the peak of training, model included
  const std::string phase = full ? "full" : "lora";
  examples::TrainLog log(phase, steps, ranks.main() ? out + "/loss.csv" : "", start);
  // The sample's prompt: the start of the first validation row; greedy, up to the EOS.
  std::vector<int32_t> prompt;
  for (int64_t id : val_rows->rows_batch(0, 1, Device::cpu()).ids.to_vector<int64_t>())
    prompt.push_back(static_cast<int32_t>(id));
  prompt.resize(static_cast<size_t>(std::min<int64_t>(16, seq / 2)));
  nn::GenerationConfig sample_config{.max_new_tokens = std::min<int64_t>(
                                         sample_tokens, base.context - static_cast<int64_t>(prompt.size()))};
  if (base.tokenizer && base.tokenizer->eos_token_id()) sample_config.eos_token_id = {*base.tokenizer->eos_token_id()};
  auto validate = [&](int64_t step) {
    log.eval(step, "validation", examples::evaluate(model, *val_rows, batch, eval_batches, device));
    if (sample_tokens <= 0) return;
    const std::vector<int32_t> out = nn::generate(model, {prompt}, sample_config)[0];
    const std::vector<int32_t> more(out.begin() + static_cast<int64_t>(prompt.size()), out.end());
    log.note("  sample (greedy): \"" + sample_text(base, prompt) + "\" -> \"" + sample_text(base, more) + "\"");
  };
  // The step of one micro-batch as the graph records it (the loop below is the same eagerly).
  examples::GraphedStep graphed_step(use_graph, [&](const Tensor& ids, const Tensor& labels) {
    opt.zero_grad();
    Tensor loss = nn::causal_lm_loss(model.forward(ids), labels);
    loss.backward();
    if (clip > 0) optim::clip_grad_norm_(model.trainable_parameters(), clip);
    opt.step();
    return loss;
  });
  if (use_graph) std::printf("CUDA graph: the training step is captured after its first run and replayed\n");
  log.start();
  for (int64_t step = start + 1; step <= steps; ++step) {
    // A step's micro-batches weigh by their target tokens: the loss is the mean over all of them.
    // Each rank takes its rows of every (global) micro-batch.
    std::vector<data::Batch> micro;
    int64_t targets = 0;
    for (int64_t k = 0; k < accum; ++k) {
      const data::Batch global = train_rows->batch((step - 1) * accum + k, batch, seed, ranks.comm ? Device::cpu() : device);
      targets += global.targets;
      micro.push_back(ranks.comm ? examples::shard_batch(global, ranks, device) : global);
    }
    double step_loss = 0;
    if (use_graph) {  // one micro-batch, one process
      if (targets > 0) step_loss = graphed_step(micro[0].ids, micro[0].labels).item();
    } else {
      opt.zero_grad();
      for (int64_t k = 0; k < accum; ++k) {
        const data::Batch& b = micro[k];
        if (b.targets == 0) continue;  // with data parallelism sync_gradients adds zeros for it
        Tensor loss = nn::causal_lm_loss(examples::logits_of(model, b), b.labels);
        const double weight = static_cast<double>(b.targets) / static_cast<double>(targets);
        step_loss += loss.item() * weight;
        // The ranks' gradients are averaged: scale this rank's share up by the world size.
        Tensor scaled = accum == 1 && !ranks.comm ? loss : loss * (weight * ranks.world);
        if (dp && k + 1 < accum) {
          auto no_sync = dp->no_sync();
          scaled.backward();
        } else {
          scaled.backward();
        }
      }
    }
    // One small all-reduce: the loss over every rank's rows and whether any rank was interrupted.
    const std::vector<double> agreed = examples::sum_over_ranks(ranks, {step_loss, interrupted ? 1.0 : 0.0}, device);
    step_loss = agreed[0];
    if (targets == 0) {
      log.note(phase + " step " + std::to_string(step) + ": every label of the batch is -100 (prompt or padding); no update");
    } else if (!use_graph) {  // the graph's step clips and steps itself
      if (dp) dp->sync_gradients();
      if (clip > 0) optim::clip_grad_norm_(model.trainable_parameters(), clip);
      opt.step();
    }
    schedule.step();
    log.step(step, step_loss, opt.lr(), accum * batch * seq);
    if (ranks.main() && eval_every > 0 && step % eval_every == 0 && step < steps) validate(step);
    bool stop = agreed[1] > 0 || step == stop_at;
    if (ranks.main() && (stop || (save_every > 0 && step % save_every == 0) || step == steps))
      examples::save_training_checkpoint(ckpt, model, opt, step, run_meta);
    if (stop) {
      log.finish();
      if (ranks.main())
        std::printf("stopped at step %lld; checkpoint in %s (continue with --resume)\n", static_cast<long long>(step),
                    ckpt.c_str());
      return agreed[1] > 0 ? 130 : 0;
    }
  }
  if (!ranks.main()) return log.finish(), 0;  // rank 0 validates and writes

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
    peft::save_adapter(model, out + "/adapter", lora);
    std::printf("adapter: %s/adapter (adapter_model.safetensors + adapter_config.json)\n", out.c_str());
  }
  validate(steps);
  log.finish();
  if (device.is_cuda()) std::printf("%s\n", examples::peak_memory_line(device).c_str());
  if (merge) {
    peft::merge_and_unload(model);
    save_model("merged", "merged");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
