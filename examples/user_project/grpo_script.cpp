// docs/preference.md's GRPO script: LoRA on a Hugging Face folder trained by train::GRPOTrainer
// (TRL's GRPOTrainer) with a reward function written in C++.
// Usage: grpo_script <model folder> <prompts.jsonl> <out dir>
#include <cstdio>
#include <iostream>

#include "tapegrad.h"
using namespace tg;

int main(int argc, char** argv) {
  if (argc != 4) return std::cerr << "usage: grpo_script <model folder> <prompts.jsonl> <out dir>\n", 2;
  const std::string folder = argv[1];
  auto tok = data::Tokenizer::from_pretrained(folder);
  auto model = nn::from_pretrained(folder);
  peft::apply_lora(*model, {.r = 8, .lora_alpha = 16, .target_modules = model->architecture().lora_targets});
  // {"prompt": ..., "answer": ...} a line; the reward: the share of the completion's letters that are the answer's
  train::RewardFunction answer_letters{"answer_letters", [](const train::RewardInput& in) {
    const std::string want = in.prompt.row.at("answer").as_string();
    double letters = 0, hits = 0;
    for (char c : in.completion)
      if (std::isalpha(static_cast<unsigned char>(c))) letters += 1, hits += want.find(c) != std::string::npos;
    return letters > 0 ? hits / letters : 0.0;
  }};
  train::TrainingArguments args{.output_dir = argv[3], .learning_rate = 3e-2, .max_steps = 12,
                                .per_device_train_batch_size = 8, .logging_steps = 4, .save_steps = 0};
  train::GRPOConfig grpo{.num_generations = 4, .max_completion_length = 8, .beta = 0.04};
  train::GRPOTrainer trainer(model, tok, data::read_prompt_jsonl(argv[2], tok), {answer_letters}, args, grpo);
  const train::TrainOutput out = trainer.train();  // each step: generate, score, then the clipped loss
  const train::LogEntry& last = trainer.state().log_history.back();
  std::printf("trained %lld steps: reward %.3f, generation %.2f s, training %.2f s\n",
              static_cast<long long>(out.global_step), last.at("reward"), last.at("generation_seconds"),
              last.at("training_seconds"));
  trainer.save_model();
}
