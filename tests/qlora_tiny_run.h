// The tiny QLoRA run behind tests/fixtures/qlora/ (issue 37): the fixture Llama of
// tests/fixtures/hf/llama loaded with its Linear layers in NF4 (double quantisation, float32
// compute), LoRA r 4 on every projection, AdamW on a repeating token pattern. interop_dump
// qlora-train writes its adapter (tests/fixtures/qlora/adapter); tests/test_qlora.cpp runs it
// again and checks it still trains that adapter; tests/fixtures/qlora/make_fixtures.py gives peft
// the adapter on the base dequantised by tests/fixtures/nf4's reference and records the logits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "nn/models/pretrained.h"
#include "optim/optimizer.h"
#include "peft/lora.h"

namespace tg::test {

inline const nn::QuantizationConfig kTinyQloraQuantization{.load_in_4bit = true, .quant_type = "nf4",
                                                            .double_quant = true, .compute_dtype = kFloat32};

inline peft::LoraConfig tiny_qlora_lora(const std::string& base) {
  peft::LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  lc.base_model_name_or_path = base;
  return lc;
}

// Two rows of 16 tokens of a pattern the model learns quickly.
inline Tensor tiny_qlora_ids() {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 32; ++i) ids.push_back((i * 7 + i / 16) % 64);
  return from_vector(ids, {2, 16});
}

struct TinyQloraRun {
  std::shared_ptr<nn::CausalLM> model;
  std::vector<double> losses;
};

inline TinyQloraRun tiny_qlora_run(const std::string& base, int steps = 30) {
  TinyQloraRun run;
  run.model = nn::from_pretrained(base, {.dtype = kFloat32, .quantization = kTinyQloraQuantization});
  run.model->train();
  Generator gen(37);
  peft::apply_lora(*run.model, tiny_qlora_lora(base), gen);
  optim::AdamW opt(run.model->named_trainable_parameters(), {.lr = 2e-2, .weight_decay = 0.0});
  const Tensor ids = tiny_qlora_ids();
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = run.model->loss(ids, ids);
    run.losses.push_back(loss.item());
    loss.backward();
    opt.step();
  }
  return run;
}

}  // namespace tg::test
