// Hugging Face folders: from_pretrained / save_pretrained round trips (single file, shards, BF16,
// F16, tied heads, GPT-2's Conv1D layout), clear errors, GPT-2 adapters in peft's format, and the
// fixtures written by transformers + peft (tests/interop/check_hf_roundtrip.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/pretrained.h"
#include "nn/nn.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/rms_norm.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/cached_forward_check.h"
#include "tests/test_models.h"
#include "tests/test_moe_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using nn::GPT2Config;
using nn::GPT2LMHeadModel;
using nn::LlamaConfig;
using nn::LlamaForCausalLM;

const fs::path kFixtures = fs::path(TG_TESTS_DIR) / "fixtures" / "hf";

Tensor ids() { return from_vector<int64_t>({1, 5, 2, 63, 0, 7, 3, 3, 9, 4, 11, 6, 40, 41, 2, 8}, {2, 8}); }

json::Value read_json(const std::string& path) {
  std::vector<uint8_t> b = io::read_file(path);
  return json::parse(std::string(b.begin(), b.end()));
}

// Sets `key` of <dir>/config.json to `value`.
void edit_config(const std::string& dir, const std::string& key, json::Value value) {
  json::Value v = read_json(dir + "/config.json");
  v.set(key, std::move(value));
  io::write_file_atomic(dir + "/config.json", json::dump(v, 2));
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float x : to(t, kFloat32).to_vector<float>()) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

// The F16 bits of x, which must be exact in half precision (zero or normal).
uint16_t half_bits(float x) {
  const auto b = std::bit_cast<uint32_t>(x);
  if ((b & 0x7fffffffu) == 0) return static_cast<uint16_t>(b >> 16);
  const int exp = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  EXPECT_TRUE(exp > 0 && exp < 31 && (b & 0x1fffu) == 0) << x << " is not exact in float16";
  return static_cast<uint16_t>(((b >> 16) & 0x8000u) | (static_cast<uint32_t>(exp) << 10) | ((b >> 13) & 0x3ffu));
}

// A safetensors file of F16 tensors, as transformers writes a float16 model (tapegrad has no
// float16 tensors, so its writer cannot).
void save_f16(const safetensors::TensorMap& tensors, const std::string& path) {
  json::Value header = json::Value::object().set("__metadata__", json::Value::object().set("format", "pt"));
  std::string data;
  for (const auto& [name, t] : tensors) {
    json::Value shape = json::Value::array();
    for (int64_t s : t.shape()) shape.push_back(s);
    const auto begin = static_cast<int64_t>(data.size());
    for (float x : to(t, kFloat32).to_vector<float>()) {
      const uint16_t h = half_bits(x);
      data += static_cast<char>(h & 0xff);
      data += static_cast<char>(h >> 8);
    }
    header.set(name, json::Value::object()
                         .set("dtype", "F16")
                         .set("shape", shape)
                         .set("data_offsets", json::Value::array({begin, static_cast<int64_t>(data.size())})));
  }
  const std::string h = json::dump(header);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * i));
  io::write_file_atomic(path, file + h + data);
}

// Rounds every parameter to a multiple of 1/1024 (exact in float16).
void round_to_f16_grid(nn::Module& m) {
  NoGradGuard g;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> v = p.to_vector<float>();
    for (float& x : v) x = std::round(x * 1024.0f) / 1024.0f;
    copy_(p, from_vector(v, p.shape()));
  }
}

class HfTest : public testing::SeededTest {};

TEST_F(HfTest, LlamaSavesAndLoadsLikeTransformers) {
  LlamaForCausalLM model(llama_config(), gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  json::Value cfg = read_json(dir / "m/config.json");
  EXPECT_EQ(cfg.at("architectures").as_array()[0].as_string(), "LlamaForCausalLM");
  EXPECT_EQ(cfg.at("model_type").as_string(), "llama");
  EXPECT_EQ(cfg.at("num_key_value_heads").as_int(), 2);
  EXPECT_EQ(cfg.at("rope_theta").as_double(), 500.0);
  EXPECT_EQ(cfg.at("rope_parameters").at("rope_type").as_string(), "default");
  EXPECT_EQ(cfg.at("rms_norm_eps").as_double(), 1e-6);
  EXPECT_FALSE(cfg.at("tie_word_embeddings").as_bool());
  EXPECT_EQ(cfg.at("dtype").as_string(), "float32");
  auto file = safetensors::load_file_with_metadata(dir / "m/model.safetensors");
  EXPECT_EQ(file.metadata.at("format"), "pt") << "transformers refuses files without it";
  EXPECT_EQ(file.tensors.size(), model.state_dict().size());
  EXPECT_EQ(file.tensors.at("model.layers.1.self_attn.k_proj.weight").shape(), Shape({16, 32}));

  auto back = nn::from_pretrained_llama(dir / "m");
  EXPECT_FALSE(back->is_training());
  EXPECT_EQ(back->config.rope_theta, 500.0);
  EXPECT_EQ(back->config.kv_heads(), 2);
  EXPECT_TENSOR_EQ(back->forward(ids()), model.forward(ids()));
  auto any = std::dynamic_pointer_cast<LlamaForCausalLM>(nn::from_pretrained(dir / "m"));
  ASSERT_TRUE(any);
  EXPECT_TENSOR_EQ(any->forward(ids()), model.forward(ids()));
}

TEST_F(HfTest, TiedLlamaWritesTheEmbeddingOnce) {
  LlamaConfig c = llama_config();
  c.tie_word_embeddings = true;
  LlamaForCausalLM model(c, gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  auto file = safetensors::load_file(dir / "m/model.safetensors");
  EXPECT_FALSE(file.count("lm_head.weight"));
  EXPECT_TRUE(file.count("model.embed_tokens.weight"));
  EXPECT_TRUE(read_json(dir / "m/config.json").at("tie_word_embeddings").as_bool());
  auto back = nn::from_pretrained_llama(dir / "m");
  EXPECT_TRUE(back->lm_head->weight.same(back->model->embed_tokens->weight));
  EXPECT_TENSOR_EQ(back->forward(ids()), model.forward(ids()));
}

TEST_F(HfTest, GPT2StoresConv1DWeightsTransposed) {
  GPT2LMHeadModel model(gpt2_config(), gen);
  model.eval();
  TempDir dir;
  nn::save_pretrained(model, dir / "g");
  auto file = safetensors::load_file(dir / "g/model.safetensors");
  EXPECT_FALSE(file.count("lm_head.weight")) << "tied to wte: one copy, as transformers writes it";
  EXPECT_EQ(file.at("transformer.h.0.attn.c_attn.weight").shape(), Shape({32, 96}));
  EXPECT_EQ(file.at("transformer.h.1.mlp.c_fc.weight").shape(), Shape({32, 128}));
  EXPECT_EQ(file.at("transformer.h.1.mlp.c_proj.weight").shape(), Shape({128, 32}));
  EXPECT_TENSOR_EQ(file.at("transformer.h.0.attn.c_proj.weight"),
                   contiguous(transpose(model.transformer->h->operator[](0).attn->c_proj->weight.detach(), 0, 1)));
  EXPECT_EQ(read_json(dir / "g/config.json").at("activation_function").as_string(), "gelu_new");

  auto back = nn::from_pretrained_gpt2(dir / "g");
  EXPECT_FALSE(back->is_training()) << "dropout off, as transformers' from_pretrained";
  EXPECT_EQ(back->config.resid_pdrop, 0.1);
  EXPECT_TRUE(back->lm_head->weight.same(back->transformer->wte->weight));
  EXPECT_TENSOR_EQ(back->forward(ids()), model.forward(ids()));
  EXPECT_TRUE(nn::is_hf_conv1d(model, "transformer.h.1.attn.c_attn"));
  EXPECT_FALSE(nn::is_hf_conv1d(model, "lm_head"));
  EXPECT_FALSE(nn::is_hf_conv1d(LlamaForCausalLM(llama_config(), gen), "model.layers.0.self_attn.q_proj"));
}

// Issue 39: a model loaded from a folder trained with its config's own dropout crashed (the
// dropout layers kept a pointer to from_pretrained's local generator).
TEST_F(HfTest, FolderModelsTrainWithTheirConfigsDropoutAndLora) {
  TempDir dir;
  GPT2LMHeadModel gpt2(gpt2_config(), gen);  // attn, resid and embd dropout 0.1
  nn::save_pretrained(gpt2, dir / "g");
  LlamaForCausalLM llama(llama_config(), gen);
  nn::save_pretrained(llama, dir / "l");
  for (const auto& [name, target] : {std::pair{"g", "c_attn"}, std::pair{"l", "q_proj"}}) {
    SCOPED_TRACE(name);
    std::shared_ptr<nn::Module> model = nn::from_pretrained(dir / name);
    peft::LoraConfig lora;
    lora.target_modules = {target};
    peft::apply_lora(*model, lora);
    model->train();
    Tensor loss = name == std::string("g") ? dynamic_cast<GPT2LMHeadModel&>(*model).loss(ids(), ids())
                                           : dynamic_cast<LlamaForCausalLM&>(*model).loss(ids(), ids());
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item()));
    for (auto& [path, l] : peft::lora_layers(*model)) EXPECT_TRUE(l->lora_B->weight.grad().defined()) << path;
  }
}

