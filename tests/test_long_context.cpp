// Long sequences (issue 53): a packed row of 350,000 tokens keeps its documents apart (positions,
// the band, the chunked loss: no cap, no int32 overflow) with checkpointing, offload and the tiled
// MLP on, on the CPU and the GPU; the memory plan (train/memory_estimate.h) for long sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/activation_offload.h"
#include "data/dataset.h"
#include "nn/init.h"
#include "nn/mlp.h"
#include "nn/models/llama.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "test_support.h"
#include "testing/testing.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace tg {
namespace {

// max |got - want| <= tol x max |want|, in float64.
void expect_close_to_scale(const Tensor& got, const Tensor& want, double tol) {
  const std::vector<double> g = to(got, kFloat64).to_vector<double>(), w = to(want, kFloat64).to_vector<double>();
  ASSERT_EQ(g.size(), w.size());
  double diff = 0, scale = 0;
  for (size_t j = 0; j < w.size(); ++j) diff = std::max(diff, std::abs(g[j] - w[j])), scale = std::max(scale, std::abs(w[j]));
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(diff, tol * scale);
}

// One row of 350,000 tokens, 1,400 documents of 250: its loss and LoRA gradients are those of the
// documents one at a time, each weighted by its targets (`tol`: of the loss, and of each gradient's
// largest value). On the GPU a bf16 base (the flash kernels' band), head dim 32.
void expect_packed_row_as_its_documents(Device dev, DType dtype, int64_t hidden, double tol) {
  constexpr int64_t kDocs = 1400, kLength = 250, kT = kDocs * kLength;
  Generator gen(53);
  nn::LlamaConfig c;
  c.vocab_size = 37, c.hidden_size = hidden, c.intermediate_size = 2 * hidden, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.max_position_embeddings = kLength;
  nn::LlamaForCausalLM model(c, gen);
  model.to(dtype);
  peft::apply_lora(model, {.r = 2, .target_modules = {"q_proj", "v_proj", "gate_proj", "down_proj"}}, gen);
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.05, gen);
  model.to(dev);
  std::vector<std::vector<int32_t>> docs(kDocs);
  const std::vector<int64_t> all = randint(0, 37, {kT}, gen, {kInt64}).to_vector<int64_t>();
  for (int64_t i = 0; i < kT; ++i) docs[static_cast<size_t>(i / kLength)].push_back(static_cast<int32_t>(all[static_cast<size_t>(i)]));
  const data::SequenceDataset rows(data::corpus_from_examples(docs), kT, data::Layout::PackSeparate);
  ASSERT_EQ(rows.rows(), 1);
  const data::Batch b = rows.rows_batch(0, 1, dev);
  EXPECT_EQ(to(b.position_ids, Device::cpu()).to_vector<int64_t>().back(), kLength - 1);

  model.gradient_checkpointing_enable({.offload_activations = true});
  nn::tile_mlps(model, 4096);
  Tensor packed = model.loss(b.ids, b.labels, b.position_ids);
  packed.backward();
  std::vector<Tensor> packed_grads;
  for (const Tensor& p : model.trainable_parameters()) packed_grads.push_back(to(p.grad(), Device::cpu()));

  model.zero_grad();
  double alone = 0;
  for (const auto& d : docs) {
    const Tensor ids = from_vector(std::vector<int64_t>(d.begin(), d.end()), {1, kLength}, dev);
    Tensor loss = mul(model.loss(ids, ids), 1.0 / kDocs);  // every document has kLength - 1 targets
    loss.backward();
    alone += loss.item<double>();
  }
  EXPECT_NEAR(packed.item<double>(), alone, tol * alone);
  const auto names = model.named_trainable_parameters();
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i].first);
    expect_close_to_scale(packed_grads[i], to(names[i].second.grad(), Device::cpu()), tol);
  }
}

TEST(LongContext, PackedDocumentsAt350kTokensKeepTheirBoundaries) {
  expect_packed_row_as_its_documents(Device::cpu(), kFloat32, 16, 1e-4);
}

