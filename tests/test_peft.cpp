// LoRA: wrapping, freezing, pruned backward (KernelTrace), merge/unmerge, peft adapter files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/nn.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using nn::LlamaConfig;
using nn::LlamaForCausalLM;
using peft::LoraConfig;

LlamaConfig micro() {
  LlamaConfig c;
  c.vocab_size = 13;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 8;
  return c;
}

Tensor ids_2x6() { return from_vector<int64_t>({1, 5, 2, 12, 0, 7, 3, 3, 9, 4, 11, 6}, {2, 6}); }

// Makes every lora_B non-zero, as training would.
void randomise_lora_b(nn::Module& model, Generator& gen) {
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.1, gen);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class PeftTest : public testing::SeededTest {};

TEST_F(PeftTest, WrappedModelEqualsBaseAtStepZero) {
  LlamaForCausalLM model(micro(), gen);
  Tensor before = model.forward(ids_2x6());
  peft::apply_lora(model, {}, gen);
  EXPECT_TENSOR_EQ(model.forward(ids_2x6()), before);
  // and lora_A is not zero: the equality comes from B = 0
  auto& q = dynamic_cast<peft::LoRALinear&>(*(*model.model->layers)[0].self_attn->q_proj);
  EXPECT_GT(max(q.lora_A->weight).item(), 0.0);
  EXPECT_LE(max(q.lora_A->weight).item(), 1.0 / std::sqrt(16.0)) << "A ~ U(-1/sqrt(in), 1/sqrt(in))";
  EXPECT_EQ(max(q.lora_B->weight).item(), 0.0);
  EXPECT_EQ(q.scaling, 2.0);
}

