// Writes models, inputs and outputs for a side-by-side check against transformers + peft
// (tests/interop/check_against_transformers.py reads them; scripts/gpu/check.sh interop runs both).
//   interop_dump dump <dir>      models, adapter, inputs, outputs and gradients
//   interop_dump convert <dir>   reads <dir>/py.safetensors, writes <dir>/py_back.safetensors
// and, for tests/interop/check_hf_roundtrip.py (Hugging Face folders and peft adapters):
//   interop_dump hf-run <model dir> <inputs> <out> [<adapter dir>]
//       from_pretrained (+ load_adapter); writes logits and loss of inputs' ids and labels, and
//       with an adapter the gradient of every LoRA A/B under its peft key ("grad.<key>")
//   interop_dump hf-export <model dir> <out dir> <max shard bytes> <targets,comma,separated>
//       from_pretrained, then save_pretrained to <out>/model and (sharded) <out>/model_sharded,
//       and an adapter with non-zero B (r 4, alpha 8) to <out>/adapter
//   interop_dump qlora-train <model dir> <adapter dir>
//       the tiny QLoRA run of tests/qlora_tiny_run.h; its adapter (tests/fixtures/qlora/adapter)
#include <cstdio>
#include <filesystem>
#include <sstream>
#include "nn/models/pretrained.h"
#include "tapegrad.h"
#include "tests/qlora_tiny_run.h"
using namespace tg;

namespace {

int hf_run(const std::string& model_dir, const std::string& inputs, const std::string& out_path, const char* adapter) {
  auto model = nn::from_pretrained(model_dir);
  if (adapter) peft::load_adapter(*model, adapter);
  auto in = safetensors::load_file(inputs);
  Tensor logits = model->forward(in.at("ids"));
  Tensor loss = nn::causal_lm_loss(logits, in.at("labels"));
  safetensors::TensorMap out{{"logits", logits.detach()}, {"loss", loss.detach()}};
  if (adapter) {
    loss.backward();
    for (auto& [path, l] : peft::lora_layers(*model)) {
      out["grad.base_model.model." + path + ".lora_A.weight"] = l->lora_A->weight.grad();
      out["grad.base_model.model." + path + ".lora_B.weight"] = l->lora_B->weight.grad();
    }
  }
  safetensors::save_file(out, out_path);
  return 0;
}

int hf_export(const std::string& model_dir, const std::string& out, int64_t shard_bytes, const std::string& targets) {
  auto model = nn::from_pretrained(model_dir);
  nn::save_pretrained(*model, out + "/model");
  nn::save_pretrained(*model, out + "/model_sharded", {.max_shard_bytes = shard_bytes});
  peft::LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules.clear();
  std::stringstream list(targets);
  for (std::string t; std::getline(list, t, ',');) lc.target_modules.push_back(t);
  lc.base_model_name_or_path = model_dir;
  Generator gen(3);
  peft::apply_lora(*model, lc, gen);
  for (auto& [path, l] : peft::lora_layers(*model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.1, gen);
  peft::save_adapter(*model, out + "/adapter", lc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hf-run" && (argc == 5 || argc == 6)) return hf_run(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : nullptr);
  if (mode == "hf-export" && argc == 6) return hf_export(argv[2], argv[3], std::stoll(argv[4]), argv[5]);
  if (mode == "qlora-train" && argc == 4) {
    const test::TinyQloraRun run = test::tiny_qlora_run(argv[2]);
    peft::save_adapter(*run.model, argv[3], test::tiny_qlora_lora("tests/fixtures/hf/llama"));
    std::printf("QLoRA loss %.4f -> %.4f; adapter in %s\n", run.losses.front(), run.losses.back(), argv[3]);
    return 0;
  }
  if (argc != 3 || (mode != "dump" && mode != "convert")) {
    std::fprintf(stderr,
                 "usage: interop_dump dump|convert <dir>\n"
                 "       interop_dump hf-run <model dir> <inputs> <out> [<adapter dir>]\n"
                 "       interop_dump hf-export <model dir> <out dir> <max shard bytes> <targets>\n"
                 "       interop_dump qlora-train <model dir> <adapter dir>\n");
    return 2;
  }
  std::string dir = argv[2];
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
  nn::save_state_dict(model, dir + "/llama.safetensors");
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
  nn::save_state_dict(gpt, dir + "/gpt2.safetensors");
  out["gpt2_logits"] = gpt.forward(ids).detach();
  out["gpt2_loss"] = gpt.loss(ids, labels).detach();
  safetensors::save_file(out, dir + "/io.safetensors");
  std::printf("dumped to %s\n", dir.c_str());
}
