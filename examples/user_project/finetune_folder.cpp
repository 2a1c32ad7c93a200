// docs/huggingface.md's "fine-tune a Hugging Face folder on your text": text -> ids -> LoRA training ->
// peft adapter -> generation. Usage: finetune_folder <model folder> <train.jsonl> <out dir>
#include <iostream>

#include "tapegrad.h"
using namespace tg;

int main(int argc, char** argv) {
  if (argc != 4) return std::cerr << "usage: finetune_folder <model folder> <train.jsonl> <out dir>\n", 2;
  const std::string folder = argv[1];                   // transformers' save_pretrained folder + tokenizer
  auto tok = data::Tokenizer::from_pretrained(folder);  // tokenizer.json or tokenizer.model
  auto model = nn::from_pretrained(folder);             // Llama, Mistral, Qwen, GPT-2: by config.json
  peft::LoraConfig lora{.target_modules = {"q_proj", "v_proj"}, .base_model_name_or_path = folder};  // GPT-2: c_attn
  peft::apply_lora(*model, lora);
  model->train();
  auto corpus = data::tokenize_jsonl_file(argv[2], tok);  // {"prompt", "completion"}: the prompt is not learned
  data::SequenceDataset rows(corpus, /*seq=*/64, data::Layout::Pack);
  optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-2});
  for (int64_t step = 0; step < 30; ++step) {
    data::Batch b = rows.batch(step, /*batch_size=*/4, /*seed=*/0, Device::cpu());
    opt.zero_grad();
    Tensor loss = nn::causal_lm_loss(model->forward(b.ids), b.labels);
    loss.backward();
    opt.step();
    if (step % 10 == 0) std::cout << "step " << step << " loss " << loss.item<float>() << "\n";
  }
  peft::save_adapter(*model, std::string(argv[3]) + "/adapter", lora);  // PeftModel.from_pretrained loads it
  NoGradGuard no_grad;  // greedy generation
  model->eval();
  std::vector<int32_t> ids = tok.encode("Q: what does bob like?\nA:");
  for (int i = 0; i < 12; ++i) {
    const int64_t t = static_cast<int64_t>(ids.size());
    Tensor logits = model->forward(from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, t}));
    ids.push_back(static_cast<int32_t>(argmax(slice(logits, 1, t - 1, t), -1).item<int64_t>()));
  }
  std::cout << tok.decode(ids, /*skip_special_tokens=*/true) << "\n";
}