// GPT-2 on the Hub was saved from GPT2Model: no "transformer." prefix, and causal-mask buffers.
TEST_F(HfTest, GPT2LoadsBaseModelCheckpointsWithMaskBuffers) {
  GPT2LMHeadModel model(gpt2_config(), gen);
  model.eval();
  TempDir dir;
  nn::save_pretrained(model, dir / "g");
  safetensors::TensorMap hub;
  for (auto& [k, t] : safetensors::load_file(dir / "g/model.safetensors")) hub[k.substr(std::string("transformer.").size())] = t;
  hub["h.0.attn.bias"] = ones({1, 1, 16, 16});
  hub["h.1.attn.masked_bias"] = full(Shape{}, -1e4);
  safetensors::save_file(hub, dir / "g/model.safetensors", {{"format", "pt"}});
  EXPECT_TENSOR_EQ(nn::from_pretrained_gpt2(dir / "g")->forward(ids()), model.forward(ids()));
}

TEST_F(HfTest, ShardedSaveAndLoad) {
  LlamaForCausalLM model(llama_config(), gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");  // then sharded into the same folder: the single file goes
  nn::save_pretrained(model, dir / "m", {.max_shard_bytes = 20000});
  EXPECT_FALSE(fs::exists(dir / "m/model.safetensors"));
  json::Value index = read_json(dir / "m/model.safetensors.index.json");
  std::set<std::string> shards;
  for (const auto& f : index.at("weight_map").values()) shards.insert(f.as_string());
  EXPECT_GE(shards.size(), 3u);
  EXPECT_TRUE(shards.count("model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors"));
  EXPECT_EQ(index.at("weight_map").size(), model.state_dict().size());
  int64_t total = 0;
  for (auto& [k, t] : model.state_dict()) total += static_cast<int64_t>(t.nbytes());
  EXPECT_EQ(index.at("metadata").at("total_size").as_int(), total);
  for (const auto& s : shards) EXPECT_TRUE(fs::exists(dir / ("m/" + s))) << s;
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(dir / "m")->forward(ids()), model.forward(ids()));

  nn::save_pretrained(model, dir / "m");  // back to one file: shards and index go
  EXPECT_TRUE(fs::exists(dir / "m/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "m/model.safetensors.index.json"));
  for (const auto& s : shards) EXPECT_FALSE(fs::exists(dir / ("m/" + s))) << s;
}

TEST_F(HfTest, BFloat16WeightsLoadIntoAnyDtype) {
  GPT2LMHeadModel model(gpt2_config(), gen);
  model.eval();
  model.to(kBFloat16);
  TempDir dir;
  nn::save_pretrained(model, dir / "g");
  EXPECT_EQ(read_json(dir / "g/config.json").at("dtype").as_string(), "bfloat16");
  EXPECT_EQ(safetensors::load_file(dir / "g/model.safetensors").at("transformer.wte.weight").dtype(), kBFloat16);
  auto f32 = nn::from_pretrained_gpt2(dir / "g", {.dtype = kFloat32});
  EXPECT_EQ(f32->transformer->h->operator[](0).attn->c_attn->weight.dtype(), kFloat32);
  EXPECT_EQ(nn::from_pretrained_gpt2(dir / "g")->transformer->h->operator[](0).attn->c_attn->weight.dtype(), kBFloat16)
      << "no dtype asked: the folder's own (transformers 5's \"auto\")";
  auto bf16 = nn::from_pretrained_gpt2(dir / "g", {.dtype = kBFloat16});
  EXPECT_EQ(bf16->transformer->h->operator[](0).attn->c_attn->weight.dtype(), kBFloat16);
  model.to(kFloat32);  // the bfloat16 values, exactly
  EXPECT_TENSOR_EQ(f32->forward(ids()), model.forward(ids()));
}

TEST_F(HfTest, Float16WeightsLoad) {
  LlamaForCausalLM model(llama_config(), gen);
  round_to_f16_grid(model);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  nn::StateDict sd = model.state_dict();
  save_f16(safetensors::TensorMap(sd.begin(), sd.end()), dir / "m/model.safetensors");
  EXPECT_EQ(safetensors::load_file(dir / "m/model.safetensors").size(), sd.size());
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(dir / "m")->forward(ids()), model.forward(ids()));
}

TEST_F(HfTest, ConfigErrorsNameTheField) {
  TempDir dir;
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "nothing"), "no config.json in", "nothing");
  LlamaForCausalLM model(llama_config(), gen);
  nn::save_pretrained(model, dir / "m");
  const std::string m = dir / "m";
  auto with = [&](const std::string& key, json::Value v) {
    nn::save_pretrained(model, m);
    edit_config(m, key, std::move(v));
  };
  with("architectures", json::Value::array({"FalconForCausalLM"}));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "config.json", "architectures", "FalconForCausalLM", "not supported");
  with("architectures", json::Value::array({"MistralForCausalLM"}));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "model_type = \"llama\"", "MistralForCausalLM wants model_type \"mistral\"");
  with("model_type", "mistral");
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "model_type", "\"mistral\"");
  with("rope_scaling", json::Value::object().set("rope_type", "proportional").set("factor", 2.0));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "rope_scaling", "proportional", "not implemented",
                   "default, linear, dynamic, llama3, yarn, longrope");
  with("rope_scaling", json::Value::object().set("rope_type", "yarn").set("factor", 0.5));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "rope_scaling.factor is 0.5, wants a finite number >= 1");
  with("rope_scaling", json::Value());
  with("rope_parameters", json::Value::object().set("rope_type", "longrope").set("rope_theta", 5e5));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "rope_parameters.short_factor is missing, wants a list of positive numbers");
  with("rope_parameters", json::Value::object()
                              .set("rope_type", "yarn")
                              .set("factor", 2.0)
                              .set("truncate", "yes"));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "rope_parameters.truncate is \"yes\", wants true or false");
  with("rope_parameters", json::Value::object().set("rope_type", "default").set("partial_rotary_factor", 0.5));
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "partial_rotary_factor = 0.5 is not supported", "rotates whole heads");
  // Options the config may turn on, but this folder's weights lack: the tensors are named.
  with("attention_bias", true);
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "missing (8)", "model.layers.0.self_attn.q_proj.bias");
  with("mlp_bias", true);
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "missing (6)", "model.layers.0.mlp.down_proj.bias");
  with("hidden_act", "gelu");
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "hidden_act = \"gelu\"", "silu");
  with("head_dim", 16);
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "self_attn.q_proj.weight (file [32, 32], config.json wants [64, 32])");
  with("num_attention_heads", "four");
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "num_attention_heads is \"four\", wants an integer");
  with("num_key_value_heads", 3);
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(m), "config.json", "num_key_value_heads 3 must divide");

  // transformers 5 writes RoPE as rope_parameters, older versions rope_theta: both are read.
  with("rope_theta", json::Value());
  edit_config(m, "rope_parameters", json::Value::object().set("rope_type", "default").set("rope_theta", 500.0));
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(m)->forward(ids()), model.forward(ids()));
  with("rope_parameters", json::Value());
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(m)->forward(ids()), model.forward(ids()));

  GPT2LMHeadModel gpt(gpt2_config(), gen);
  nn::save_pretrained(gpt, dir / "g");
  EXPECT_ERROR_HAS(nn::from_pretrained_llama(dir / "g"), "from_pretrained_llama", "describes a GPT2LMHeadModel");
  edit_config(dir / "g", "activation_function", "relu");
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "g"), "activation_function = \"relu\"", "gelu_new");
  edit_config(dir / "g", "activation_function", "gelu_pytorch_tanh");
  edit_config(dir / "g", "tie_word_embeddings", false);
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "g"), "tie_word_embeddings = false");
  edit_config(dir / "g", "tie_word_embeddings", true);
  edit_config(dir / "g", "scale_attn_by_inverse_layer_idx", true);
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "g"), "scale_attn_by_inverse_layer_idx = true");
}

