// The toy transformer, end to end, written the way you would write your own script:
//   1. pre-train a small Llama (byte-level) on one corpus with train::Trainer,
//   2. LoRA fine-tune it on a second corpus of another style (base weights and norms frozen),
//   3. show what the adapter learned (validation loss on both corpora, samples before/after)
//      and save it as a peft adapter.
// Runs with no arguments on a CPU in a couple of minutes; picks the GPU when there is one.
// --dtype bf16: pre-training stays float32; for LoRA the Trainer casts the frozen base to bfloat16
// and the adapters train in float32 (TrainingArguments::bf16); --qlora quantises the base to NF4
// first, --fp8 to FP8 (e4m3, 128x128 block scales: on a Hopper GPU its GEMMs run in FP8). The report ends with the peak memory (host RSS, and on a GPU the device's), and each
// step after a phase's first is a replay of it captured as a CUDA graph (--cuda-graph; not with
// --nproc). --nproc N: both phases data-parallel on N GPUs (full training,
// then LoRA), each rank a share of every batch; rank 0 prints and writes.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "data/dataset.h"
#include "examples/common/data.h"
#include "examples/common/data_parallel.h"
#include "examples/common/flags.h"
#include "examples/common/precision.h"
#include "examples/common/printable.h"
#include "nn/generation/generation.h"
#include "nn/models/llama.h"
#include "nn/models/quantization.h"
#include "nn/state_dict.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "train/trainer.h"

using namespace tg;