TEST_F(PeftTest, TinyReportNamesAndPeftLine) {
  LlamaForCausalLM model(LlamaConfig::tiny(), gen);
  peft::LoraReport r = peft::apply_lora(model, {}, gen);
  ASSERT_EQ(r.wrapped.size(), 16u);
  EXPECT_EQ(r.wrapped[0], "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(r.wrapped[3], "model.layers.0.self_attn.o_proj");
  // By hand: 4 layers x 4 modules x (A [8, 128] + B [128, 8]) = 16 x 2048
  EXPECT_EQ(r.trainable_params, 32768);
  EXPECT_EQ(r.all_params, 857216 + 32768);
  EXPECT_EQ(peft::trainable_parameters_line(model),
            "trainable params: 32,768 || all params: 889,984 || trainable%: 3.6819");
  std::ostringstream os;
  peft::print_trainable_parameters(model, os);
  EXPECT_EQ(os.str(), "trainable params: 32,768 || all params: 889,984 || trainable%: 3.6819\n");

  std::vector<std::string> trainable;
  for (auto& [n, t] : model.named_trainable_parameters()) trainable.push_back(n);
  ASSERT_EQ(trainable.size(), 32u);
  EXPECT_EQ(trainable[0], "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(trainable[1], "model.layers.0.self_attn.q_proj.lora_B.weight");
  for (const auto& n : trainable) EXPECT_NE(n.find(".lora_"), std::string::npos) << n;
  auto sd = model.state_dict();
  EXPECT_TRUE(sd.count("model.layers.2.self_attn.v_proj.weight")) << "the base weight keeps its name";
  EXPECT_EQ(sd.at("model.layers.2.self_attn.v_proj.lora_B.weight").shape(), Shape({128, 8}));
  EXPECT_FALSE(model.get_parameter("model.norm.weight").requires_grad());
  EXPECT_FALSE(model.get_parameter("model.embed_tokens.weight").requires_grad());
  EXPECT_FALSE(model.get_parameter("lm_head.weight").requires_grad());
}

// After backward only A and B hold gradients, and the trace shows the pruned kernels: no dW GEMM
// for any frozen Linear, no embedding scatter, the dx-only norm backward.
TEST_F(PeftTest, BackwardTouchesOnlyAdaptersAndSkipsFrozenKernels) {
  LlamaForCausalLM model(micro(), gen);
  peft::LoraReport r = peft::apply_lora(model, {}, gen);
  randomise_lora_b(model, gen);
  KernelTrace trace;
  model.loss(ids_2x6(), ids_2x6()).backward();
  for (auto& [name, p] : model.named_parameters()) {
    const bool lora = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.grad().defined(), lora) << name;
  }
  // The adapter matrices' GEMMs and none for the 7 frozen base Linears per layer or the head:
  // o_proj is a lora_linear (one dA, one dB); q / k / v one linear_group (one dA product for the
  // three, a dB each); gate / up a plain linear_group.
  EXPECT_EQ(trace.count("linear_group"), 4u) << trace.str();  // 2 layers x (q/k/v, gate/up)
  EXPECT_EQ(trace.count("lora_linear.dA") + 3 * trace.count("linear_group.dA"), r.wrapped.size()) << trace.str();
  EXPECT_EQ(trace.count("lora_linear.dB") + trace.count("linear_group.dB"), r.wrapped.size()) << trace.str();
  EXPECT_FALSE(trace.contains("linear.dweight_gemm")) << trace.str();
  EXPECT_FALSE(trace.contains("lora_linear.dweight_gemm")) << trace.str();
  EXPECT_FALSE(trace.contains("linear_group.dweight_gemm")) << trace.str();
  EXPECT_TRUE(trace.contains("linear_cross_entropy.dx")) << trace.str();  // the frozen head: no dW
  EXPECT_FALSE(trace.contains("linear_cross_entropy.dx_dweight")) << trace.str();
  EXPECT_FALSE(trace.contains("embedding.dweight_scatter"));
  EXPECT_FALSE(trace.contains("rms_norm.dw_reduce")) << trace.str();
  EXPECT_FALSE(trace.contains("fused_add_rms_norm.dw_reduce")) << trace.str();
  // every norm with a gradient to pass is a fused_add_rms_norm (the residual adds in the norms)
  EXPECT_EQ(trace.count("fused_add_rms_norm.backward<dx>"), 4u) << trace.str();
  EXPECT_FALSE(trace.contains("fused_add_rms_norm.backward<dx,dw>")) << trace.str();
  EXPECT_FALSE(trace.contains("rms_norm.backward<dx,dw>")) << trace.str();

  // The same model fully trainable runs them all: the checks above can fail.
  model.zero_grad();
  model.requires_grad_(true);
  KernelTrace full;
  model.loss(ids_2x6(), ids_2x6()).backward();
  // every base weight: o_proj's in lora_linear, q / k / v / gate / up's in linear_group, down's
  EXPECT_EQ(full.count("lora_linear.dweight_gemm"), 2u);
  EXPECT_EQ(full.count("linear_group.dweight_gemm"), 2u * 5);
  EXPECT_EQ(full.count("linear.dweight_gemm"), 2u);
  EXPECT_TRUE(full.contains("linear_cross_entropy.dx_dweight"));  // the head, in the loss
  EXPECT_EQ(full.count("lora_linear.dB") + full.count("linear_group.dB"), r.wrapped.size());
  EXPECT_TRUE(full.contains("embedding.dweight_scatter"));
  EXPECT_TRUE(full.contains("rms_norm.backward<dx,dw>")) << full.str();
}

TEST_F(PeftTest, GradcheckLoRALinear) {
  nn::Linear base(6, 5, true, gen);
  peft::LoRALinear l(base, 3, 6.0, 0.0, gen);
  l.to(kFloat64);
  nn::init::normal_(l.lora_B->weight, 0.0, 0.5, gen);
  Tensor x = randn({2, 4, 6}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return l.forward(x); }, {x, l.lora_A->weight, l.lora_B->weight});
  EXPECT_FALSE(l.weight.requires_grad());
  EXPECT_TRUE(l.weight.same(base.weight)) << "the wrapper takes over the base tensors";
  // y = W x + b + (alpha / r) B A x
  NoGradGuard g;
  Tensor want = add(base.forward(x), mul(matmul(matmul(x, transpose(l.lora_A->weight, 0, 1)),
                                                transpose(l.lora_B->weight, 0, 1)),
                                         2.0));
  EXPECT_TENSOR_NEAR(l.forward(x), want, 1e-12, 1e-12);
}