TEST_F(HfTest, WeightErrorsListEveryProblem) {
  LlamaForCausalLM model(llama_config(), gen);
  TempDir dir;
  const std::string m = dir / "m";
  nn::save_pretrained(model, m);
  edit_config(m, "num_key_value_heads", 4);  // k/v_proj now want [32, 32]
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "do not fit the LlamaForCausalLM", "wrong shape (4)",
                   "model.layers.0.self_attn.k_proj.weight (file [16, 32], config.json wants [32, 32])");

  nn::save_pretrained(model, m);
  auto file = safetensors::load_file(m + "/model.safetensors");
  file.erase("model.norm.weight");
  file["model.layers.0.extra.weight"] = zeros({2});
  safetensors::save_file(file, m + "/model.safetensors", {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "missing (1): model.norm.weight", "unexpected (1): model.layers.0.extra.weight");

  fs::remove(m + "/model.safetensors");
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "has neither model.safetensors nor model.safetensors.index.json");

  nn::save_pretrained(model, m, {.max_shard_bytes = 20000});
  const std::string shard = read_json(m + "/model.safetensors.index.json").at("weight_map").at("model.norm.weight").as_string();
  fs::remove(m + "/" + shard);
  const std::string in_shard = "in '" + shard + "'";
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "model.safetensors.index.json' puts", in_shard.c_str(), "does not exist");

  // A tensor that two shards hold: before (issue 39), the later shard's value loaded silently.
  nn::save_pretrained(model, m, {.max_shard_bytes = 20000});
  const json::Value map = read_json(m + "/model.safetensors.index.json").at("weight_map");
  const std::string norm_shard = map.at("model.norm.weight").as_string();
  std::string other;
  for (const auto& f : map.values())
    if (f.as_string() != norm_shard) other = f.as_string();
  safetensors::TensorMap held = safetensors::load_file(m + "/" + other);
  held["model.norm.weight"] = full({llama_config().hidden_size}, 7.0f);
  safetensors::save_file(held, m + "/" + other, {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(m), "holds 'model.norm.weight', which an earlier file of", "held too");
}

