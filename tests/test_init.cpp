// nn::init's random fills (issue 34): filled in blocks on the pool's threads, they keep the values
// of one float64 draw of the whole tensor (the Philox + Box-Muller stream core/factory.h
// documents), scaled and rounded once, bit for bit, whatever the size, dtype or strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "core/detail/philox.h"
#include "core/factory.h"
#include "nn/init.h"
#include "nn/models/gemma.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "nn/models/phi3.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

// Element i of randn's stream from counter `first` of `seed`, one element at a time.
double normal_at(uint64_t seed, uint64_t first, int64_t i) {
  const Philox4 r = philox(seed, first + static_cast<uint64_t>(i / 4));
  const int pair = static_cast<int>(i % 4) / 2;
  const double u1 = (static_cast<double>(r.v[2 * pair] >> 8) + 1.0) / 16777216.0;
  const double u2 = static_cast<double>(r.v[2 * pair + 1] >> 8) / 16777216.0;
  const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
  return i % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
}

// The float64 values, rounded once into `dtype`, in `shape`.
Tensor rounded(std::vector<double> v, const Shape& shape, DType dtype) {
  return to(from_vector(v, shape), dtype);
}

// Over two of the fills' 4M-element blocks, a size that is not a multiple of 4.
const Shape kLarge{2049, 4097};

TEST(Init, NormalIsOneFloat64DrawOfTheWholeTensor) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(11);
    gen.set_state(11, 5);
    Tensor t = Tensor::empty(kLarge, {dtype});
    nn::init::normal_(t, 0.25, 0.02, gen);
    const int64_t n = t.numel();
    EXPECT_EQ(gen.offset(), 5 + static_cast<uint64_t>((n + 3) / 4));
    std::vector<double> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = normal_at(11, 5, i) * 0.02 + 0.25;
    EXPECT_TENSOR_EQ(t, rounded(want, kLarge, dtype));

    // Into a transposed view: the same values in its own row-major order.
    Generator again(11);
    again.set_state(11, 5);
    Tensor base = Tensor::empty({13, 7}, {dtype});
    nn::init::normal_(transpose(base, 0, 1), 0.25, 0.02, again);
    want.resize(7 * 13);
    EXPECT_TENSOR_EQ(transpose(base, 0, 1), rounded(want, {7, 13}, dtype));
  }
}

TEST(Init, UniformIsOneFloat64DrawOfTheWholeTensor) {
  Generator gen(3);
  Tensor t = Tensor::empty(kLarge, {kBFloat16});
  nn::init::uniform_(t, -0.5, 0.75, gen);
  const int64_t n = t.numel();
  EXPECT_EQ(gen.offset(), static_cast<uint64_t>((n + 3) / 4));
  std::vector<double> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] = -0.5 + 1.25 * static_cast<double>(uniform01(philox(3, static_cast<uint64_t>(i / 4)).v[i % 4]));
  EXPECT_TENSOR_EQ(t, rounded(want, kLarge, kBFloat16));
  EXPECT_ERROR_HAS(nn::init::uniform_(t, 1.0, 1.0, gen), "uniform_", "low < high");
}

TEST(Init, RandnIsItsDocumentedStream) {
  Generator gen(7);
  const Tensor r = randn({1001, 3}, gen, {kFloat64});
  std::vector<double> want(3003);
  for (int64_t i = 0; i < 3003; ++i) want[static_cast<size_t>(i)] = normal_at(7, 0, i);
  EXPECT_EQ(r.to_vector<double>(), want);
}

// FNV-1a over the bytes of every parameter and buffer, in state_dict order, and gen's offset after.
std::string digest(const nn::Module& model, const Generator& gen) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : model.state_dict()) {
    const Tensor c = contiguous(t);
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  char out[48];
  std::snprintf(out, sizeof out, "%016llx@%llu", static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(gen.offset()));
  return out;
}

// The models' constructors draw their layers' default init (kaiming_uniform_, the embedding's
// N(0, 1)) and then transformers' _init_weights over it; the first draws are only reserved now
// (ReserveDrawsGuard), and a tied head's draw too: the values of a seed are those of the full
// draws, as these digests, taken before that change, fix.
TEST(Init, SeededModelsKeepTheirValues) {
  nn::LlamaConfig llama = nn::LlamaConfig::tiny();
  llama.num_hidden_layers = 2;
  Generator g1(5);
  EXPECT_EQ(digest(nn::LlamaForCausalLM(llama, g1), g1), "eed84a9c111bc8ae@230400");
  llama.tie_word_embeddings = true;
  llama.attention_bias = llama.mlp_bias = true;
  Generator g2(6);
  EXPECT_EQ(digest(nn::LlamaForCausalLM(llama, g2), g2), "2c4afd5536d4ce59@231064");
  nn::LlamaConfig phi3 = nn::LlamaConfig::tiny();
  phi3.num_hidden_layers = 2;
  phi3.tie_word_embeddings = true;
  Generator g3(7);
  EXPECT_EQ(digest(nn::Phi3ForCausalLM(phi3, g3), g3), "e47104ecd69e2020@230400");
  Generator g4(8);
  EXPECT_EQ(digest(nn::GemmaForCausalLM(nn::GemmaConfig{}, g4), g4), "384da6ea19aa09ff@53248");
  nn::GPT2Config gpt2 = nn::GPT2Config::tiny();
  gpt2.n_layer = 2;
  Generator g5(9);
  EXPECT_EQ(digest(nn::GPT2LMHeadModel(gpt2, g5), g5), "703da9b7ab2fbefc@238144");
}

}  // namespace
}  // namespace tg::test
