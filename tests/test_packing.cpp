// Packed rows without cross-talk (data::Layout::PackSeparate, CausalLM's position_ids): every
// family computes each document of a packed row as if it were alone (its hidden states, and a
// packed batch's loss and every gradient those of its documents alone, weighted by their target
// tokens), on the CPU and, with the bf16 flash kernels, on a GPU (skipped without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "data/dataset.h"
#include "nn/models/architecture.h"
#include "nn/models/gemma.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "nn/models/olmo2.h"
#include "nn/models/phi3.h"
#include "nn/models/smollm3.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

struct Family {
  std::string name;
  std::function<std::shared_ptr<nn::CausalLM>(Generator&)> make;
};

// Small models with what sets each family apart: grouped-query heads, Qwen3's q / k norms and
// biases, Mistral's sliding window (shorter than the documents), Gemma 2's soft-capping and
// sliding layers, Gemma 3's local RoPE, SmolLM3's NoPE layers, OLMo 2's norms after the branches,
// Phi-3's fused projections, GPT-2's position embedding.
std::vector<Family> families() {
  auto llama = [](auto edit) {
    return [edit](Generator& gen) {
      nn::LlamaConfig c = nn::LlamaConfig::tiny();
      c.num_hidden_layers = 2;
      c.num_key_value_heads = 2;
      c.max_position_embeddings = 256;
      edit(c);
      return std::shared_ptr<nn::CausalLM>(c.architecture == "Phi3ForCausalLM"
                                               ? std::shared_ptr<nn::CausalLM>(std::make_shared<nn::Phi3ForCausalLM>(c, gen))
                                               : std::make_shared<nn::LlamaForCausalLM>(c, gen));
    };
  };
  auto gemma = [](bool gemma3) {
    return [gemma3](Generator& gen) {
      nn::GemmaConfig c;
      c.sliding_window = 5;
      c.max_position_embeddings = 256;
      if (gemma3) {
        c.architecture = "Gemma3ForCausalLM";
        c.qk_norm = true;
        c.rope_local_base_freq = 500;
      } else {
        c.attn_logit_softcapping = 50;
        c.final_logit_softcapping = 30;
      }
      return std::shared_ptr<nn::CausalLM>(std::make_shared<nn::GemmaForCausalLM>(c, gen));
    };
  };
  return {
      {"llama", llama([](nn::LlamaConfig&) {})},
      {"qwen3", llama([](nn::LlamaConfig& c) { c.qk_norm = true, c.attention_bias = true; })},
      {"mistral", llama([](nn::LlamaConfig& c) { c.sliding_window = 6; })},
      {"phi3", llama([](nn::LlamaConfig& c) { c.architecture = "Phi3ForCausalLM"; })},
      {"gemma2", gemma(false)},
      {"gemma3", gemma(true)},
      {"smollm3", [](Generator& gen) {
         // A NoPE layer sliding (window 5, shorter than the documents) and a RoPE one attending to all.
         nn::SmolLM3Config c;
         static_cast<nn::LlamaConfig&>(c) = nn::LlamaConfig::tiny();
         c.architecture = "SmolLM3ForCausalLM";
         c.num_hidden_layers = 2;
         c.num_key_value_heads = 2;
         c.max_position_embeddings = 256;
         c.no_rope_layer_interval = 2;
         c.use_sliding_window = true;
         c.sliding_window = 5;
         return std::shared_ptr<nn::CausalLM>(std::make_shared<nn::SmolLM3ForCausalLM>(c, gen));
       }},
      {"olmo2", [](Generator& gen) {
         nn::LlamaConfig c = nn::LlamaConfig::tiny();
         c.architecture = "Olmo2ForCausalLM";
         c.num_hidden_layers = 2;
         c.num_key_value_heads = 2;
         c.max_position_embeddings = 256;
         return std::shared_ptr<nn::CausalLM>(std::make_shared<nn::Olmo2ForCausalLM>(c, gen));
       }},
      {"gpt2", [](Generator& gen) {
         nn::GPT2Config c = nn::GPT2Config::tiny();
         c.n_positions = 256;
         return std::shared_ptr<nn::CausalLM>(std::make_shared<nn::GPT2LMHeadModel>(c, gen));
       }},
  };
}

// Documents of these lengths from random ids, in order.
std::vector<std::vector<int32_t>> documents(const std::vector<int>& lengths, Generator& gen) {
  std::vector<std::vector<int32_t>> docs;
  for (int n : lengths) {
    docs.emplace_back();
    for (int64_t id : randint(0, 250, {n}, gen, {kInt64}).to_vector<int64_t>()) docs.back().push_back(static_cast<int32_t>(id));
  }
  return docs;
}