TEST_F(HfTest, SavePretrainedRefusesWhatTransformersCannotLoad) {
  LlamaForCausalLM model(llama_config(), gen);
  peft::apply_lora(model, {}, gen);
  TempDir dir;
  EXPECT_ERROR_HAS(nn::save_pretrained(model, dir / "m"), "save_pretrained", "is a LoRA weight", "merge_and_unload");
  peft::merge_and_unload(model);
  nn::save_pretrained(model, dir / "m");
  EXPECT_TENSOR_EQ(nn::from_pretrained_llama(dir / "m")->forward(ids()), model.forward(ids()));
  nn::Linear lin(4, 3);
  EXPECT_ERROR_HAS(nn::save_pretrained(lin, dir / "l"), "save_pretrained: Linear has no transformers counterpart");
}

// peft marks LoRA on Conv1D layers fan_in_fan_out; A and B keep Linear's [r, in] / [out, r].
TEST_F(HfTest, GPT2AdapterInPeftFormat) {
  GPT2LMHeadModel model(gpt2_config(), gen);
  model.eval();
  TempDir dir;
  nn::save_pretrained(model, dir / "g");
  peft::LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"c_attn", "c_proj", "c_fc"};
  lc.base_model_name_or_path = "gpt2-tiny";
  peft::apply_lora(model, lc, gen);
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.1, gen);
  peft::save_adapter(model, dir / "a", lc);
  json::Value cfg = read_json(dir / "a/adapter_config.json");
  EXPECT_TRUE(cfg.at("fan_in_fan_out").as_bool());
  EXPECT_EQ(cfg.at("base_model_name_or_path").as_string(), "gpt2-tiny");
  auto file = safetensors::load_file(dir / "a/adapter_model.safetensors");
  EXPECT_EQ(file.size(), 2u * 2 * 4);  // 2 layers x (c_attn, attn.c_proj, c_fc, mlp.c_proj) x (A, B)
  EXPECT_EQ(file.at("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight").shape(), Shape({4, 32}));
  EXPECT_EQ(file.at("base_model.model.transformer.h.0.attn.c_attn.lora_B.weight").shape(), Shape({96, 4}));
  EXPECT_EQ(file.at("base_model.model.transformer.h.1.mlp.c_proj.lora_A.weight").shape(), Shape({4, 128}));

  auto fresh = nn::from_pretrained_gpt2(dir / "g");
  EXPECT_ERROR_HAS(peft::load_adapter(*nn::from_pretrained_gpt2(dir / "g"), dir / "a"), "the adapter was trained on 'gpt2-tiny'");
  peft::LoraConfig got = peft::load_adapter(*fresh, dir / "a", default_generator(), {.ignore_base_mismatch = true});
  EXPECT_EQ(got.r, 4);
  EXPECT_TENSOR_EQ(fresh->forward(ids()), model.forward(ids()));
}

// adapter_config.json as peft 0.2x writes it: fields tapegrad does not use are accepted as long
// as they do not change the computation.
TEST_F(HfTest, PeftWrittenAdapterConfig) {
  json::Value v = json::Value::object()
                      .set("alpha_pattern", json::Value::object())
                      .set("base_model_name_or_path", "tiny")
                      .set("bias", "none")
                      .set("fan_in_fan_out", true)
                      .set("init_lora_weights", false)
                      .set("layers_to_transform", json::Value())
                      .set("lora_alpha", 8)
                      .set("lora_bias", false)
                      .set("lora_dropout", 0.0)
                      .set("modules_to_save", json::Value())
                      .set("peft_type", "LORA")
                      .set("peft_version", "0.21.0")
                      .set("r", 4)
                      .set("rank_pattern", json::Value::object())
                      .set("target_modules", json::Value::array({"c_fc", "c_attn"}))
                      .set("target_parameters", json::Value())
                      .set("task_type", "CAUSAL_LM")
                      .set("trainable_token_indices", json::Value())
                      .set("use_dora", false)
                      .set("use_rslora", false);
  peft::LoraConfig c = peft::parse_adapter_config(json::dump(v));
  EXPECT_EQ(c.r, 4);
  EXPECT_EQ(c.lora_alpha, 8.0);
  EXPECT_EQ(c.target_modules, (std::vector<std::string>{"c_fc", "c_attn"}));
  json::Value bad = v;
  bad.set("alpha_pattern", json::Value::object().set("c_fc", 32));
  EXPECT_ERROR_HAS(peft::parse_adapter_config(json::dump(bad)), "alpha_pattern", "not supported");
  bad = v;
  bad.set("layers_to_transform", json::Value::array({0}));
  EXPECT_ERROR_HAS(peft::parse_adapter_config(json::dump(bad)), "layers_to_transform");
  bad = v;
  bad.set("lora_bias", true);
  EXPECT_ERROR_HAS(peft::parse_adapter_config(json::dump(bad)), "lora_bias");
}

// The numbers transformers + peft computed for the committed fixtures (written by
// tests/interop/check_hf_roundtrip.py on a machine with them).
// Every family's fixture (tests/fixtures/hf/make_family_fixtures.py and check_hf_roundtrip.py):
// its options as its real checkpoints use them.
// The fixture `name` on `device`: logits, loss (also through the family's own loss()), LoRA logits,
// loss and every LoRA gradient as transformers + peft computed them in float32.
void expect_fixture_matches(const std::string& name, Device device) {
  SCOPED_TRACE(name);
  safetensors::TensorMap want = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string());
  auto model = nn::from_pretrained((kFixtures / name).string(), {.device = device});
  const Tensor ids = to(want.at("ids"), device), labels = to(want.at("labels"), device);
  auto cpu = [](const Tensor& t) { return to(t, Device::cpu()); };
  Tensor logits = model->forward(ids);
  EXPECT_TENSOR_NEAR(cpu(logits), want.at("logits"), 1e-5, 1e-5 * max_abs(want.at("logits")));
  EXPECT_TENSOR_NEAR(cpu(nn::causal_lm_loss(logits, labels)), want.at("loss"), 1e-5, 0.0);
  EXPECT_TENSOR_NEAR(cpu(model->loss(ids, labels)), want.at("loss"), 1e-5, 0.0);  // the family's own loss path

  peft::load_adapter(*model, (kFixtures / (name + "_adapter")).string());
  Tensor lora_logits = model->forward(ids);
  EXPECT_TENSOR_NEAR(cpu(lora_logits), want.at("lora_logits"), 1e-5, 1e-5 * max_abs(want.at("lora_logits")));
  Tensor loss = nn::causal_lm_loss(lora_logits, labels);
  EXPECT_TENSOR_NEAR(cpu(loss), want.at("lora_loss"), 1e-5, 0.0);
  loss.backward();
  size_t grads = 0;
  for (auto& [path, l] : peft::lora_layers(*model))
    for (const auto& [ab, w] : {std::pair{"lora_A", l->lora_A->weight}, std::pair{"lora_B", l->lora_B->weight}}) {
      const Tensor& g = want.at("grad.base_model.model." + path + "." + ab + ".weight");
      EXPECT_TENSOR_NEAR(cpu(w.grad()), g, 1e-4, 1e-4 * max_abs(g)) << path << "." << ab;
      ++grads;
    }
  size_t expected = 0;
  for (const auto& [k, t] : want) expected += k.starts_with("grad.");
  EXPECT_EQ(grads, expected);
}