TEST(LongContextCuda, PackedDocumentsAt350kTokensKeepTheirBoundaries) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  expect_packed_row_as_its_documents(Device::cuda(), kBFloat16, 64, 2e-2);
}

// A row longer than the flash kernels' grid reaches: a tg::Error naming the limit and the length,
// not CUDA's launch failure.
TEST(LongContextCuda, ARowBeyondTheFlashKernelsReachIsRefusedByLength) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  const int64_t L = kCudaAttentionMaxSeq + 1;
  const Tensor q = zeros({1, 1, L, 32}, {.dtype = kBFloat16, .device = Device::cuda()});
  EXPECT_ERROR_HAS(banded_causal_attention(q, q, q, Tensor(), 4096), "scaled_dot_product_attention (CUDA)",
                   "at most 4194240 tokens", "got 4194241 queries");
  const Tensor fits = zeros({1, 1, 4096, 32}, {.dtype = kBFloat16, .device = Device::cuda()});
  EXPECT_EQ(banded_causal_attention(fits, fits, fits, Tensor(), 128).shape(), fits.shape());
}

// Offloaded activations the host cannot hold: refused when the Trainer is made (before loading data
// to the device or a step), naming the option and the way out; offload without checkpointing too.
TEST(LongContext, OffloadBeyondTheHostsMemoryIsRefusedBeforeTheFirstStep) {
  Generator gen(54);
  nn::LlamaConfig c;
  c.vocab_size = 37, c.hidden_size = 1024, c.intermediate_size = 64, c.num_hidden_layers = 2;
  c.num_attention_heads = 8, c.max_position_embeddings = 512;
  auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
  peft::apply_lora(*model, {.target_modules = {"q_proj"}}, gen);
  auto data = std::make_shared<data::SequenceDataset>(data::corpus_from_examples({std::vector<int32_t>(1025, 1)}), 512,
                                                      data::Layout::Pack);
  test::TempDir dir;
  // 2^17 rows of 512 tokens: their ids fit in 1.1 GB, their checkpoints take 512 GiB.
  train::TrainingArguments args{.output_dir = dir / "out", .max_steps = 1, .per_device_train_batch_size = int64_t{1} << 17,
                                .gradient_checkpointing = true,
                                .gradient_checkpointing_kwargs = {.offload_activations = true}, .use_cpu = true};
  ASSERT_GT(available_memory(Device::cpu()), 0u) << "no /proc/meminfo: the check cannot run";
  EXPECT_ERROR_HAS(train::Trainer(model, data, args), "gradient_checkpointing_kwargs.offload_activations", "2 layers",
                   "512 GiB of host memory", "lower per_device_train_batch_size");
  args.gradient_checkpointing = false;
  EXPECT_ERROR_HAS(args.validate(), "gradient_checkpointing_kwargs.offload_activations", "needs gradient_checkpointing");
}

// ---- the memory plan ----

train::ModelSizes llama3_8b() {
  return {.hidden = 4096, .layers = 32, .intermediate = 14336, .vocab = 128256, .q_width = 4096, .kv_width = 1024};
}

std::vector<train::WeightShape> llama3_8b_weights() {
  std::vector<train::WeightShape> w = {{"model.embed_tokens.weight", {128256, 4096}}, {"lm_head.weight", {128256, 4096}}};
  for (int l = 0; l < 32; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.o_proj"}) w.push_back({p + n + ".weight", {4096, 4096}});
    for (const char* n : {"self_attn.k_proj", "self_attn.v_proj"}) w.push_back({p + n + ".weight", {1024, 4096}});
    for (const char* n : {"mlp.gate_proj", "mlp.up_proj"}) w.push_back({p + n + ".weight", {14336, 4096}});
    w.push_back({p + "mlp.down_proj.weight", {4096, 14336}});
  }
  return w;
}