TEST_F(PeftTest, MergeUnmergeAndMergeAndUnload) {
  LlamaForCausalLM model(micro(), gen);
  Tensor w0 = clone_data(model.get_parameter("model.layers.1.self_attn.k_proj.weight"));
  peft::apply_lora(model, {}, gen);
  randomise_lora_b(model, gen);
  Tensor ids = ids_2x6();
  Tensor unmerged = model.forward(ids);
  EXPECT_FALSE(unmerged.to_vector<float>() == LlamaForCausalLM(micro(), gen).forward(ids).to_vector<float>());
  peft::merge(model);
  Tensor k = model.get_parameter("model.layers.1.self_attn.k_proj.weight");
  EXPECT_FALSE(k.to_vector<float>() == w0.to_vector<float>()) << "merging changes the base weight";
  EXPECT_TENSOR_NEAR(model.forward(ids), unmerged, 1e-4, 1e-5);
  EXPECT_THROW(peft::merge(model), Error);
  peft::unmerge(model);
  EXPECT_TENSOR_NEAR(k, w0, 1e-5, 1e-6);
  EXPECT_TENSOR_NEAR(model.forward(ids), unmerged, 1e-5, 1e-6);
  EXPECT_THROW(peft::unmerge(model), Error);

  const int64_t base_count = LlamaConfig(micro()).num_parameters();
  peft::merge_and_unload(model);
  EXPECT_TRUE(peft::lora_layers(model).empty());
  EXPECT_EQ(model.num_parameters(), base_count);
  EXPECT_EQ(model.state_dict().count("model.layers.0.self_attn.q_proj.lora_A.weight"), 0u);
  EXPECT_EQ((*model.model->layers)[0].self_attn->q_proj->type_name(), "Linear");
  EXPECT_TENSOR_NEAR(model.forward(ids), unmerged, 1e-4, 1e-5);
}

TEST_F(PeftTest, ApplyLoraErrors) {
  LlamaForCausalLM model(micro(), gen);
  LoraConfig none;
  none.target_modules = {"nope_proj"};
  EXPECT_THROW(peft::apply_lora(model, none), Error);
  LoraConfig norm;
  norm.target_modules = {"input_layernorm"};
  try {
    peft::apply_lora(model, norm);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a RMSNorm; LoRA wraps Linear layers only"), std::string::npos) << e.what();
  }
  LoraConfig bad_save;
  bad_save.modules_to_save = {"no_head"};
  EXPECT_NE(error_text([&] { peft::apply_lora(model, bad_save); }).find("modules_to_save entry 'no_head'"),
            std::string::npos);
  EXPECT_THROW(peft::apply_lora(model, {.lora_dropout = 1.5}), Error);
  EXPECT_TRUE(model.get_parameter("model.norm.weight").requires_grad()) << "a failed apply changes nothing";
  EXPECT_TRUE(peft::lora_layers(model).empty());
  peft::apply_lora(model, {});
  EXPECT_THROW(peft::apply_lora(model, {}), Error) << "twice";
}