const std::vector<std::string> kFixtureFamilies = {"llama", "gpt2",  "llama3", "llama_linear", "llama_dynamic", "mistral",
                                                   "qwen2", "qwen3", "gemma2", "gemma3",       "phi3",          "smollm3",
                                                   "olmo2"};

TEST(HfFixtures, MatchTransformersAndPeft) {
  for (const std::string& name : kFixtureFamilies) expect_fixture_matches(name, Device::cpu());
}

// The same on the GPU (float32: no TF32 unless asked for).
TEST(HfFixtures, MatchTransformersAndPeftOnCuda) {
  TG_REQUIRE_CUDA();
  for (const std::string& name : kFixtureFamilies) expect_fixture_matches(name, Device::cuda());
}

// YaRN (Qwen2.5 / Llama long context) and longrope (Phi-3.5, Phi-4-mini's partial rotary factor;
// one sequence past original_max_position_embeddings, one within it) against transformers.
const std::vector<std::string> kRopeFixtures = {"llama_yarn", "phi3_longrope", "phi3_longrope_short"};

TEST(HfFixtures, RopeScalingsMatchTransformers) {
  for (const std::string& name : kRopeFixtures) expect_fixture_matches(name, Device::cpu());
}

TEST(HfFixtures, RopeScalingsMatchTransformersOnCuda) {
  TG_REQUIRE_CUDA();
  for (const std::string& name : kRopeFixtures) expect_fixture_matches(name, Device::cuda());
}

// What the families' real checkpoints may hold but tapegrad does not implement is refused by name
// (other activations, dropout); Phi-3-128k's and Phi-3.5's longrope and Phi-4-mini's partial rotary
// factor are read, their malformed fields named.
TEST(HfFixtures, UnimplementedFamilyOptionsAreRefusedByName) {
  const json::Value phi3 = read_json((kFixtures / "phi3/config.json").string());
  const json::Value gemma2 = read_json((kFixtures / "gemma2/config.json").string());
  const json::Value gemma3 = read_json((kFixtures / "gemma3/config.json").string());
  auto with = [](json::Value v, const std::string& key, json::Value value) { return json::dump(v.set(key, std::move(value))); };
  const json::Value longrope = json::Value::object()
                                   .set("type", "longrope")
                                   .set("long_factor", json::Value::array({1.0, 2.0}))
                                   .set("short_factor", json::Value::array({1.0, 1.0}));
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(phi3, "rope_scaling", longrope)), "config.json", "short_factor",
                   "has 2 numbers, wants one per rotary frequency");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(
                       with(phi3, "rope_parameters", json::Value::object().set("rope_type", "su"))),
                   "rope_parameters", "\"su\" is not implemented");
  // Phi-4-mini's partial rotary factor, beside rope_parameters or in it (which wins).
  json::Value top = phi3;
  top.set("rope_parameters", json::Value()).set("partial_rotary_factor", 0.75);
  EXPECT_EQ(std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(json::dump(top)).config).rope_scaling.partial_rotary_factor,
            0.75);
  top.set("rope_parameters", json::Value::object().set("rope_type", "default").set("partial_rotary_factor", 0.5));
  EXPECT_EQ(std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(json::dump(top)).config).rope_scaling.partial_rotary_factor,
            0.5);
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(phi3, "rope_parameters",
                                                    json::Value::object()
                                                        .set("rope_type", "default")
                                                        .set("rope_theta", 1e4)
                                                        .set("partial_rotary_factor", 0.1))),
                   "config.json", "the rotary dims", "must be even and positive");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(phi3, "resid_pdrop", 0.1)), "resid_pdrop = 0.1");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(phi3, "hidden_act", "gelu")), "hidden_act = \"gelu\"");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma2, "hidden_activation", "gelu")),
                   "hidden_activation = \"gelu\"", "gelu_pytorch_tanh");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma3, "use_bidirectional_attention", true)),
                   "use_bidirectional_attention = true");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(
                       with(gemma2, "layer_types", json::Value::array({"sliding_attention", "chunked_attention"}))),
                   "layer_types", "\"sliding_attention\" or \"full_attention\"");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma2, "layer_types", json::Value::array({"full_attention"}))),
                   "layer_types", "one entry per layer (num_hidden_layers 2)");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma3, "rope_parameters",
                                                    json::Value::object().set(
                                                        "full_attention", json::Value::object().set("rope_type", "proportional")))),
                   "rope_parameters.full_attention", "proportional", "not implemented");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma2, "query_pre_attn_scalar", -1)), "query_pre_attn_scalar");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(gemma2, "attn_logit_softcapping", "on")), "attn_logit_softcapping");
}

