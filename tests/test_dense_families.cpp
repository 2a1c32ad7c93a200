// SmolLM3 (RoPE left out of some layers, sliding windows on the layers layer_types names) and
// OLMo 2 (norms after the attention and the MLP, q/k norms over the whole projections) on the decoder
// stack: the models against their modeling files' math written as float64 loops, the released
// config.json files as transformers reads them, save_pretrained, the KV cache, bfloat16.
// tests/fixtures/hf's smollm3 and olmo2 check them against transformers + peft (tests/test_hf.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/models/olmo2.h"
#include "nn/models/pretrained.h"
#include "nn/models/smollm3.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "testing/testing.h"
#include "tests/cached_forward_check.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using Vec = std::vector<double>;

// Four layers, one of each kind: RoPE and sliding, NoPE and full, RoPE and full, NoPE and sliding
// (a window of 4, shorter than the sequences), grouped-query heads, a tied head.
nn::SmolLM3Config smollm3_config() {
  nn::SmolLM3Config c;
  static_cast<nn::LlamaConfig&>(c) = llama_config();
  c.architecture = "SmolLM3ForCausalLM";
  c.num_hidden_layers = 4;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = true;
  c.no_rope_layers = {1, 0, 1, 0};
  c.use_sliding_window = true;
  c.sliding_window = 4;
  c.layer_types = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
  return c;
}

// Two layers, grouped-query heads (k_norm over 2 of the 4 heads' width), biases on q/k/v/o.
nn::LlamaConfig olmo2_config() {
  nn::LlamaConfig c = llama_config();
  c.architecture = "Olmo2ForCausalLM";
  c.max_position_embeddings = 32;
  c.attention_bias = true;
  return c;
}

// Every norm weight and bias away from its init (1 and 0), as trained ones are.
template <class Model>
std::shared_ptr<Model> perturbed(std::shared_ptr<Model> m, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (const auto& [name, p] : m->named_parameters())
    if (name.find("norm") != std::string::npos || name.ends_with(".bias")) copy_(p, add(p, mul(randn(p.shape(), gen), 0.2)));
  return m;
}

// The modeling files' forward (transformers' modeling_smollm3.py, modeling_olmo2.py) in float64
// loops over one sequence, the weights read by their transformers names.
struct Reference {
  std::map<std::string, Vec> w;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 0, theta = 0;
  bool post_norms = false;       // OLMo 2: norms after attention and MLP, q/k norms over the projections
  std::vector<bool> rope;        // per layer: q and k rotated
  std::vector<int64_t> window;   // per layer: the keys a query sees (0: all before it)

  const Vec& at(const std::string& name) const { return w.at(name); }
  const Vec* bias(const std::string& name) const { return w.count(name) ? &w.at(name) : nullptr; }