// A mixture's expert weights, fused ([E, out, in]) or as MXFP4 blocks (two values a byte), count
// as their values: in the model's dtype, or in NF4 with load_in_4bit (which quantises them).
TEST(MemoryPlan, ExpertWeightsCountAsTheirValuesIn4BitToo) {
  const int64_t values = int64_t{32} * 1024 * 512;
  const std::vector<train::WeightShape> fused = {{"model.layers.0.mlp.experts.gate_up_proj", {32, 1024, 512}}};
  const std::vector<train::WeightShape> mxfp4 = {{"model.layers.0.mlp.experts.gate_up_proj_blocks", {32, 1024, 16, 16}},
                                                 {"model.layers.0.mlp.experts.gate_up_proj_scales", {32, 1024, 16}}};
  const train::ModelSizes sizes{.hidden = 512, .layers = 1, .intermediate = 512, .vocab = 8};
  for (const auto* w : {&fused, &mxfp4}) {
    train::MemoryEstimateOptions o{.dtype = kBFloat16};
    EXPECT_EQ(train::estimate_training_memory(*w, sizes, o).weights, 2 * values);
    o.load_in_4bit = true;
    EXPECT_EQ(train::estimate_training_memory(*w, sizes, o).weights, static_cast<int64_t>(0.52 * values));
  }
}

TEST(MemoryPlan, OffloadAndTilingTakeTheirSharesOffTheGpu) {
  const auto w = llama3_8b_weights();
  train::MemoryEstimateOptions o{.dtype = kBFloat16, .load_in_4bit = true, .lora_r = 16, .lora_targets = {"all-linear"},
                                 .batch = 1, .seq = 131072, .gradient_checkpointing = true};
  const train::MemoryEstimate plain = train::estimate_training_memory(w, llama3_8b(), o);
  o.offload_activations = true;
  const train::MemoryEstimate offloaded = train::estimate_training_memory(w, llama3_8b(), o);
  o.mlp_chunk_tokens = 8192;
  const train::MemoryEstimate tiled = train::estimate_training_memory(w, llama3_8b(), o);
  const int64_t checkpoint = int64_t{131072} * 4096 * 2;  // one layer's [T, d] bf16 input
  EXPECT_EQ(plain.host, 0);
  EXPECT_EQ(offloaded.host, 32 * checkpoint) << "every layer's input in host memory";
  EXPECT_EQ(plain.activations - offloaded.activations, 30 * checkpoint) << "two stay on the GPU";
  EXPECT_EQ(offloaded.largest, int64_t{131072} * 14336 * 2);
  EXPECT_EQ(offloaded.largest_what, "the MLP's [131072, 14336] intermediates");
  EXPECT_EQ(tiled.largest, int64_t{256} << 20) << "tiled, the loss's chunk of logits is the largest";
  EXPECT_EQ(tiled.largest_what, "the loss's chunk of logits");
  EXPECT_LE(tiled.activations, offloaded.activations - 3 * (int64_t{131072 - 8192} * 14336 * 2))
      << "gate, up and their product for a chunk, not the whole sequence";
  EXPECT_EQ(tiled.weights, plain.weights);
  for (const char* part : {"offloaded activations in host memory", "the largest intermediate"})
    EXPECT_NE(tiled.str().find(part), std::string::npos) << tiled.str();
}

TEST(MemoryPlan, TheLongestSequenceThatFits) {
  const auto w = llama3_8b_weights();
  train::MemoryEstimateOptions o{.dtype = kBFloat16, .load_in_4bit = true, .lora_r = 16, .lora_targets = {"all-linear"},
                                 .batch = 1, .seq = 1, .gradient_checkpointing = true, .offload_activations = true,
                                 .mlp_chunk_tokens = 8192};
  const int64_t budget = int64_t{80} << 30;
  const int64_t longest = train::longest_fitting_seq(w, llama3_8b(), o, budget);
  ASSERT_GT(longest, 1);
  o.seq = longest;
  EXPECT_LE(train::estimate_training_memory(w, llama3_8b(), o).total(), budget);
  o.seq = longest + 1;
  EXPECT_GT(train::estimate_training_memory(w, llama3_8b(), o).total(), budget);
  EXPECT_EQ(train::longest_fitting_seq(w, llama3_8b(), o, 1 << 20), 0) << "the weights alone exceed 1 MiB";
}

}  // namespace
}  // namespace tg