// The options each fixture's config.json sets, as tapegrad reads them.
TEST(HfFixtures, GemmaAndPhi3ConfigsReadAsTransformersWritesThem) {
  auto read = [](const std::string& name) {
    return nn::parse_pretrained_config(json::dump(read_json((kFixtures / name / "config.json").string())));
  };
  const auto g2 = std::any_cast<nn::GemmaConfig>(read("gemma2").config);
  EXPECT_EQ(g2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(g2.final_logit_softcapping, 30.0);
  EXPECT_EQ(g2.query_pre_attn_scalar, 24.0);
  EXPECT_EQ(g2.sliding_window, 8);
  EXPECT_TRUE(g2.is_sliding(0) && !g2.is_sliding(1) && !g2.qk_norm && g2.tie_word_embeddings);
  const auto g3 = std::any_cast<nn::GemmaConfig>(read("gemma3").config);
  EXPECT_EQ(g3.attn_logit_softcapping, 0.0);  // null in config.json: none
  EXPECT_EQ(g3.final_logit_softcapping, 0.0);
  EXPECT_EQ(g3.rope_theta, 1e6);
  EXPECT_EQ(g3.rope_local_base_freq, 1e4);
  EXPECT_TRUE(g3.is_sliding(0) && g3.is_sliding(1) && !g3.is_sliding(2) && g3.qk_norm);
  const auto p3 = std::any_cast<LlamaConfig>(read("phi3").config);
  EXPECT_EQ(p3.architecture, "Phi3ForCausalLM");
  EXPECT_EQ(p3.sliding_window, 0);  // null
  EXPECT_FALSE(p3.tie_word_embeddings);
  // transformers 4's spelling of Gemma 3's RoPE: rope_theta, rope_local_base_freq, rope_scaling.
  json::Value old = read_json((kFixtures / "gemma3/config.json").string());
  old.set("rope_parameters", json::Value())
      .set("rope_theta", 5e5)
      .set("rope_local_base_freq", 2e4)
      .set("rope_scaling", json::Value::object().set("rope_type", "linear").set("factor", 8.0));
  const auto g3old = std::any_cast<nn::GemmaConfig>(nn::parse_pretrained_config(json::dump(old)).config);
  EXPECT_EQ(g3old.rope_theta, 5e5);
  EXPECT_EQ(g3old.rope_scaling.rope_type, "linear");
  EXPECT_EQ(g3old.rope_scaling.factor, 8.0);
  EXPECT_EQ(g3old.rope_local_base_freq, 2e4);
  EXPECT_EQ(g3old.rope_local_scaling.rope_type, "default");
  // No layer_types: Gemma 3's sliding_window_pattern (every 6th layer global), Gemma 2's alternation.
  old.set("layer_types", json::Value()).set("num_hidden_layers", 7).set("sliding_window_pattern", 3);
  const auto pattern = std::any_cast<nn::GemmaConfig>(nn::parse_pretrained_config(json::dump(old)).config);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(pattern.is_sliding(i), i % 3 != 2) << i;
}

// The folders the new families save read back as the same config.json and the same logits.
TEST(HfFixtures, GemmaAndPhi3RoundTripThroughSavePretrained) {
  for (const std::string name : {"gemma2", "gemma3", "phi3"}) {
    SCOPED_TRACE(name);
    auto model = nn::from_pretrained((kFixtures / name).string());
    TempDir dir;
    nn::save_pretrained(*model, dir / "m");
    auto back = nn::from_pretrained(dir / "m");
    EXPECT_EQ(back->architecture().name, model->architecture().name);
    EXPECT_EQ(json::dump(back->config_json()), json::dump(model->config_json()));
    const Tensor x = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string()).at("ids");
    EXPECT_TENSOR_EQ(back->forward(x), model->forward(x));
    // Gemma's head is the embedding: written once, under its name.
    const auto saved = safetensors::load_file(dir / "m/model.safetensors");
    EXPECT_EQ(saved.count("lm_head.weight"), name == "phi3" ? 1u : 0u);
  }
}

// Training with LoRA on the folders (the fixtures' adapters, B not zero): forward and backward in
// train mode, every adapter gets a gradient, and gradient checkpointing gives the same loss and
// gradients.
TEST(HfFixtures, GemmaAndPhi3TrainWithLora) {
  for (const std::string name : {"gemma2", "gemma3", "phi3"}) {
    SCOPED_TRACE(name);
    const safetensors::TensorMap want = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string());
    std::vector<std::vector<float>> grads[2];
    double losses[2] = {0, 0};
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      std::shared_ptr<nn::CausalLM> model = nn::from_pretrained((kFixtures / name).string());
      peft::load_adapter(*model, (kFixtures / (name + "_adapter")).string());
      model->train();
      if (ckpt) model->gradient_checkpointing_enable();
      Tensor loss = model->loss(want.at("ids"), want.at("labels"));
      loss.backward();
      losses[ckpt] = loss.item();
      EXPECT_TRUE(std::isfinite(losses[ckpt]));
      for (auto& [path, l] : peft::lora_layers(*model)) {
        for (const Tensor& w : {l->lora_A->weight, l->lora_B->weight}) {
          ASSERT_TRUE(w.grad().defined()) << path;
          EXPECT_GT(max_abs(w.grad()), 0.0) << path;
          grads[ckpt].push_back(w.grad().to_vector<float>());
        }
      }
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_EQ(grads[0], grads[1]);
  }
}

// bfloat16 folders: the same model within bfloat16's precision.
TEST(HfFixtures, GemmaAndPhi3RunInBFloat16) {
  for (const std::string name : {"gemma2", "gemma3", "phi3"}) {
    SCOPED_TRACE(name);
    const Tensor x = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string()).at("ids");
    Tensor want = nn::from_pretrained((kFixtures / name).string())->forward(x);
    Tensor got = nn::from_pretrained((kFixtures / name).string(), {.dtype = kBFloat16})->forward(x);
    EXPECT_EQ(got.dtype(), kBFloat16);
    EXPECT_TENSOR_NEAR(to(got, kFloat32), want, 0.0, 0.05 * max_abs(want));
  }
}

// Gemma's norm adds 1 to its weight in float32 and rounds once: 1 + 3/256 is not a bfloat16.
TEST(HfFixtures, GemmaNormAddsOneInFloat32) {
  nn::RMSNorm norm(4, 1e-6, /*unit_offset=*/true);
  EXPECT_EQ(norm.weight.to_vector<float>(), std::vector<float>(4, 0.0f));  // starts at zero: the identity scale
  {
    NoGradGuard g;
    copy_(norm.weight, from_vector<float>({3.0f / 256, -5.0f / 512, 0.25f, 0.0f}, {4}));
  }
  const Tensor x = from_vector<float>({1.5f, -2.0f, 0.75f, 3.0f, 0.5f, 0.25f, -1.0f, 2.0f}, {2, 4});
  const Tensor want = rms_norm(x, add(norm.weight, 1.0), 1e-6);
  norm.to(kBFloat16);
  EXPECT_TENSOR_EQ(norm.forward(to(x, kBFloat16)), to(want, kBFloat16));
}

// Fixture `name`'s cached forward (tests/cached_forward_check.h).
void expect_cached_matches_full(const std::string& name, const std::vector<std::vector<int64_t>>& seqs,
                                const std::vector<int64_t>& pad, const std::vector<int64_t>& steps) {
  SCOPED_TRACE(name);
  test::expect_cached_matches_full(*nn::from_pretrained((kFixtures / name).string()), seqs, pad, steps);
}

