// docs/preference.md's DPO script: LoRA on a Hugging Face folder trained on preference pairs by
// train::DPOTrainer (TRL's DPOTrainer: the reference is the base, the adapters switched off).
// Usage: dpo_script <model folder> <pairs.jsonl> <out dir>
#include <cstdio>
#include <iostream>

#include "tapegrad.h"
using namespace tg;

int main(int argc, char** argv) {
  if (argc != 4) return std::cerr << "usage: dpo_script <model folder> <pairs.jsonl> <out dir>\n", 2;
  const std::string folder = argv[1];
  auto tok = data::Tokenizer::from_pretrained(folder);
  auto model = nn::from_pretrained(folder);
  peft::apply_lora(*model, {.r = 8, .lora_alpha = 16, .target_modules = model->architecture().lora_targets});
  // {"prompt": ..., "chosen": ..., "rejected": ...} a line: text, or conversations for the chat template
  const std::vector<data::PreferencePair> pairs = data::read_preference_jsonl(argv[2], tok);
  train::TrainingArguments args{.output_dir = argv[3], .learning_rate = 5e-3, .max_steps = 20,
                                .per_device_train_batch_size = 4, .logging_steps = 5, .save_steps = 10};
  train::DPOConfig dpo{.beta = 0.1, .loss_type = {"sigmoid"}, .max_length = 64};
  train::DPOTrainer trainer(model, pairs, args, dpo, /*eval_pairs=*/pairs);
  trainer.train();  // resume_from_checkpoint = "latest" continues a run bit for bit
  const train::LogEntry eval = trainer.evaluate();
  std::printf("eval: loss %.4f, rewards/accuracies %.2f, rewards/margins %.4f\n", eval.at("eval_loss"),
              eval.at("eval_rewards/accuracies"), eval.at("eval_rewards/margins"));
  trainer.save_model();  // <out dir>/adapter_model.safetensors + adapter_config.json, as peft writes them
}