Tensor ids_of(const std::vector<int32_t>& doc, Device device) {
  return from_vector(std::vector<int64_t>(doc.begin(), doc.end()), {1, static_cast<int64_t>(doc.size())}, device);
}

TEST(Packing, EachDocumentOfAPackedRowAsIfAlone) {
  // Two rows of 30 tokens: documents of 7, 12 and 4 tokens then padding, and of 16 and 14.
  Generator gen(1);
  const std::vector<std::vector<int>> rows = {{7, 12, 4}, {16, 14}};
  const int64_t T = 30;
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    auto model = f.make(gen);
    NoGradGuard no_grad;
    std::vector<int64_t> ids, pos;
    std::vector<std::vector<std::vector<int32_t>>> docs;
    for (const auto& lengths : rows) {
      docs.push_back(documents(lengths, gen));
      for (const auto& d : docs.back())
        for (size_t t = 0; t < d.size(); ++t) ids.push_back(d[t]), pos.push_back(static_cast<int64_t>(t));
      while (ids.size() % T) ids.push_back(0), pos.push_back(0);
    }
    const Tensor packed = model->hidden_states(from_vector(ids, {2, T}), from_vector(pos, {2, T}));
    for (int64_t r = 0; r < 2; ++r) {
      int64_t at = 0;
      for (const auto& d : docs[r]) {
        const int64_t n = static_cast<int64_t>(d.size());
        const Tensor alone = model->hidden_states(ids_of(d, Device::cpu()));
        EXPECT_TENSOR_NEAR(slice(slice(packed, 0, r, r + 1), 1, at, at + n), alone, 1e-5, 1e-5);
        at += n;
      }
    }
  }
}

// The loss and the gradients of every parameter: of a packed batch of PackSeparate rows, and of
// its documents one at a time, each weighted by its share of the target tokens.
struct LossAndGrads {
  double loss = 0;
  std::vector<Tensor> grads;
};

LossAndGrads packed_batch(nn::CausalLM& model, const data::Batch& b) {
  model.zero_grad();
  Tensor loss = model.loss(b.ids, b.labels, b.position_ids);
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (const Tensor& p : model.trainable_parameters()) out.grads.push_back(to(p.grad(), Device::cpu()));
  return out;
}

LossAndGrads one_at_a_time(nn::CausalLM& model, const std::vector<std::vector<int32_t>>& docs, Device device) {
  model.zero_grad();
  int64_t targets = 0;
  for (const auto& d : docs) targets += static_cast<int64_t>(d.size()) - 1;
  LossAndGrads out;
  for (const auto& d : docs) {
    const Tensor ids = ids_of(d, device);
    const double weight = static_cast<double>(d.size() - 1) / static_cast<double>(targets);
    Tensor loss = mul(model.loss(ids, ids), weight);
    loss.backward();
    out.loss += loss.item<double>();
  }
  for (const Tensor& p : model.trainable_parameters()) out.grads.push_back(to(p.grad(), Device::cpu()));
  return out;
}

void expect_same(const LossAndGrads& got, const LossAndGrads& want, double tol, const nn::CausalLM& model) {
  EXPECT_NEAR(got.loss, want.loss, tol * std::abs(want.loss));
  const auto names = model.named_trainable_parameters();
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    SCOPED_TRACE(names[i].first);
    EXPECT_TENSOR_NEAR(got.grads[i], want.grads[i], tol, tol);
  }
}

// max |got - want| over max |want|, for each gradient: bf16 activations round differently in a
// packed row's GEMMs than in each document's.
void expect_close(const LossAndGrads& got, const LossAndGrads& want, double tol, const nn::CausalLM& model) {
  EXPECT_NEAR(got.loss, want.loss, tol * std::abs(want.loss));
  const auto names = model.named_trainable_parameters();
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    const std::vector<double> g = to(got.grads[i], kFloat64).to_vector<double>(), w = to(want.grads[i], kFloat64).to_vector<double>();
    double diff = 0, scale = 0;
    for (size_t j = 0; j < w.size(); ++j) diff = std::max(diff, std::abs(g[j] - w[j])), scale = std::max(scale, std::abs(w[j]));
    EXPECT_GT(scale, 0.0) << names[i].first;
    EXPECT_LT(diff, tol * scale) << names[i].first;
  }
}