// Generation's cached forward (prefill, a chunk, then one token a step, one sequence left-padded)
// gives each sequence the logits of its full forward, soft-capped attention and logits included.
TEST(HfFixtures, GemmaAndPhi3CachedForwardMatchesTheFullForward) {
  for (const std::string name : {"gemma2", "gemma3", "phi3"})
    expect_cached_matches_full(name, {{5, 9, 1, 33, 7, 2, 60, 4}, {8, 3, 71, 12, 6}}, {0, 3}, {4, 2, 1, 1});
}

// Past the fixtures' sliding_window of 8 (Mistral's; Gemma's and SmolLM3's sliding layers): a prompt longer than
// the window, a chunk across it, then one token a step to column 15; the cached keys older than
// the window are masked as the full forward masks them.
TEST(HfFixtures, SlidingWindowFamiliesGeneratePastTheWindow) {
  const std::vector<std::vector<int64_t>> seqs = {{5, 9, 1, 33, 7, 2, 60, 4, 11, 23, 8, 3, 71, 12, 6, 40},
                                                  {8, 3, 71, 12, 6, 2, 2, 9, 17, 5, 30, 1, 4}};
  for (const std::string name : {"mistral", "gemma2", "gemma3", "smollm3"})
    expect_cached_matches_full(name, seqs, {0, 3}, {10, 3, 1, 1, 1});
}

// yarn and longrope (with Phi-4-mini's partial rotary factor) through whole models: save_pretrained
// writes what from_pretrained reads back (the same logits, bitwise), one-token cached steps give
// the full forward's logits (longrope within original_max_position_embeddings, where neither
// switches tables), and LoRA trains through the partially rotated heads.
TEST(HfFixtures, RopeScalingsRoundTripCacheAndTrain) {
  nn::LlamaConfig yarn = llama_config();
  yarn.max_position_embeddings = 64;
  yarn.rope_scaling = {.rope_type = "yarn", .factor = 4.0, .original_max_position_embeddings = 16, .beta_fast = 16};
  nn::LlamaConfig longrope = llama_config();
  longrope.architecture = "Phi3ForCausalLM";
  longrope.max_position_embeddings = 64;
  const int64_t rotary = 3 * llama_config().head_dim() / 4;
  longrope.rope_scaling = {.rope_type = "longrope", .factor = 0, .original_max_position_embeddings = 16,
                           .short_factor = std::vector<double>(rotary / 2, 1.25),
                           .long_factor = std::vector<double>(rotary / 2, 4.0), .partial_rotary_factor = 0.75};
  Generator gen(3);
  const std::vector<std::shared_ptr<nn::CausalLM>> models = {std::make_shared<nn::LlamaForCausalLM>(yarn, gen),
                                                             std::make_shared<nn::Phi3ForCausalLM>(longrope, gen)};
  for (const auto& model : models) {
    SCOPED_TRACE(model->architecture().name);
    TempDir dir;
    nn::save_pretrained(*model, dir / "m");
    std::shared_ptr<nn::CausalLM> back = nn::from_pretrained(dir / "m");
    const nn::LlamaConfig want = std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(json::dump(model->config_json())).config);
    EXPECT_EQ(std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(json::dump(back->config_json())).config).rope_scaling,
              want.rope_scaling);
    EXPECT_TENSOR_EQ(back->forward(ids()), model->forward(ids()));

    const nn::ModelDims d = model->dims();
    {
      NoGradGuard no_grad;
      nn::KVCache cache(d.num_layers, 2, d.kv_heads, d.head_dim, 8, {kFloat32});
      const Tensor full = model->forward(ids());
      for (int64_t t = 0; t < 8; ++t)
        EXPECT_TENSOR_NEAR(model->logits(model->hidden_states(slice(ids(), 1, t, t + 1), cache)),
                           slice(full, 1, t, t + 1), 2e-5, 2e-5);
    }
    peft::LoraConfig lora;
    lora.target_modules = {peft::kAllLinear};  // phi3 has no peft default
    peft::apply_lora(*model, lora);
    model->train();
    Tensor loss = model->loss(ids(), ids());
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item()));
    for (auto& [path, l] : peft::lora_layers(*model)) EXPECT_TRUE(l->lora_A->weight.grad().defined()) << path;
  }
  // Past original_max_position_embeddings the whole sequence takes the long factors, as in
  // transformers: the first 16 positions' logits change once a 17th token joins.
  NoGradGuard no_grad;
  nn::Phi3ForCausalLM phi3(longrope, gen);
  const Tensor ids17 = randint(0, longrope.vocab_size, {1, 17}, gen);
  EXPECT_GT(max_abs(sub(slice(phi3.forward(ids17), 1, 0, 16), phi3.forward(slice(ids17, 1, 0, 16)))), 1e-4);
}

// Issue 39 for every family: a folder's model trains with LoRA in train mode (GPT-2's own
// dropout: HfTest.FolderModelsTrainWithTheirConfigsDropoutAndLora; the other families refuse
// dropout by name), and every registered family has a folder here.
TEST(HfFixtures, EveryFamilyTrainsWithLoraFromItsFolder) {
  std::set<std::string> trained;
  for (const std::string& name : kFixtureFamilies) {
    SCOPED_TRACE(name);
    std::shared_ptr<nn::CausalLM> model = nn::from_pretrained((kFixtures / name).string());
    trained.insert(model->architecture().name);
    peft::LoraConfig lora;
    lora.target_modules = {peft::kAllLinear};  // phi3 has no peft default
    peft::apply_lora(*model, lora);
    model->train();
    safetensors::TensorMap want = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string());
    Tensor loss = model->loss(want.at("ids"), want.at("labels"));
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item()));
    EXPECT_FALSE(peft::lora_layers(*model).empty());
    for (auto& [path, l] : peft::lora_layers(*model)) EXPECT_TRUE(l->lora_A->weight.grad().defined()) << path;
  }
  // The mixture-of-experts families: from their folder once make_moe_fixtures.py has written it,
  // until then from their tiny configs; their LoRA on the experts too (target_parameters).
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    const std::string folder = (kFixtures / (arch == "Qwen3MoeForCausalLM" ? "qwen3_moe"
                                             : arch == "MixtralForCausalLM" ? "mixtral" : "gpt_oss")).string();
    Generator gen(1);
    std::shared_ptr<nn::CausalLM> model = fs::exists(folder) ? nn::from_pretrained(folder)
                                                              : std::make_shared<nn::MoeForCausalLM>(tiny_moe(arch), gen);
    trained.insert(model->architecture().name);
    peft::apply_lora(*model, {.target_modules = model->architecture().lora_targets, .target_parameters = kExpertTargets});
    model->train();
    Tensor loss = model->loss(ids(), ids());
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item()));
    for (auto& [path, l] : peft::lora_experts(*model))
      for (const auto& [p, a] : l->adapters) EXPECT_TRUE(a->lora_A->weight.grad().defined()) << path << "." << p;
  }
  for (const nn::Architecture* a : nn::architectures())
    if (a->name != "ToyForCausalLM") EXPECT_TRUE(trained.count(a->name)) << a->name << " has no folder in kFixtureFamilies";
}

