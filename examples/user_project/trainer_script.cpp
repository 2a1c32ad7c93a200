// The README's Trainer script: LoRA on a Hugging Face folder, trained, evaluated and saved by
// train::Trainer (checkpoints, resume, logs, schedule, clipping as transformers' Trainer).
// Usage: trainer_script <model folder> <train.jsonl> <out dir>
#include <iostream>

#include "tapegrad.h"
using namespace tg;

int main(int argc, char** argv) {
  if (argc != 4) return std::cerr << "usage: trainer_script <model folder> <train.jsonl> <out dir>\n", 2;
  const std::string folder = argv[1];
  auto tok = data::Tokenizer::from_pretrained(folder);
  auto model = nn::from_pretrained(folder);  // Llama, Mistral, Qwen, GPT-2: by config.json
  // The attention projections; peft's default for the family is model->architecture().lora_targets.
  peft::apply_lora(*model, {.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"}});
  data::SequenceDataset rows(data::tokenize_jsonl_file(argv[2], tok), /*seq=*/64, data::Layout::Pack);
  auto [val, train] = rows.split(0.1);  // the last 10% of the rows validate
  train::TrainingArguments args{.output_dir = argv[3], .learning_rate = 1e-2, .lr_scheduler_type = "cosine",
                                .warmup_steps = 3, .max_steps = 30, .per_device_train_batch_size = 4,
                                .logging_steps = 10, .eval_steps = 20, .save_steps = 15, .save_total_limit = 1};
  train::Trainer trainer(model, std::make_shared<data::SequenceDataset>(train), args,
                         std::make_shared<data::SequenceDataset>(val));
  const train::TrainOutput out = trainer.train();  // resume_from_checkpoint = "latest" continues a run
  const train::LogEntry eval = trainer.evaluate();
  std::cout << "trained " << out.global_step << " steps, training loss " << out.training_loss << ", eval loss "
            << eval.at("eval_loss") << ", perplexity " << eval.at("eval_perplexity") << "\n";
  trainer.save_model();  // <out>/adapter_model.safetensors + adapter_config.json: PeftModel.from_pretrained
}