namespace {

// The samples' prompts (at most 5 bytes: run() checks --sample-bytes for them).
const char* const kSamplePrompts[] = {"the ", "LOG 1"};

// Greedy and sampled continuations of each prompt (bytes are the tokens).
void show_samples(nn::LlamaForCausalLM& model, const char* who, int64_t bytes) {
  const nn::GenerationConfig greedy{.max_new_tokens = bytes};
  const nn::GenerationConfig sampled{.max_new_tokens = bytes, .do_sample = true, .temperature = 0.8, .top_k = 10,
                                     .seed = 7};
  for (const char* prompt : kSamplePrompts) {
    const std::string p = prompt;
    auto text = [&](const nn::GenerationConfig& cfg) {
      const std::vector<int32_t> out = nn::generate(model, {std::vector<int32_t>(p.begin(), p.end())}, cfg)[0];
      return examples::printable(std::string(out.begin() + static_cast<int64_t>(p.size()), out.end()));
    };
    std::printf("  [%s, greedy]       \"%s%s\"\n", who, prompt, text(greedy).c_str());
    std::printf("  [%s, T=0.8 top-10] \"%s%s\"\n", who, prompt, text(sampled).c_str());
  }
}

// A corpus as rows of `seq` bytes: the first 90% train, the first `val_rows` of the rest validate.
struct ByteRows {
  std::shared_ptr<const data::SequenceDataset> train, val;
};
ByteRows byte_rows(const std::string& text, int64_t seq, int64_t val_rows) {
  std::vector<int32_t> ids(text.size());  // a byte a token, 0-255 (char may be signed)
  std::transform(text.begin(), text.end(), ids.begin(), [](char c) { return static_cast<unsigned char>(c); });
  const data::SequenceDataset all(data::corpus_from_examples({std::move(ids)}), seq,
                                  data::Layout::Pack);
  auto [val, train] = all.split(0.1);
  if (val_rows < val.rows()) val = val.split(static_cast<double>(val.rows() - val_rows) / val.rows()).second;
  return {std::make_shared<data::SequenceDataset>(train), std::make_shared<data::SequenceDataset>(val)};
}

int run(int argc, char** argv) {
  examples::Flags flags("toy_transformer", "Pre-train a small Llama on one corpus, LoRA fine-tune it on another.");
  flags.add("config", "auto", "tiny | small | bench-135m (auto: tiny on the CPU, small on a GPU)")
      .add("device", "auto", "cpu | cuda | auto")
      .add("dtype", "f32", std::string(examples::kDtypeHelp) + "; pre-training is always f32")
      .add("data", "", "pre-training text file (default: a generated 'stories' corpus)")
      .add("finetune-data", "", "fine-tuning text file (default: a generated 'logbook' corpus)")
      .add("pretrain-steps", "600", "optimizer steps of pre-training")
      .add("lora-steps", "600", "optimizer steps of LoRA fine-tuning")
      .add("lr", "3e-3", "peak learning rate of pre-training")
      .add("lora-lr", "3e-3", "peak learning rate of LoRA fine-tuning")
      .add("rank", "8", "LoRA rank r")
      .add("alpha", "16", "LoRA alpha (scale alpha / r)")
      .add("targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "modules LoRA adapts")
      .add("batch", "0", "sequences per step (0: the config's)")
      .add("seq", "0", "bytes per sequence (0: the config's)")
      .add("eval-batches", "8", "validation batches per evaluation")
      .add("sample-bytes", "80", "bytes per generated sample")
      .add("threads", "0", "CPU threads (0: all cores)")
      .add("seed", "0", "seed of the initial weights and of the data order")
      .add("cuda-graph", "true", "on the GPU, replay each training step as one CUDA graph after the first")
      .add("qlora", "false", "QLoRA: quantise the pre-trained base's Linear layers (all but the head) to NF4 before "
                             "LoRA")
      .add("logging-steps", "0", "a log row every this many steps (0: a tenth of a phase)")
      .add("fp8", "false", "quantise the pre-trained base's Linear layers (all but the head) to FP8 before LoRA")
      .add("out", "out/toy", "directory for loss logs (CSV + SVG), the base checkpoint and the adapter")
      .add("overwrite-output-dir", "false", "start afresh in an --out holding an earlier run's logs and checkpoints "
                                            "(removed first; make run passes it)");
  examples::add_nproc_flag(flags);
  if (!flags.parse(argc, argv)) {
    std::cout << flags.usage();
    return 0;
  }
  if (const int status = examples::launch_if_asked(flags, argc, argv); status >= 0) return status;
  Device device = examples::device_flag(flags);
  const DType dtype = examples::dtype_flag(flags);
  const examples::Ranks ranks = examples::join_if_launched(device, flags.str("device"));
  if (flags.integer("threads") > 0) set_num_threads(static_cast<int>(flags.integer("threads")));
  std::string config_name = flags.str("config") == "auto" ? (device.is_cuda() ? "small" : "tiny") : flags.str("config");
  nn::LlamaConfig config = nn::LlamaConfig::by_name(config_name);
  const int64_t batch = flags.integer("batch") > 0 ? flags.integer("batch") : examples::default_batch_size(config_name);
  const int64_t seq = flags.integer("seq") > 0 ? flags.integer("seq") : config.max_position_embeddings;
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed"));
  const int64_t sample_bytes = flags.integer("sample-bytes"), room = config.max_position_embeddings - 5;
  if (sample_bytes < 1 || sample_bytes > room)  // a sample continues a prompt of up to 5 bytes
    throw examples::UsageError("--sample-bytes wants 1 to " + std::to_string(room) + " (prompt and sample within the " +
                               std::to_string(config.max_position_embeddings) + "-byte context), got " +
                               flags.str("sample-bytes") + "\n");
  const std::string out = flags.str("out");
  examples::check_batch_splits(batch, ranks.world);
  if (ranks.main()) std::filesystem::create_directories(out);

  std::string text_a = flags.str("data").empty() ? examples::generate_corpus("stories", seed, 1 << 20)
                                                 : examples::read_text_file(flags.str("data"));
  std::string text_b = flags.str("finetune-data").empty() ? examples::generate_corpus("logbook", seed + 1, 1 << 20)
                                                          : examples::read_text_file(flags.str("finetune-data"));
  const int64_t eval_batches = flags.integer("eval-batches", 1, INT32_MAX);
  const ByteRows a = byte_rows(text_a, seq, eval_batches * batch), b = byte_rows(text_b, seq, eval_batches * batch);

  Generator init(seed);
  auto model = std::make_shared<nn::LlamaForCausalLM>(config, init);
  std::printf("tapegrad toy transformer: config %s (%lld parameters) on %s, %d CPU threads\n", config_name.c_str(),
              static_cast<long long>(model->num_parameters()), device.str().c_str(), get_num_threads());
  std::printf("corpus A (pre-training): %zu bytes; corpus B (fine-tuning): %zu bytes; batch %lld x %lld bytes\n\n",
              text_a.size(), text_b.size(), static_cast<long long>(batch), static_cast<long long>(seq));

  // A phase: AdamW, warmup over a tenth of the steps then cosine decay, clipping at 1.0, a log row
  // every tenth of the run; on the GPU (one process) the step replayed as a CUDA graph.
  const bool graph = flags.boolean("cuda-graph") && device.is_cuda() && !ranks.comm;
  const int64_t logging_steps = flags.integer("logging-steps", 0);
  auto trainer_for = [&](const std::string& phase, const ByteRows& rows, int64_t steps, double lr, bool bf16) {
    train::TrainingArguments args{.output_dir = out + "/" + phase,
                                  .overwrite_output_dir = flags.boolean("overwrite-output-dir"),
                                  .learning_rate = lr, .weight_decay = 0.01,
                                  .lr_scheduler_type = "cosine", .warmup_steps = steps / 10, .max_steps = steps,
                                  .per_device_train_batch_size = batch / ranks.world,
                                  .per_device_eval_batch_size = batch / ranks.world, .bf16 = bf16,
                                  .logging_steps = logging_steps > 0 ? logging_steps : std::max<int64_t>(1, steps / 10),
                                  .save_steps = 0,
                                  .seed = static_cast<int64_t>(seed), .use_cpu = !device.is_cuda(),
                                  .cuda_graph = graph ? "on" : "off"};
    auto trainer = std::make_unique<train::Trainer>(model, rows.train, args, rows.val);
    if (ranks.comm) trainer->use_communicator(*ranks.comm);
    return trainer;
  };
  const int64_t pretrain_steps = flags.integer("pretrain-steps", 1), lora_steps = flags.integer("lora-steps", 1);

  // 1. Pre-training on corpus A: every weight trains.
  std::printf("== 1. pre-training on corpus A ==\n");
  auto pretrain = trainer_for("pretrain", a, pretrain_steps, flags.number("lr", 0), false);
  pretrain->train();
  if (ranks.main()) nn::save_state_dict(*model, out + "/base.safetensors", {{"config", config_name}});  // lora_finetune reads it
  pretrain.reset();  // its optimizer's state

  // 2. LoRA fine-tuning on corpus B: only the adapters train (the base in --dtype).
  std::printf("\n== 2. LoRA fine-tuning on corpus B ==\n");
  if (flags.boolean("qlora")) {  // NF4 from the float32 weights; the Trainer casts the rest of the base
    const auto layers = nn::replace_with_4bit_linear(
        *model, {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true, .compute_dtype = dtype});
    std::printf("QLoRA: %zu Linear layers of the base quantised to NF4 (double quantisation)\n", layers.size());
  }
  if (flags.boolean("fp8")) {
    TG_CHECK(!flags.boolean("qlora"), "toy_transformer", "--qlora and --fp8 ask for two formats of the base");
    const auto layers = nn::replace_with_fp8_linear(*model, {.load_in_fp8 = true, .compute_dtype = dtype});
    std::printf("FP8: %zu Linear layers of the base quantised to e4m3 (128x128 block scales)\n", layers.size());
  }
  peft::LoraConfig lora{.r = flags.integer("rank", 1), .lora_alpha = flags.number("alpha"),
                        .target_modules = flags.list("targets")};
  peft::apply_lora(*model, lora);
  peft::print_trainable_parameters(*model);
  if (device.is_cuda()) {  // the report's memory is LoRA's: drop pre-training's cached blocks
    empty_cache(device);
    reset_peak_memory_stats(device);
  }
  auto finetune = trainer_for("lora", b, lora_steps, flags.number("lora-lr", 0), dtype == kBFloat16);
  finetune->set_lora_config(lora);
  // Before any update the adapters add zero: the base as LoRA sees it, in its precision.
  const double b_before = finetune->evaluate(b.val, "corpus_b").at("corpus_b_loss");
  const double a_before = finetune->evaluate(a.val, "corpus_a").at("corpus_a_loss");
  if (ranks.main()) show_samples(*model, "base", sample_bytes);
  finetune->train();

  // 3. What the adapter learned, and what the model forgot.
  const double b_after = finetune->evaluate(b.val, "corpus_b").at("corpus_b_loss");
  const double a_after = finetune->evaluate(a.val, "corpus_a").at("corpus_a_loss");
  if (!ranks.main()) return 0;
  std::printf("\n== 3. results ==\n");
  std::printf("                      before LoRA   after LoRA\n");
  std::printf("  corpus B (learned)  %10.4f   %10.4f\n", b_before, b_after);
  std::printf("  corpus A (forgot)   %10.4f   %10.4f\n", a_before, a_after);
  show_samples(*model, "adapted", sample_bytes);
  std::printf("during LoRA, %s\n", examples::peak_memory_line(device).c_str());
  finetune->save_model(out + "/adapter");
  std::printf("\nwrote %s/{pretrain,lora}/{log.csv,log.jsonl,loss.svg,checkpoint-*}, %s/base.safetensors and the peft "
              "adapter in %s/adapter\n", out.c_str(), out.c_str(), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::guarded_main(argc, argv, run); }