// Each family's config.json as tapegrad writes it reads back as the same config, and the folder
// loads to the same logits.
TEST(HfFixtures, FamiliesRoundTripThroughSavePretrained) {
  for (const std::string name : {"llama3", "mistral", "qwen2", "qwen3"}) {
    SCOPED_TRACE(name);
    auto model = nn::from_pretrained_llama((kFixtures / name).string());
    TempDir dir;
    nn::save_pretrained(*model, dir / "m");
    auto back = nn::from_pretrained_llama(dir / "m");
    EXPECT_EQ(back->architecture().name, model->architecture().name);
    EXPECT_EQ(back->config.rope_scaling, model->config.rope_scaling);
    EXPECT_EQ(back->config.head_dim(), model->config.head_dim());
    EXPECT_EQ(back->config.attention_bias, model->config.attention_bias);
    EXPECT_EQ(back->config.qkv_bias, model->config.qkv_bias);
    EXPECT_EQ(back->config.qk_norm, model->config.qk_norm);
    EXPECT_EQ(back->config.sliding_window, model->config.sliding_window);
    EXPECT_EQ(back->config.tie_word_embeddings, model->config.tie_word_embeddings);
    EXPECT_EQ(json::dump(back->config.token_ids), json::dump(model->config.token_ids));
    EXPECT_TENSOR_EQ(back->forward(ids()), model->forward(ids()));
  }
}

// What transformers 5.17 refused in tapegrad's saved configs (tests/interop/check_family_roundtrip.py
// on the H200): Phi-3's pad_token_id must be the folder's (its default, 32000, lies outside a small
// vocabulary), Gemma's query_pre_attn_scalar an integer.
TEST(HfFixtures, SavedConfigsKeepTokenIdsAndIntegerFields) {
  TempDir dir;
  nn::save_pretrained(*nn::from_pretrained((kFixtures / "phi3").string()), dir / "phi3");
  EXPECT_EQ(read_json(dir / "phi3/config.json").at("pad_token_id").as_int(), 0);
  EXPECT_EQ(read_json(dir / "phi3/config.json").at("bos_token_id").as_int(), 1);
  nn::save_pretrained(*nn::from_pretrained((kFixtures / "gemma2").string()), dir / "gemma2");
  const json::Value scalar = read_json(dir / "gemma2/config.json").at("query_pre_attn_scalar");
  EXPECT_TRUE(scalar.is_int() && scalar.as_int() == 24) << json::dump(scalar);
}

TEST(HfFixtures, FamilyOptionsTheModelsDoNotImplementAreRefused) {
  const std::string llama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64, )";
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(llama + R"("rope_scaling": {"rope_type": "proportional", "factor": 4}})"),
                   "rope_scaling", "proportional", "not implemented");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(llama + R"("rope_parameters": {"rope_type": "linear", "factor": 0.5}})"),
                   "rope_parameters.factor is 0.5, wants a finite number >= 1");
  const std::string qwen = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64, )";
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(qwen + R"("use_sliding_window": true})"), "use_sliding_window");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(qwen + R"("layer_types": ["full_attention", "sliding_attention"]})"),
                   "layer_types");
  const auto c = std::any_cast<LlamaConfig>(nn::parse_pretrained_config(qwen + R"("tie_word_embeddings": true})").config);
  EXPECT_TRUE(c.qkv_bias && !c.attention_bias && c.tie_word_embeddings);
}

// A window shorter than the sequence (the mistral fixture above checks it against transformers):
// with one layer, query 11 sees keys 4..11 only, so the first four tokens do not change it, while
// query 8 sees key 1.
TEST(HfFixtures, SlidingWindowAttendsInsideTheWindow) {
  LlamaConfig c = llama_config();
  c.num_hidden_layers = 1;
  c.sliding_window = 8;
  Generator gen(5);
  LlamaForCausalLM model(c, gen);
  const Tensor x = from_vector<int64_t>({1, 5, 2, 63, 0, 7, 3, 3, 9, 4, 11, 6}, {1, 12});
  const Tensor y = from_vector<int64_t>({50, 51, 52, 53, 0, 7, 3, 3, 9, 4, 11, 6}, {1, 12});
  Tensor a = model.forward(x), b = model.forward(y);
  EXPECT_TENSOR_NEAR(slice(a, 1, 11, 12), slice(b, 1, 11, 12), 1e-5, 1e-5);
  EXPECT_GT(max_abs(sub(slice(a, 1, 8, 9), slice(b, 1, 8, 9))), 1e-4) << "query 8 sees key 1";
  // Greedy generation past the window picks what the full forward of each prefix picks.
  const std::vector<int32_t> out = nn::generate(model, {{1, 2, 3, 4, 5, 6, 7, 8}}, {.max_new_tokens = 4})[0];
  ASSERT_EQ(out.size(), 12u);
  NoGradGuard no_grad;
  for (size_t n = 8; n < out.size(); ++n) {
    const Tensor prefix = from_vector(std::vector<int64_t>(out.begin(), out.begin() + static_cast<int64_t>(n)),
                                      {1, static_cast<int64_t>(n)});
    const std::vector<float> last = contiguous(slice(model.forward(prefix), 1, n - 1, n)).to_vector<float>();
    EXPECT_EQ(std::max_element(last.begin(), last.end()) - last.begin(), out[n]) << "token " << n;
  }
  // The static cache's decode step (a CUDA graph's) has no window yet: refused before any step.
  nn::GenerationConfig static_cache{.max_new_tokens = 4};
  static_cache.cache_implementation = "static";
  EXPECT_ERROR_HAS(nn::generate(model, {{1, 2, 3, 4, 5, 6, 7, 8}}, static_cache), "static cache",
                   "within sliding_window 8", "spans 11 positions", "dynamic cache");
}

}  // namespace
}  // namespace tg::test