// Issue 47: peft's all-linear, a misspelt name beside good ones refused (peft drops it silently)
// with the model's Linear names, and the registry's defaults as peft's mapping has them.
TEST_F(PeftTest, AllLinearAndEveryTargetMustMatch) {
  LlamaForCausalLM model(micro(), gen);
  EXPECT_ERROR_HAS(peft::apply_lora(model, {.target_modules = {"q_proj", "v_prj"}}),
                   "target_modules entry 'v_prj' matches no module of LlamaForCausalLM",
                   "its Linear layers are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head",
                   "\"all-linear\"");
  EXPECT_TRUE(peft::lora_layers(model).empty()) << "a failed apply changes nothing";
  const peft::LoraReport r = peft::apply_lora(model, {.target_modules = {peft::kAllLinear}});
  EXPECT_EQ(r.wrapped.size(), 7u * 2);  // every Linear of both layers, not the head
  for (const std::string& path : r.wrapped) EXPECT_EQ(path.find("lm_head"), std::string::npos) << path;
  const TempDir dir;
  peft::save_adapter(model, dir / "a", {.target_modules = {peft::kAllLinear}});
  const json::Value cfg = json::parse(read_text(dir / "a/adapter_config.json"));
  EXPECT_EQ(cfg.at("target_modules").size(), 14u) << "peft writes the paths all-linear stands for";

  auto targets = [](const char* name) { return nn::find_architecture(name)->lora_targets; };
  const std::vector<std::string> q_v = {"q_proj", "v_proj"};
  for (const char* family : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text"})
    EXPECT_EQ(targets(family), q_v) << family;
  EXPECT_EQ(targets("gpt2"), std::vector<std::string>{"c_attn"});
  EXPECT_TRUE(targets("phi3").empty()) << "peft has no default for phi3";
  LlamaForCausalLM plain(micro(), gen);
  EXPECT_ERROR_HAS(peft::apply_lora(plain, {.target_modules = {}}), "target_modules is empty",
                   "peft has no default targets for llama", "q_proj, k_proj");
}

TEST_F(PeftTest, ModulesToSaveAndTrainableNorms) {
  LlamaForCausalLM model(micro(), gen);
  LoraConfig c;
  c.target_modules = {"q_proj", "v_proj"};
  c.modules_to_save = {"lm_head"};
  c.freeze_norms = false;
  peft::LoraReport r = peft::apply_lora(model, c, gen);
  EXPECT_EQ(r.wrapped.size(), 4u);
  EXPECT_TRUE(model.lm_head->weight.requires_grad());
  EXPECT_TRUE(model.get_parameter("model.layers.1.post_attention_layernorm.weight").requires_grad());
  EXPECT_FALSE(model.get_parameter("model.layers.1.mlp.up_proj.weight").requires_grad());
  EXPECT_FALSE(model.get_parameter("model.layers.1.self_attn.k_proj.weight").requires_grad());
  // q: A [8,16] + B [16,8]; v: A [8,16] + B [8,8]; per layer 256 + 192; head 13*16; 5 norms of 16
  EXPECT_EQ(r.trainable_params, 2 * (256 + 192) + 13 * 16 + 5 * 16);

  TempDir dir;
  peft::save_adapter(model, dir.str(), c);
  auto file = safetensors::load_file(dir / "adapter_model.safetensors");
  EXPECT_TRUE(file.count("base_model.model.lm_head.weight"));
  EXPECT_TRUE(file.count("base_model.model.model.norm.weight"));
  EXPECT_TRUE(file.count("base_model.model.model.layers.0.input_layernorm.weight"));
  EXPECT_EQ(file.size(), 8u + 1 + 5);
  std::ifstream cfg(dir / "adapter_config.json");
  std::string text((std::istreambuf_iterator<char>(cfg)), {});
  json::Value v = json::parse(text);
  std::vector<std::string> saved;
  for (const auto& s : v.at("modules_to_save").as_array()) saved.push_back(s.as_string());
  EXPECT_EQ(saved, (std::vector<std::string>{"lm_head", "input_layernorm", "post_attention_layernorm", "norm"}));

  LlamaForCausalLM fresh(micro(), gen);
  fresh.load_state_dict(model.state_dict(), /*strict=*/false);  // the base weights
  nn::init::normal_(fresh.lm_head->weight, 0.0, 1.0, gen);    // then scramble what the adapter carries
  nn::init::normal_(fresh.model->norm->weight, 0.0, 1.0, gen);
  peft::load_adapter(fresh, dir.str(), gen);
  EXPECT_TENSOR_EQ(fresh.forward(ids_2x6()), model.forward(ids_2x6()));
  EXPECT_TRUE(fresh.lm_head->weight.requires_grad());
}

TEST_F(PeftTest, SaveAndLoadAdapterInPeftFormat) {
  LlamaForCausalLM model(micro(), gen);
  LlamaForCausalLM base_copy(micro(), gen);
  base_copy.load_state_dict(model.state_dict());
  LoraConfig c;
  c.r = 4;
  c.lora_alpha = 8;
  peft::apply_lora(model, c, gen);
  randomise_lora_b(model, gen);
  TempDir dir;
  peft::save_adapter(model, dir.str(), c);

  auto file = safetensors::load_file_with_metadata(dir / "adapter_model.safetensors");
  EXPECT_EQ(file.tensors.size(), 2u * 4 * 2);
  EXPECT_EQ(file.tensors.at("base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight").shape(), Shape({4, 16}));
  EXPECT_EQ(file.tensors.at("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight").shape(), Shape({8, 4}));
  EXPECT_EQ(file.metadata.at("format"), "pt");

  std::ifstream in(dir / "adapter_config.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  json::Value v = json::parse(text);
  EXPECT_EQ(v.at("peft_type").as_string(), "LORA");
  EXPECT_EQ(v.at("r").as_int(), 4);
  EXPECT_EQ(v.at("lora_alpha").as_int(), 8);
  EXPECT_EQ(v.at("lora_dropout").as_double(), 0.0);
  EXPECT_EQ(v.at("bias").as_string(), "none");
  EXPECT_EQ(v.at("task_type").as_string(), "CAUSAL_LM");
  EXPECT_FALSE(v.at("fan_in_fan_out").as_bool());
  EXPECT_TRUE(v.at("base_model_name_or_path").is_null());
  EXPECT_TRUE(v.at("modules_to_save").is_null());
  EXPECT_EQ(v.at("target_modules").size(), 4u);
  EXPECT_EQ(v.keys().front(), "alpha_pattern") << "sorted keys, as peft writes them";
  EXPECT_NE(text.find("\n  \"r\": 4,\n"), std::string::npos) << "indent 2";

  // Into a fresh copy of the base model: wrapped from the saved config, same outputs.
  LoraConfig got = peft::load_adapter(base_copy, dir.str(), gen);
  EXPECT_EQ(got.r, 4);
  EXPECT_EQ(got.lora_alpha, 8.0);
  EXPECT_EQ(peft::lora_layers(base_copy).size(), 8u);
  EXPECT_TENSOR_EQ(base_copy.forward(ids_2x6()), model.forward(ids_2x6()));

  // Into a model wrapped with another rank: refused before any weight is read into it.
  LlamaForCausalLM other(micro(), gen);
  peft::apply_lora(other, {}, gen);  // r = 8
  EXPECT_ERROR_HAS(peft::load_adapter(other, dir.str(), gen), "has r 4 lora_alpha 8",
                   "is wrapped with r 8 lora_alpha 16");
  // A file missing a tensor.
  auto tensors = file.tensors;
  tensors.erase("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_C.weight"] = zeros({1});
  safetensors::save_file(tensors, dir / "adapter_model.safetensors");
  LlamaForCausalLM third(micro(), gen);
  try {
    peft::load_adapter(third, dir.str(), gen);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("missing keys (1): base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"),
              std::string::npos) << m;
    EXPECT_NE(m.find("unexpected keys (1)"), std::string::npos) << m;
  }
  EXPECT_THROW(peft::parse_adapter_config(R"({"peft_type": "IA3", "r": 8})"), Error);
  EXPECT_THROW(peft::parse_adapter_config(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
      "target_modules": ["q_proj"], "use_dora": true})"), Error);
}

// A few LoRA steps with AdamW: the loss falls, the base weights do not move.
TEST_F(PeftTest, FineTuneMovesOnlyAdapters) {
  LlamaForCausalLM model(micro(), gen);
  peft::apply_lora(model, {.r = 4, .lora_alpha = 8}, gen);
  std::map<std::string, std::vector<float>> frozen;
  for (auto& [n, p] : model.named_parameters())
    if (!p.requires_grad()) frozen[n] = p.to_vector<float>();
  optim::AdamW opt(model.named_trainable_parameters(), {.lr = 2e-2});
  Tensor ids = ids_2x6();
  const double first = model.loss(ids, ids).item();
  for (int i = 0; i < 25; ++i) {
    opt.zero_grad();
    model.loss(ids, ids).backward();
    opt.step();
  }
  // The frozen N(0, 0.02) head bounds how far the logits can move (uniform is log 13 = 2.56).
  EXPECT_LT(model.loss(ids, ids).item(), first - 0.1);
  for (auto& [n, p] : model.named_parameters())
    if (frozen.count(n)) EXPECT_EQ(p.to_vector<float>(), frozen[n]) << n;
}

TEST_F(PeftTest, Gpt2FusedAttentionAndDropout) {
  nn::GPT2Config c = nn::GPT2Config::tiny();
  c.n_embd = 16;
  c.n_head = 2;
  c.n_layer = 1;
  nn::GPT2LMHeadModel model(c, gen);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4}, {1, 4});
  Tensor before = model.forward(ids);
  peft::apply_lora(model, {.lora_dropout = 0.5, .target_modules = {"c_attn"}}, gen);
  auto layers = peft::lora_layers(model);
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].first, "transformer.h.0.attn.c_attn");
  EXPECT_EQ(layers[0].second->lora_B->weight.shape(), Shape({48, 8}));
  randomise_lora_b(model, gen);
  model.eval();  // no dropout: deterministic
  Tensor e1 = model.forward(ids), e2 = model.forward(ids);
  EXPECT_TENSOR_EQ(e1, e2);
  model.train();  // dropout on the LoRA path only
  Tensor t1 = model.forward(ids);
  EXPECT_FALSE(t1.to_vector<float>() == e1.to_vector<float>());
  EXPECT_FALSE(e1.to_vector<float>() == before.to_vector<float>());
}