  static Vec linear(const Vec& W, const Vec* b, const Vec& x) {
    const size_t in = x.size(), out = W.size() / in;
    Vec y(out);
    for (size_t o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (size_t i = 0; i < in; ++i) s += W[o * in + i] * x[i];
      y[o] = s;
    }
    return y;
  }
  Vec rms(const Vec& x, const Vec& weight) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * weight[i];
    return y;
  }
  // rotate_half's RoPE of every head of x at position t.
  void rotate(Vec& x, int64_t t) const {
    const int64_t half = head_dim / 2;
    for (size_t h0 = 0; h0 < x.size(); h0 += static_cast<size_t>(head_dim))
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const double x1 = x[h0 + i], x2 = x[h0 + i + half];
        x[h0 + i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[h0 + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  }
  Vec mlp(const std::string& p, const Vec& x) const {
    Vec g = linear(at(p + "mlp.gate_proj.weight"), nullptr, x), u = linear(at(p + "mlp.up_proj.weight"), nullptr, x);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return linear(at(p + "mlp.down_proj.weight"), nullptr, g);
  }

  // logits [T][vocab] of ids.
  std::vector<Vec> logits(const std::vector<int64_t>& ids) const {
    const Vec& embed = at("model.embed_tokens.weight");
    const size_t T = ids.size(), d = at("model.norm.weight").size();
    std::vector<Vec> h(T);
    for (size_t t = 0; t < T; ++t) h[t].assign(embed.begin() + ids[t] * d, embed.begin() + (ids[t] + 1) * d);
    for (size_t l = 0; l < rope.size(); ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
      std::vector<Vec> q(T), k(T), v(T);
      for (size_t t = 0; t < T; ++t) {
        const Vec x = post_norms ? h[t] : rms(h[t], at(p + "input_layernorm.weight"));
        q[t] = linear(at(a + "q_proj.weight"), bias(a + "q_proj.bias"), x);
        k[t] = linear(at(a + "k_proj.weight"), bias(a + "k_proj.bias"), x);
        v[t] = linear(at(a + "v_proj.weight"), bias(a + "v_proj.bias"), x);
        if (post_norms) q[t] = rms(q[t], at(a + "q_norm.weight")), k[t] = rms(k[t], at(a + "k_norm.weight"));
        if (rope[l]) rotate(q[t], static_cast<int64_t>(t)), rotate(k[t], static_cast<int64_t>(t));
      }
      std::vector<Vec> out(T);
      for (size_t t = 0; t < T; ++t) {
        Vec o(static_cast<size_t>(heads * head_dim));
        for (int64_t hh = 0; hh < heads; ++hh) {
          const size_t qo = static_cast<size_t>(hh * head_dim), ko = static_cast<size_t>(hh / (heads / kv_heads) * head_dim);
          const size_t first = window[l] > 0 && t + 1 > static_cast<size_t>(window[l]) ? t + 1 - static_cast<size_t>(window[l]) : 0;
          Vec s;
          double top = -1e300, z = 0;
          for (size_t j = first; j <= t; ++j) {
            double dot = 0;
            for (int64_t i = 0; i < head_dim; ++i) dot += q[t][qo + i] * k[j][ko + i];
            s.push_back(dot / std::sqrt(static_cast<double>(head_dim)));
            top = std::max(top, s.back());
          }
          for (double& e : s) z += (e = std::exp(e - top));
          for (size_t j = first; j <= t; ++j)
            for (int64_t i = 0; i < head_dim; ++i) o[qo + i] += s[j - first] / z * v[j][ko + i];
        }
        const Vec att = linear(at(a + "o_proj.weight"), bias(a + "o_proj.bias"), o);
        Vec h2(h[t]), m;
        const Vec att_n = post_norms ? rms(att, at(p + "post_attention_layernorm.weight")) : att;
        for (size_t i = 0; i < d; ++i) h2[i] += att_n[i];
        if (post_norms) m = rms(mlp(p, h2), at(p + "post_feedforward_layernorm.weight"));
        else m = mlp(p, rms(h2, at(p + "post_attention_layernorm.weight")));
        for (size_t i = 0; i < d; ++i) h2[i] += m[i];
        out[t] = h2;
      }
      h = out;
    }
    std::vector<Vec> logits(T);
    const Vec& head = w.count("lm_head.weight") ? at("lm_head.weight") : embed;
    for (size_t t = 0; t < T; ++t) logits[t] = linear(head, nullptr, rms(h[t], at("model.norm.weight")));
    return logits;
  }
};

Reference reference_of(const nn::Module& model, const nn::LlamaConfig& c) {
  Reference r;
  for (const auto& [name, t] : model.state_dict()) r.w[name] = to(t, kFloat64).to_vector<double>();
  r.heads = c.num_attention_heads;
  r.kv_heads = c.kv_heads();
  r.head_dim = c.head_dim();
  r.eps = c.rms_norm_eps;
  r.theta = c.rope_theta;
  r.rope.assign(static_cast<size_t>(c.num_hidden_layers), true);
  r.window.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  return r;
}

const std::vector<std::vector<int64_t>> kSequences = {{1, 5, 2, 63, 0, 7, 3, 3, 9, 4, 11, 6}, {40, 41, 2, 8, 17, 5, 30, 1, 22, 9, 60, 13}};

// max |model - reference| over every position of kSequences, relative to the largest reference logit.
double relative_difference(nn::CausalLM& model, const Reference& ref) {
  std::vector<int64_t> flat;
  for (const auto& s : kSequences) flat.insert(flat.end(), s.begin(), s.end());
  const int64_t T = static_cast<int64_t>(kSequences[0].size());
  const Vec got = to(model.forward(from_vector(flat, {2, T})), kFloat64).to_vector<double>();
  double diff = 0, scale = 0;
  size_t i = 0;
  for (const auto& s : kSequences)
    for (const Vec& row : ref.logits(s))
      for (double want : row) diff = std::max(diff, std::abs(got[i++] - want)), scale = std::max(scale, std::abs(want));
  return diff / scale;
}

// Weights of 0.3: attention sharp enough for positions and windows to show in the logits.
constexpr double kSharp = 0.3;

TEST(DenseFamilies, SmolLM3MatchesItsModelingFileInFloat64) {
  nn::SmolLM3Config c = smollm3_config();
  c.initializer_range = kSharp;
  Generator gen(1);
  auto model = perturbed(std::make_shared<nn::SmolLM3ForCausalLM>(c, gen), 2);
  model->to(kFloat64);
  Reference ref = reference_of(*model, c);
  ref.rope = {true, false, true, false};  // config.no_rope_layers
  ref.window = {4, 0, 0, 4};              // layer_types' sliding layers, use_sliding_window
  EXPECT_LT(relative_difference(*model, ref), 1e-6);
  // Neither is vacuous: RoPE on every layer, or no window, gives other logits.
  Reference all_rope = ref, no_window = ref;
  all_rope.rope.assign(4, true);
  no_window.window.assign(4, 0);
  EXPECT_GT(relative_difference(*model, all_rope), 1e-2);
  EXPECT_GT(relative_difference(*model, no_window), 1e-2);
}

TEST(DenseFamilies, Olmo2MatchesItsModelingFileInFloat64) {
  nn::LlamaConfig c = olmo2_config();
  c.initializer_range = kSharp;
  Generator gen(3);
  auto model = perturbed(std::make_shared<nn::Olmo2ForCausalLM>(c, gen), 4);
  model->to(kFloat64);
  Reference ref = reference_of(*model, c);
  ref.post_norms = true;
  EXPECT_LT(relative_difference(*model, ref), 1e-6);
  // transformers' names and shapes: no input norms, q_norm over 4 heads, k_norm over 2.
  const nn::StateDict sd = model->state_dict();
  EXPECT_EQ(sd.count("model.layers.0.input_layernorm.weight"), 0u);
  EXPECT_EQ(sd.count("model.layers.0.pre_feedforward_layernorm.weight"), 0u);
  EXPECT_EQ(sd.at("model.layers.1.post_feedforward_layernorm.weight").shape(), Shape({32}));
  EXPECT_EQ(sd.at("model.layers.0.self_attn.q_norm.weight").shape(), Shape({4 * 8}));
  EXPECT_EQ(sd.at("model.layers.0.self_attn.k_norm.weight").shape(), Shape({2 * 8}));
}

std::string released(const std::string& name) {
  const std::vector<uint8_t> b = io::read_file((fs::path(TG_TESTS_DIR) / "fixtures/hf/released" / name).string());
  return std::string(b.begin(), b.end());
}

// The model makers' config.json files (tests/fixtures/hf/released), read as transformers 5 reads them.
TEST(DenseFamilies, ReleasedConfigsReadAsTransformersReadsThem) {
  const auto smol = std::any_cast<nn::SmolLM3Config>(nn::parse_pretrained_config(released("SmolLM3-3B.json")).config);
  EXPECT_EQ(smol.num_hidden_layers, 36);
  EXPECT_EQ(smol.hidden_size, 2048);
  EXPECT_EQ(smol.intermediate_size, 11008);
  EXPECT_EQ(smol.num_attention_heads, 16);
  EXPECT_EQ(smol.kv_heads(), 4);
  EXPECT_EQ(smol.vocab_size, 128256);
  EXPECT_EQ(smol.max_position_embeddings, 65536);
  EXPECT_EQ(smol.rope_theta, 5e6);
  EXPECT_EQ(smol.rms_norm_eps, 1e-6);
  EXPECT_TRUE(smol.tie_word_embeddings && !smol.attention_bias && !smol.mlp_bias);
  EXPECT_TRUE(smol.token_ids.at("bos_token_id").is_null());  // kept null: transformers' default is 128000
  EXPECT_EQ(smol.token_ids.at("eos_token_id").as_int(), 128012);
  const nn::DecoderSpec s = nn::smollm3_spec(smol);
  for (int64_t i = 0; i < 36; ++i) {
    EXPECT_EQ(s.uses_rope(i), i % 4 != 3) << i;
    EXPECT_FALSE(s.is_sliding(i)) << i;
  }
  const auto olmo = std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(released("OLMo-2-1B.json")).config);
  EXPECT_EQ(olmo.architecture, "Olmo2ForCausalLM");
  EXPECT_EQ(olmo.num_hidden_layers, 16);
  EXPECT_EQ(olmo.hidden_size, 2048);
  EXPECT_EQ(olmo.intermediate_size, 8192);
  EXPECT_EQ(olmo.kv_heads(), 16);
  EXPECT_EQ(olmo.vocab_size, 100352);
  EXPECT_EQ(olmo.max_position_embeddings, 4096);
  EXPECT_EQ(olmo.rope_theta, 5e5);
  EXPECT_EQ(olmo.rms_norm_eps, 1e-6);
  EXPECT_TRUE(!olmo.tie_word_embeddings && !olmo.attention_bias);
  const nn::DecoderSpec o = nn::olmo2_spec(olmo);
  EXPECT_TRUE(o.attention.qk_norm && o.attention.qk_norm_whole && !o.pre_norms && o.sandwich_norms);
}

