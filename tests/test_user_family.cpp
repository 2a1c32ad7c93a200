// Issue 35: a family of the user's is one file and one registration (transformers'
// AutoModelForCausalLM.register). "Toy" is a two-layer family on the decoder stack (nn/models/decoder.h)
// with a difference of its own, Gemma's sandwich norms around Llama's plain RMSNorm and a GeGLU MLP:
// its config.json is read into a DecoderSpec and written back, and from_pretrained,
// save_pretrained, forward and generate reach it through the registry alone.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/factory.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/nn.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using Activation = nn::GatedMLPOptions::Activation;

// ---- the family: what a user writes ----

class ToyForCausalLM : public nn::DecoderForCausalLM {
 public:
  ToyForCausalLM(const nn::DecoderSpec& s, Generator& gen) : DecoderForCausalLM(s, gen) {}
  json::Value config_json() const override {
    const nn::DecoderSpec& s = model->spec;
    return sized_config_json()
        .set("hidden_act", s.mlp.activation == Activation::SiLU ? "silu" : "gelu_pytorch_tanh")
        .set("rope_theta", s.rope.theta);
  }
};

nn::ModelBuilder parse_toy(const nn::ConfigFields& f) {
  nn::DecoderSpec s;
  s.architecture = "ToyForCausalLM";
  s.family = "Toy";
  s.vocab_size = f.integer("vocab_size", 64);
  s.hidden_size = f.integer("hidden_size", 16);
  s.intermediate_size = f.integer("intermediate_size", 24);
  s.num_hidden_layers = f.integer("num_hidden_layers", 2, /*lo=*/0);  // 0 reaches DecoderSpec::validate
  s.num_attention_heads = f.integer("num_attention_heads", 4);
  s.max_position_embeddings = f.integer("max_position_embeddings", 32);
  s.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  s.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  s.attention.num_kv_heads = f.integer("num_key_value_heads", 2);
  s.attention.head_dim = f.integer("head_dim", 4);
  s.rope.theta = f.number("rope_theta", 10000.0);
  const std::string act = f.string("hidden_act", "gelu_pytorch_tanh");
  if (act != "silu" && act != "gelu_pytorch_tanh") f.unsupported("hidden_act", "wants \"silu\" or \"gelu_pytorch_tanh\"");
  s.mlp.activation = act == "silu" ? Activation::SiLU : Activation::GELUTanh;
  s.sandwich_norms = true;
  return nn::builder_of<ToyForCausalLM>(nn::validated(f, s));
}

const nn::Architecture kToy{.name = "ToyForCausalLM",
                            .model_type = "toy",
                            .base_prefix = "model.",
                            .embedding = "model.embed_tokens.weight",
                            .ignored_suffixes = {".rotary_emb.inv_freq"},
                            .lora_targets = {"q_proj", "v_proj"},
                            .parse = parse_toy};

// ---- the checks ----

class UserFamily : public testing::SeededTest {
 protected:
  void SetUp() override {
    SeededTest::SetUp();
    if (!nn::find_architecture("toy")) nn::register_architecture(kToy);
  }
};

std::string config_text() {
  return json::dump(json::Value::object()
                        .set("architectures", json::Value::array({"ToyForCausalLM"}))
                        .set("model_type", "toy")
                        .set("num_hidden_layers", 2)
                        .set("hidden_act", "silu"));
}

TEST_F(UserFamily, SavesLoadsRunsAndGeneratesThroughTheRegistry) {
  EXPECT_ERROR_HAS(nn::register_architecture(kToy), "is taken by ToyForCausalLM");
  const nn::ModelBuilder builder = nn::parse_pretrained_config(config_text());
  const nn::DecoderSpec spec = std::any_cast<nn::DecoderSpec>(builder.config);
  EXPECT_EQ(spec.mlp.activation, Activation::SiLU);
  const std::shared_ptr<nn::CausalLM> model = builder.build(gen);
  EXPECT_EQ(model->type_name(), "ToyForCausalLM");
  EXPECT_EQ(model->get_submodule("model.layers.1")->type_name(), "ToyDecoderLayer");
  EXPECT_EQ(model->state_dict().count("model.layers.1.post_feedforward_layernorm.weight"), 1u);
  EXPECT_TRUE(model->lm_head->weight.same(model->input_embeddings().weight)) << "tied";

  TempDir dir;
  const std::string folder = dir / "toy";
  nn::save_pretrained(*model, folder);
  const std::vector<uint8_t> bytes = io::read_file(folder + "/config.json");
  const json::Value written = json::parse(std::string(bytes.begin(), bytes.end()));
  EXPECT_EQ(written.at("model_type").as_string(), "toy");
  EXPECT_EQ(written.at("hidden_act").as_string(), "silu");

  const std::shared_ptr<nn::CausalLM> back = nn::from_pretrained(folder);
  EXPECT_EQ(back->architecture().name, "ToyForCausalLM");
  EXPECT_EQ(json::dump(back->config_json()), json::dump(model->config_json()));
  const Tensor ids = from_vector<int64_t>({1, 5, 2, 63, 0, 7, 3, 3, 9, 4, 11, 6}, {2, 6});
  EXPECT_TENSOR_EQ(back->forward(ids), model->forward(ids));
  const nn::GenerationConfig greedy{.max_new_tokens = 5};
  EXPECT_EQ(nn::generate(*back, {{1, 5, 2}}, greedy), nn::generate(*model, {{1, 5, 2}}, greedy));
}

TEST_F(UserFamily, ABadConfigIsAnErrorNamingTheFileAndField) {
  json::Value bad = json::parse(config_text());
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(json::dump(bad.set("hidden_act", "relu"))), "hidden_act");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(json::dump(bad.set("hidden_act", "silu").set("num_hidden_layers", 0))),
                   "config.json", "DecoderSpec", "num_hidden_layers must be positive, got 0");
}

}  // namespace
}  // namespace tg::test
