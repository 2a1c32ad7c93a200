// Writes models, inputs and outputs for a side-by-side check against transformers + peft
// (tests/interop/check_against_transformers.py reads them; scripts/interop-check.sh runs both).
//   interop_dump dump <dir>      models, adapter, inputs, outputs and gradients
//   interop_dump convert <dir>   reads <dir>/py.safetensors, writes <dir>/py_back.safetensors
#include <cstdio>
#include <filesystem>
#include "tapegrad.h"
using namespace tg;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: interop_dump dump|convert <dir>\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[2];
  if (mode == "convert") {  // read a Python-written file, write it back (F16 arrives as F32)
    auto f = safetensors::load_file_with_metadata(dir + "/py.safetensors");
    safetensors::save_file(f.tensors, dir + "/py_back.safetensors", f.metadata);
    return 0;
  }
  std::filesystem::create_directories(dir);
  Generator gen(1);
  nn::LlamaConfig c;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  nn::LlamaForCausalLM model(c, gen);
  io::save_state_dict(model, dir + "/llama.safetensors");
  Tensor ids = randint(0, 256, {2, 16}, gen);
  std::vector<int64_t> lab = ids.to_vector<int64_t>();
  lab[3] = -100;
  lab[20] = -100;
  Tensor labels = from_vector(lab, {2, 16});
  safetensors::TensorMap out;
  out["ids"] = ids;
  out["labels"] = labels;
  Tensor logits = model.forward(ids);
  Tensor loss = nn::causal_lm_loss(logits, labels);
  loss.backward();
  out["logits"] = logits.detach();
  out["loss"] = loss.detach();
  for (auto& [n, p] : model.named_parameters())
    if (p.grad().defined()) out["grad." + n] = p.grad();
  model.zero_grad();

  peft::LoraConfig lc;
  lc.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"};
  peft::apply_lora(model, lc, gen);
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.05, gen);
  peft::save_adapter(model, dir + "/adapter", lc);
  Tensor lora_logits = model.forward(ids);
  out["lora_logits"] = lora_logits.detach();
  Tensor lloss = nn::causal_lm_loss(lora_logits, labels);
  lloss.backward();
  for (auto& [n, p] : model.named_trainable_parameters()) out["lora_grad." + n] = p.grad();
  peft::merge_and_unload(model);
  out["merged_logits"] = model.forward(ids).detach();

  // AdamW, three steps
  Tensor p = randn({5}, gen);
  p.requires_grad_(true);
  out["adam.p0"] = clone_data(p);
  optim::AdamW opt({p}, {.lr = 1e-2, .weight_decay = 0.1});
  for (int s = 0; s < 3; ++s) {
    Tensor g = randn({5}, gen);
    out["adam.g" + std::to_string(s)] = g;
    p.set_grad(g);
    opt.step();
    out["adam.p" + std::to_string(s + 1)] = clone_data(p);
  }

  // GPT-2
  nn::GPT2Config gc = nn::GPT2Config::tiny();
  gc.n_layer = 2;
  gc.n_positions = 32;
  nn::GPT2LMHeadModel gpt(gc, gen);
  io::save_state_dict(gpt, dir + "/gpt2.safetensors");
  out["gpt2_logits"] = gpt.forward(ids).detach();
  out["gpt2_loss"] = gpt.loss(ids, labels).detach();
  safetensors::save_file(out, dir + "/io.safetensors");
  std::printf("dumped to %s\n", dir.c_str());
}
