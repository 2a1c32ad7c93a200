// Preference and reward fine-tuning with LoRA from the command line, as TRL's trainers do it:
//
//   preference_finetune --method dpo   --base Qwen2.5-0.5B-Instruct --data pairs.jsonl --steps 200
//   preference_finetune --method simpo --base TinyLlama-folder --data pairs.jsonl
//   preference_finetune --method kto   --base TinyLlama-folder --data labelled.jsonl
//   preference_finetune --method grpo  --base Qwen2.5-0.5B-Instruct --data prompts.jsonl --reward exact_match
//
// dpo and ipo (DPO's loss_type "ipo") read {"prompt", "chosen", "rejected"} rows, simpo (CPO's
// loss_type "simpo", cpo_alpha 0) and orpo too; kto reads {"prompt", "completion", "label"}; grpo
// reads {"prompt", ...} and scores each sampled completion with --reward (exact_match against the
// row's "answer", or a regex) and --length-penalty. Text or conversations (rendered with the
// folder's chat template). The reference of dpo / ipo / kto / grpo's KL is the base with the
// adapters switched off. Flags named as lora_finetune's mean the same; the run is a
// train::DPOTrainer (CPOTrainer, ORPOTrainer, KTOTrainer, GRPOTrainer): logs in <out>/log.csv and
// log.jsonl with TRL's names, checkpoints that --resume bit for bit, the adapter in <out>.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/parallel.h"
#include "data/preference.h"
#include "examples/common/base_model.h"
#include "examples/common/flags.h"
#include "examples/common/inputs.h"
#include "examples/common/precision.h"
#include "peft/lora.h"
#include "train/checkpoint.h"
#include "train/grpo_trainer.h"
#include "train/kto_trainer.h"
#include "train/preference_trainer.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgram = "preference_finetune";

std::string resume_from(const std::string& flag) {
  if (flag == "false") return "";
  if (flag == "true") return "latest";
  if (!fs::exists(fs::path(flag) / train::kTrainingStateFile))
    throw examples::UsageError("--resume '" + flag + "' is not a checkpoint folder (no " + train::kTrainingStateFile +
                               " in it): pass --resume alone for the newest checkpoint of --out\n");
  return flag;
}

// --reward and --length-penalty as GRPO reward functions.
std::vector<train::RewardFunction> reward_functions(const examples::Flags& flags, int64_t max_completion_length) {
  std::vector<train::RewardFunction> out;
  const std::string r = flags.str("reward");
  if (r == "exact_match") out.push_back(train::rewards::exact_match());
  else if (r.starts_with("exact_match:")) out.push_back(train::rewards::exact_match(r.substr(12)));
  else if (r.starts_with("regex:")) out.push_back(train::rewards::regex_match(r.substr(6)));
  else if (!r.empty())
    throw examples::UsageError("--reward wants exact_match, exact_match:<field> or regex:<pattern>, got '" + r + "'\n");
  if (const double scale = flags.number("length-penalty", 0); scale > 0)
    out.push_back(train::rewards::length_penalty(max_completion_length, scale));
  if (out.empty()) throw examples::UsageError("--method grpo needs --reward (or --length-penalty)\n");
  return out;
}