// The same LoRA fine-tuning steps on the GPU and on the CPU: same losses, gradients, updates,
// pruned kernels, and an adapter saved from the GPU loads on the CPU.
TEST_F(PeftTest, LoraTrainingStepCudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  LlamaForCausalLM cpu(micro(), gen), gpu(micro(), gen);
  gpu.load_state_dict(cpu.state_dict());
  Generator g1(7), g2(7);
  peft::apply_lora(cpu, {}, g1);
  peft::apply_lora(gpu, {}, g2);
  randomise_lora_b(cpu, g1);
  randomise_lora_b(gpu, g2);
  gpu.to(Device::cuda());
  for (auto& [n, p] : gpu.named_parameters()) EXPECT_TRUE(p.device().is_cuda()) << n;
  optim::AdamW oc(cpu.named_trainable_parameters(), {.lr = 1e-2}), og(gpu.named_trainable_parameters(), {.lr = 1e-2});
  Tensor ids = ids_2x6(), idg = to(ids, Device::cuda());
  for (int step = 0; step < 2; ++step) {
    oc.zero_grad();
    og.zero_grad();
    Tensor lc = cpu.loss(ids, ids);
    lc.backward();
    Tensor lg = gpu.loss(idg, idg);
    KernelTrace trace;
    lg.backward();
    // o_proj a lora_linear, q / k / v one linear_group (one dA product for the three) a layer
    EXPECT_EQ(trace.count("lora_linear.dA") + 3 * trace.count("linear_group.dA"), 8u) << trace.str();
    EXPECT_EQ(trace.count("lora_linear.dB") + trace.count("linear_group.dB"), 8u) << trace.str();
    EXPECT_FALSE(trace.contains("linear.dweight_gemm") || trace.contains("linear_group.dweight_gemm")) << trace.str();
    EXPECT_FALSE(trace.contains("embedding.dweight_scatter"));
    EXPECT_NEAR(lg.item(), lc.item(), 1e-5);
    Tensor nc = optim::clip_grad_norm_(cpu.trainable_parameters(), 0.5);
    Tensor ng = optim::clip_grad_norm_(gpu.trainable_parameters(), 0.5);
    EXPECT_TRUE(ng.device().is_cuda());
    EXPECT_NEAR(ng.item(), nc.item(), 1e-5 * nc.item());
    for (auto& [n, p] : cpu.named_trainable_parameters()) {
      SCOPED_TRACE(n);
      EXPECT_TENSOR_NEAR(to(gpu.get_parameter(n).grad(), Device::cpu()), p.grad(), 1e-4, 1e-6);
    }
    oc.step();
    og.step();
  }
  for (auto& [n, p] : cpu.named_trainable_parameters()) {
    SCOPED_TRACE(n);
    EXPECT_TENSOR_NEAR(to(gpu.get_parameter(n), Device::cpu()), p, 1e-4, 1e-6);
  }
  TempDir dir;
  peft::save_adapter(gpu, dir.str(), {});
  LlamaForCausalLM back(micro(), gen);
  back.load_state_dict(cpu.state_dict(), /*strict=*/false);
  peft::load_adapter(back, dir.str());
  EXPECT_TENSOR_NEAR(back.forward(ids), cpu.forward(ids), 1e-4, 1e-5);
  peft::merge(gpu);
  EXPECT_TENSOR_NEAR(to(gpu.forward(idg), Device::cpu()), cpu.forward(ids), 1e-4, 1e-5);
}

}  // namespace
}  // namespace tg::test