TEST(Packing, APackedBatchHasTheLossAndGradientsOfItsDocumentsAlone) {
  Generator gen(2);
  const auto docs = documents({9, 3, 17, 11, 6, 20, 2, 14, 8}, gen);
  const data::SequenceDataset rows(data::corpus_from_examples(docs), 24, data::Layout::PackSeparate);
  const data::Batch b = rows.rows_batch(0, rows.rows(), Device::cpu());
  ASSERT_EQ(rows.rows(), 4);  // 90 tokens in rows of 24
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    auto model = f.make(gen);
    expect_same(packed_batch(*model, b), one_at_a_time(*model, docs, Device::cpu()), 2e-5, *model);
  }
}

TEST(Packing, GradientCheckpointingKeepsThePositionIds) {
  // Each layer recomputed at backward sees the same position ids: bitwise the same gradients.
  Generator gen(6);
  const auto docs = documents({9, 3, 17, 11}, gen);
  const data::SequenceDataset rows(data::corpus_from_examples(docs), 20, data::Layout::PackSeparate);
  const data::Batch b = rows.rows_batch(0, rows.rows(), Device::cpu());
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    auto model = f.make(gen);
    const LossAndGrads plain = packed_batch(*model, b);
    model->gradient_checkpointing_enable();
    const LossAndGrads recomputed = packed_batch(*model, b);
    EXPECT_EQ(plain.loss, recomputed.loss);
    for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_TENSOR_EQ(recomputed.grads[i], plain.grads[i]);
  }
}

TEST(Packing, WithoutPositionIdsDocumentsSeeEachOther) {
  // The check above is not vacuous: the same rows without position ids (as Layout::Pack) differ.
  Generator gen(3);
  const auto docs = documents({9, 13}, gen);
  const data::SequenceDataset rows(data::corpus_from_examples(docs), 22, data::Layout::PackSeparate);
  const data::Batch b = rows.rows_batch(0, 1, Device::cpu());
  auto model = families()[0].make(gen);
  NoGradGuard no_grad;
  const double packed = model->loss(b.ids, b.labels, b.position_ids).item<double>();
  const double crossed = model->loss(b.ids, b.labels).item<double>();
  EXPECT_GT(std::abs(packed - crossed), 1e-4);
}

TEST(Packing, PositionIdsAreChecked) {
  Generator gen(4);
  auto model = families()[0].make(gen);
  const Tensor ids = zeros({2, 5}, {kInt64});
  EXPECT_ERROR_HAS(model->hidden_states(ids, zeros({2, 4}, {kInt64})), "LlamaModel", "position_ids must be [2, 5]");
  EXPECT_ERROR_HAS(model->hidden_states(ids, zeros({2, 5})), "position_ids must be int32 or int64", "float32");
  EXPECT_ERROR_HAS(model->hidden_states(ids, full({2, 5}, 256, {kInt64})), "position_ids hold 256, outside [0, 256)");
  EXPECT_ERROR_HAS(model->hidden_states(ids, full({2, 5}, -1, {kInt64})), "position_ids hold -1");
}

TEST(PackingCuda, APackedBatchHasTheLossAndGradientsOfItsDocumentsAloneOnTheGpu) {
  TG_REQUIRE_CUDA();
  // LoRA on a bfloat16 base on the GPU (float32 adapters, B drawn nonzero so every adapter has a
  // gradient): the banded flash kernels against the causal ones, document by document.
  Generator gen(5);
  const auto docs = documents({90, 31, 170, 113, 60, 201, 25, 140, 80}, gen);
  const data::SequenceDataset rows(data::corpus_from_examples(docs), 256, data::Layout::PackSeparate);
  const Device gpu = Device::cuda(0);
  const data::Batch b = rows.rows_batch(0, rows.rows(), gpu);
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    auto model = f.make(gen);
    model->to(kBFloat16);
    const std::vector<std::string> targets = model->architecture().lora_targets;  // phi3 has no peft default
    peft::apply_lora(*model, {.target_modules = targets.empty() ? std::vector<std::string>{peft::kAllLinear} : targets}, gen);
    {
      NoGradGuard no_grad;
      for (const auto& [name, p] : model->named_trainable_parameters())
        if (name.find("lora_B") != std::string::npos) copy_(p, mul(randn(p.shape(), gen), 0.02));
    }
    model->to(gpu);
    KernelTrace trace;
    const LossAndGrads packed = packed_batch(*model, b);
    if (f.name == "llama") EXPECT_TRUE(trace.contains("sdpa.flash_cuda") && !trace.contains("sdpa.composite"));
    expect_close(packed, one_at_a_time(*model, docs, gpu), 3e-2, *model);
  }
}

}  // namespace
}  // namespace tg