// What config.json leaves out takes transformers' SmolLM3Config / Olmo2Config defaults.
TEST(DenseFamilies, AbsentFieldsTakeTheFamiliesDefaults) {
  const auto smol = std::any_cast<nn::SmolLM3Config>(
      nn::parse_pretrained_config(R"({"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3"})").config);
  EXPECT_EQ(smol.num_hidden_layers, 36);
  EXPECT_EQ(smol.num_attention_heads, 16);
  EXPECT_EQ(smol.kv_heads(), 4);
  EXPECT_EQ(smol.max_position_embeddings, 32768);
  EXPECT_EQ(smol.rope_theta, 2e6);
  EXPECT_TRUE(smol.tie_word_embeddings);
  EXPECT_TRUE(smol.uses_rope(2) && !smol.uses_rope(3) && smol.uses_rope(4));
  // use_sliding_window with a window and no layer_types: the NoPE layers slide.
  const auto sliding = std::any_cast<nn::SmolLM3Config>(nn::parse_pretrained_config(
      R"({"architectures": ["SmolLM3ForCausalLM"], "use_sliding_window": true, "sliding_window": 64,
          "no_rope_layer_interval": 2})").config);
  EXPECT_TRUE(!sliding.is_sliding(0) && sliding.is_sliding(1) && !sliding.is_sliding(2) && sliding.is_sliding(3));
  const auto olmo = std::any_cast<nn::LlamaConfig>(
      nn::parse_pretrained_config(R"({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2"})").config);
  EXPECT_EQ(olmo.vocab_size, 50304);
  EXPECT_EQ(olmo.num_hidden_layers, 32);
  EXPECT_EQ(olmo.kv_heads(), 32);
  EXPECT_EQ(olmo.max_position_embeddings, 2048);
  EXPECT_EQ(olmo.rms_norm_eps, 1e-5);
  EXPECT_EQ(olmo.rope_theta, 1e4);
  EXPECT_FALSE(olmo.tie_word_embeddings);
}

