// The README's LoRA fine-tuning script: wrap a Llama with LoRA, train only the adapters.
#include <cstdio>

#include "tapegrad.h"
using namespace tg;

int main() {
  manual_seed(0);
  nn::LlamaConfig cfg = nn::LlamaConfig::tiny();
  auto model = std::make_shared<nn::LlamaForCausalLM>(cfg);
  // nn::load_state_dict_file(*model, "base.safetensors");      // start from a pretrained base
  peft::LoraConfig lora;                                          // r 8, alpha 16, q/k/v/o_proj
  peft::apply_lora(*model, lora);                                 // everything else frozen
  peft::print_trainable_parameters(*model);
  Device dev = default_device();
  model->to(dev);
  optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3});
  optim::WarmupCosineLR sched(opt, /*warmup_steps=*/2, /*total_steps=*/20);
  Generator gen(0);
  for (int step = 0; step < 20; ++step) {
    Tensor ids = to(randint(0, cfg.vocab_size, {8, 64}, gen), dev);  // your tokens here: batch 8 x 64
    opt.zero_grad();
    Tensor loss = model->loss(ids, ids);                          // next-token cross entropy
    loss.backward();
    optim::clip_grad_norm_(model->trainable_parameters(), 1.0);
    opt.step();
    sched.step();
    if (step % 5 == 0) std::printf("step %3d  loss %.4f  lr %.2e\n", step, loss.item(), opt.lr());
  }
  peft::save_adapter(*model, "out/adapter", lora);  // PeftModel.from_pretrained(base, "out/adapter")
}