int run(int argc, char** argv) {
  examples::Flags flags(kProgram, "LoRA preference fine-tuning (DPO, IPO, SimPO, ORPO, KTO) and GRPO of a Hugging "
                                  "Face model on your JSONL data, as TRL's trainers.");
  flags.add("method", "dpo", "dpo | ipo | simpo | orpo | kto | grpo")
      .add("base", "", "a Hugging Face model folder (config.json, model.safetensors, tokenizer)")
      .add("data", "", "training rows, .jsonl: {\"prompt\", \"chosen\", \"rejected\"} (dpo, ipo, simpo, orpo), "
                       "{\"prompt\", \"completion\", \"label\"} (kto), {\"prompt\", ...} (grpo)")
      .add("val", "", "evaluation rows as --data (not for grpo)")
      .add("out", "out/preference", "directory for the adapter, logs and checkpoints")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "f32", examples::kDtypeHelp)
      .add("rank", "8", "LoRA rank r")
      .add("alpha", "16", "LoRA alpha (scale alpha / r)")
      .add("dropout", "0", "dropout on the LoRA path (TRL's disable_dropout sets it to 0 but for grpo)")
      .add("targets", "auto", "comma-separated module names to adapt (auto: the architecture's)")
      .add("lr", "5e-6", "peak learning rate")
      .add("lr-scheduler", "linear", "linear | cosine | constant | constant_with_warmup")
      .add("weight-decay", "0", "AdamW weight decay")
      .add("warmup", "0", "linear warmup steps, below --steps")
      .add("steps", "100", "optimizer steps in all")
      .add("batch", "4", "pairs (examples; grpo: completions) per micro-batch")
      .add("grad-accum", "1", "micro-batches per optimizer step")
      .add("clip", "1.0", "gradient clipping by global norm (0: off)")
      .add("gradient-checkpointing", "false", "recompute each decoder layer's activations at backward")
      .add("log-every", "10", "a log row every N steps")
      .add("eval-every", "0", "evaluate on --val every N steps (0: only at the end)")
      .add("save-every", "100", "write a checkpoint every N steps (0: only at the end)")
      .add("save-total-limit", "0", "keep only the newest N checkpoints (0: all)")
      .add("resume", "false", "continue from the newest checkpoint of --out (--resume), or a checkpoint folder")
      .add("seed", "0", "seed of the LoRA init, the data order and the sampling")
      .add("beta", "0.1", "beta: how far from the reference (ipo's tau; grpo: the KL weight, default 0 there)")
      .add("loss-type", "", "the method's loss_type instead of its own (dpo: sigmoid, hinge, ipo, robust, "
                            "comma-separated to sum; simpo: sigmoid, hinge, ipo, simpo; kto: kto, apo_zero_unpaired; "
                            "grpo: grpo, bnpo, dr_grpo, dapo)")
      .add("label-smoothing", "0", "dpo / simpo: the chance a preference label is wrong")
      .add("simpo-gamma", "0.5", "simpo: the target reward margin")
      .add("precompute-ref", "false", "dpo / ipo / kto: the reference's log-probs once before training")
      .add("max-length", "1024", "tokens of prompt + completion kept (0: all)")
      .add("max-prompt-length", "0", "tokens of the prompt kept, its end (0: all)")
      .add("truncation-mode", "keep_start", "keep_start | keep_end of prompt + completion")
      .add("num-generations", "8", "grpo: completions sampled for each prompt")
      .add("max-completion-length", "256", "grpo: new tokens at most")
      .add("temperature", "1.0", "grpo: sampling temperature")
      .add("num-iterations", "1", "grpo: optimizer steps on each generation")
      .add("epsilon", "0.2", "grpo: the ratio's clip")
      .add("epsilon-high", "0", "grpo: the ratio's upper clip (0: --epsilon; DAPO: 0.28)")
      .add("scale-rewards", "group", "grpo: group | batch | none")
      .add("reward", "", "grpo: exact_match (the completion against the row's \"answer\"), exact_match:<field>, or "
                         "regex:<pattern> (1 when it matches the completion)")
      .add("length-penalty", "0", "grpo: add -scale * completion tokens / --max-completion-length to the reward")
      .add("threads", "0", "CPU threads (0: all cores)");
  if (!flags.parse(argc, argv)) return std::cout << flags.usage(), 0;
  const std::string method = flags.str("method");
  if (method != "dpo" && method != "ipo" && method != "simpo" && method != "orpo" && method != "kto" && method != "grpo")
    throw examples::UsageError("--method wants dpo, ipo, simpo, orpo, kto or grpo, got '" + method + "'\n");
  const Device device = examples::device_flag(flags);
  const DType dtype = examples::dtype_flag(flags);
  if (const int64_t threads = flags.integer("threads", 0, 4096); threads > 0) set_num_threads(static_cast<int>(threads));
  const int64_t steps = flags.integer("steps", 1, int64_t{1} << 40), batch = flags.integer("batch", 1, 1 << 20);
  const int64_t rank = flags.integer("rank", 1, 1 << 16), seed = flags.integer("seed", 0);
  const double lr = flags.number("lr", 0), beta = flags.number("beta", 0);
  if (lr == 0) throw examples::UsageError("--lr wants a learning rate > 0\n");
  if (flags.str("base").empty() || flags.str("data").empty())
    throw examples::UsageError("--base (a Hugging Face folder) and --data are needed\n" + flags.usage());
  examples::check_model_path(flags, "base");
  for (const char* name : {"data", "val"})
    if (!flags.str(name).empty()) examples::check_data_file(flags.str(name), name);
  if (method == "grpo" && !flags.str("val").empty()) throw examples::UsageError("--val is not read by --method grpo\n");
  const train::TrainingArguments args{
      .output_dir = flags.str("out"), .learning_rate = lr, .weight_decay = flags.number("weight-decay", 0),
      .lr_scheduler_type = flags.str("lr-scheduler"), .warmup_steps = flags.integer("warmup", 0), .max_steps = steps,
      .per_device_train_batch_size = batch, .per_device_eval_batch_size = batch,
      .gradient_accumulation_steps = flags.integer("grad-accum", 1, 1 << 20), .max_grad_norm = flags.number("clip", 0),
      .bf16 = dtype == kBFloat16, .gradient_checkpointing = flags.boolean("gradient-checkpointing"),
      .logging_steps = flags.integer("log-every", 1), .eval_steps = flags.integer("eval-every", 0),
      .save_steps = flags.integer("save-every", 0), .save_total_limit = flags.integer("save-total-limit", 0),
      .resume_from_checkpoint = resume_from(flags.str("resume")), .seed = seed, .use_cpu = device.is_cpu()};
  args.validate();  // a bad value is reported before the model loads
  const int64_t max_length = flags.integer("max-length", 0), max_prompt = flags.integer("max-prompt-length", 0);
  const std::string truncation = flags.str("truncation-mode"), loss_type = flags.str("loss-type");
  const bool precompute = flags.boolean("precompute-ref");

  examples::BaseModel base = examples::load_base(flags.str("base"), "auto", kProgram, "--base", {.dtype = kFloat32},
                                                     examples::load_tokenizer(flags.str("base"), kProgram, "--base"));
  if (!base.tokenizer) throw examples::UsageError("--base must be a Hugging Face folder with its tokenizer\n");
  const data::Tokenizer& tok = *base.tokenizer;
  Generator init(static_cast<uint64_t>(seed));
  const std::vector<std::string> targets = flags.str("targets") == "auto" ? base.default_targets : flags.list("targets");
  peft::apply_lora(*base.model, {.r = rank, .lora_alpha = flags.number("alpha"), .lora_dropout = flags.number("dropout", 0, 0.99),
                                 .target_modules = targets, .base_model_name_or_path = flags.str("base")},
                   init);
  peft::print_trainable_parameters(*base.model);

  std::unique_ptr<train::Trainer> trainer;
  std::function<train::LogEntry()> evaluate;
  if (method == "kto") {
    const auto rows = data::read_unpaired_jsonl(flags.str("data"), tok);
    const auto val = flags.str("val").empty() ? decltype(rows){} : data::read_unpaired_jsonl(flags.str("val"), tok);
    train::KTOConfig c{.beta = beta, .precompute_ref_log_probs = precompute, .max_length = max_length,
                       .truncation_mode = truncation, .max_prompt_length = max_prompt};
    if (!loss_type.empty()) c.loss_type = loss_type;
    auto t = std::make_unique<train::KTOTrainer>(base.model, rows, args, c, val);
    if (!val.empty()) evaluate = [p = t.get()] { return p->evaluate(); };
    trainer = std::move(t);
  } else if (method == "grpo") {
    const int64_t completion = flags.integer("max-completion-length", 1);
    train::GRPOConfig c{.num_generations = flags.integer("num-generations", 2), .max_completion_length = completion,
                        .temperature = flags.number("temperature", 0), .beta = flags.was_set("beta") ? beta : 0.0,
                        .num_iterations = flags.integer("num-iterations", 1), .epsilon = flags.number("epsilon", 0, 1),
                        .epsilon_high = flags.number("epsilon-high", 0), .scale_rewards = flags.str("scale-rewards")};
    if (!loss_type.empty()) c.loss_type = loss_type;
    trainer = std::make_unique<train::GRPOTrainer>(base.model, tok, data::read_prompt_jsonl(flags.str("data"), tok),
                                                   reward_functions(flags, completion), args, c);
  } else {
    const auto pairs = data::read_preference_jsonl(flags.str("data"), tok);
    const auto val = flags.str("val").empty() ? decltype(pairs){} : data::read_preference_jsonl(flags.str("val"), tok);
    std::unique_ptr<train::PairwiseTrainer> t;
    if (method == "dpo" || method == "ipo") {
      train::DPOConfig c{.beta = beta, .label_smoothing = flags.number("label-smoothing", 0, 0.5),
                         .precompute_ref_log_probs = precompute, .max_length = max_length,
                         .truncation_mode = truncation, .max_prompt_length = max_prompt};
      if (method == "ipo") c.loss_type = {"ipo"};
      if (!loss_type.empty()) c.loss_type = flags.list("loss-type");
      t = std::make_unique<train::DPOTrainer>(base.model, pairs, args, c, val);
    } else if (method == "simpo") {
      t = std::make_unique<train::CPOTrainer>(
          base.model, pairs, args,
          train::CPOConfig{.beta = beta, .loss_type = loss_type.empty() ? "simpo" : loss_type,
                           .label_smoothing = flags.number("label-smoothing", 0, 1), .cpo_alpha = 0.0,
                           .simpo_gamma = flags.number("simpo-gamma"), .max_length = max_length,
                           .truncation_mode = truncation, .max_prompt_length = max_prompt},
          val);
    } else {
      t = std::make_unique<train::ORPOTrainer>(
          base.model, pairs, args,
          train::ORPOConfig{.beta = beta, .max_length = max_length, .truncation_mode = truncation,
                            .max_prompt_length = max_prompt},
          val);
    }
    if (!val.empty()) evaluate = [p = t.get()] { return p->evaluate(); };
    trainer = std::move(t);
  }
  const train::TrainOutput out = trainer->train();
  std::printf("trained %lld steps, mean loss %.6g\n", static_cast<long long>(out.global_step), out.training_loss);
  if (evaluate) {
    const train::LogEntry e = evaluate();
    if (e.has("eval_rewards/accuracies"))
      std::printf("eval: loss %.6g, rewards/accuracies %.4g\n", e.at("eval_loss"), e.at("eval_rewards/accuracies"));
  }
  trainer->save_model();
  std::printf("wrote the adapter (peft's format) to %s\n", flags.str("out").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