TEST(DenseFamilies, ConfigFieldsTheyDoNotImplementAreRefusedByName) {
  const std::string smol = R"({"architectures": ["SmolLM3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64, )";
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("no_rope_layers": [1, 2]})"), "no_rope_layers is [1,2]",
                   "1 (RoPE) or 0 (none)");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("no_rope_layers": [1]})"), "config.json",
                   "no_rope_layers has 1 entries", "num_hidden_layers 2");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("layer_types": ["full_attention", "sliding_attention"]})"),
                   "layer 1 is a sliding_attention layer", "use_sliding_window must be true and sliding_window positive");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("layer_types": ["full_attention", "chunked_attention"]})"),
                   "layer_types", "\"sliding_attention\" or \"full_attention\"");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("partial_rotary_factor": 0.5})"), "partial_rotary_factor");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(smol + R"("hidden_act": "gelu"})"), "hidden_act = \"gelu\"");
  const std::string olmo = R"({"architectures": ["Olmo2ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64, )";
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(olmo + R"("attention_dropout": 0.1})"), "attention_dropout = 0.1");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(olmo + R"("rope_scaling": {"rope_type": "su"}})"), "rope_scaling",
                   "\"su\" is not implemented");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(olmo + R"("partial_rotary_factor": 0.5})"), "partial_rotary_factor");
  nn::LlamaConfig qwen3_norms = olmo2_config();
  qwen3_norms.qk_norm = true;
  EXPECT_ERROR_HAS(nn::Olmo2ForCausalLM m(qwen3_norms), "Olmo2ForCausalLM", "qk_norm must be false");
}

// save_pretrained writes transformers' layout and config.json (no_rope_layers and layer_types per
// layer), which reads back as the same model; the cached forward (past the window, one sequence
// left-padded) gives the full forward's logits; bfloat16 computes the same within its precision.
TEST(DenseFamilies, SaveCacheAndBFloat16) {
  Generator gen(5);
  const std::vector<std::shared_ptr<nn::CausalLM>> models = {
      perturbed(std::make_shared<nn::SmolLM3ForCausalLM>(smollm3_config(), gen), 6),
      perturbed(std::make_shared<nn::Olmo2ForCausalLM>(olmo2_config(), gen), 7)};
  const Tensor ids = from_vector<int64_t>({1, 5, 2, 63, 0, 7, 3, 3, 9, 4, 40, 41, 2, 8, 17, 5, 30, 1, 22, 9}, {2, 10});
  for (const auto& model : models) {
    const std::string name = model->architecture().name;
    SCOPED_TRACE(name);
    TempDir dir;
    nn::save_pretrained(*model, dir / "m");
    auto back = nn::from_pretrained(dir / "m");
    EXPECT_EQ(back->architecture().name, name);
    EXPECT_EQ(json::dump(back->config_json()), json::dump(model->config_json()));
    EXPECT_TENSOR_EQ(back->forward(ids), model->forward(ids));
    const std::vector<uint8_t> text = io::read_file(dir / "m/config.json");
    const json::Value config = json::parse(std::string(text.begin(), text.end()));
    const auto saved = safetensors::load_file(dir / "m/model.safetensors");
    if (name == "SmolLM3ForCausalLM") {
      EXPECT_EQ(json::dump(config.at("no_rope_layers")), "[1,0,1,0]");
      EXPECT_EQ(json::dump(config.at("layer_types")),
                R"(["sliding_attention","full_attention","full_attention","sliding_attention"])");
      EXPECT_TRUE(config.at("use_sliding_window").as_bool());
      EXPECT_EQ(config.at("sliding_window").as_int(), 4);
      EXPECT_EQ(saved.count("lm_head.weight"), 0u);  // tied: the embedding, written once
    } else {
      EXPECT_EQ(config.at("model_type").as_string(), "olmo2");
      EXPECT_TRUE(config.at("attention_bias").as_bool());
      EXPECT_EQ(saved.count("model.layers.0.input_layernorm.weight"), 0u);
      EXPECT_EQ(saved.count("model.layers.0.self_attn.q_norm.weight"), 1u);
    }
    expect_cached_matches_full(*model, {{5, 9, 1, 33, 7, 2, 60, 4, 11, 23, 8}, {8, 3, 61, 12, 6, 2, 2, 9}}, {0, 3},
                               {5, 2, 1, 1, 1, 1});
    const Tensor want = model->forward(ids);
    model->to(kBFloat16);
    const Tensor got = model->forward(ids);
    EXPECT_EQ(got.dtype(), kBFloat16);
    double scale = 0;
    for (float x : want.to_vector<float>()) scale = std::max(scale, static_cast<double>(std::abs(x)));
    EXPECT_TENSOR_NEAR(to(got, kFloat32), want, 0.0, 0.05 * scale);
  }
}

}  // namespace
}  // namespace tg::test
