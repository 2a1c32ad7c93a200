// nn::RotaryEmbedding's yarn and longrope tables (issue 34) against numbers computed apart from
// tapegrad: a float32 emulation of transformers 5's _compute_yarn_parameters /
// _compute_longrope_parameters in plain Python (tests/fixtures/hf/rope_reference.py prints them).
// tests/fixtures/hf's llama_yarn and phi3_longrope fixtures check the whole models against
// transformers itself.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/rotary.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using nn::RopeScaling;
using nn::RotaryEmbedding;

// Row t of a [T, dim] table's first half (the second repeats it).
std::vector<float> row(const Tensor& table, int64_t t) {
  const int64_t half = table.shape()[1] / 2;
  std::vector<float> all = contiguous(slice(table, 0, t, t + 1)).to_vector<float>();
  EXPECT_EQ(std::vector<float>(all.begin(), all.begin() + half), std::vector<float>(all.begin() + half, all.end()));
  return std::vector<float>(all.begin(), all.begin() + half);
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << "frequency " << i;
}

TEST(Rotary, YarnIsTransformersFrequenciesAndScale) {
  // head_dim 16, theta 1e4, factor 4 over 32 pre-training positions: the ramp spans dims 0..2.
  RopeScaling s{.rope_type = "yarn", .factor = 4.0, .original_max_position_embeddings = 32};
  RotaryEmbedding r(16, 128, 1e4, s);
  expect_near(row(r.cos, 1), {0.615204096, 1.11646283, 1.1382736, 1.13859391, 1.13862586, 1.13862908, 1.13862932,
                              1.13862944});
  expect_near(row(r.sin, 37), {-0.732751429, 0.97590059, 0.90933311, 0.328331947, 0.105173096, 0.0333013833,
                               0.0105321715, 0.00333060813});
  expect_near(row(r.cos, 127), {0.264570922, 1.13804054, -1.13799417, 0.611344457, 1.08171952, 1.13289523,
                                1.13805556, 1.13857198});
  // factor null: max_position_embeddings / original_max_position_embeddings, the same 4.
  s.factor = 0;
  RotaryEmbedding derived(16, 128, 1e4, s);
  EXPECT_TENSOR_EQ(derived.cos, r.cos);
  // An explicit attention_factor replaces 0.1 ln(factor) + 1; DeepSeek's equal mscales make it 1.
  s.factor = 4, s.attention_factor = 1.0;
  const float unscaled = row(RotaryEmbedding(16, 128, 1e4, s).cos, 1)[0];
  s.attention_factor = 0, s.mscale = s.mscale_all_dim = 0.707;
  EXPECT_EQ(row(RotaryEmbedding(16, 128, 1e4, s).cos, 1)[0], unscaled);
  EXPECT_NEAR(unscaled * (0.1 * std::log(4.0) + 1), row(r.cos, 1)[0], 1e-6);
}

TEST(Rotary, YarnAtQwenScale) {
  // Qwen2.5's recommended long-context setting: theta 1e6, head_dim 128, factor 4 over 32768.
  RotaryEmbedding r(128, 5001, 1e6, {.rope_type = "yarn", .factor = 4.0, .original_max_position_embeddings = 32768});
  const std::vector<float> c = row(r.cos, 5000);
  // Dims 22..41: the ramp's ends and a middle one.
  EXPECT_NEAR(c[22], 0.882436454, 2e-5);
  EXPECT_NEAR(c[30], 0.651738644, 2e-5);
  EXPECT_NEAR(c[41], 1.12041104, 2e-5);
  EXPECT_NEAR(c[63], 1.13862813, 2e-6);
}

TEST(Rotary, LongropeSwitchesToTheLongFactorsPastThePretrainingContext) {
  RopeScaling s{.rope_type = "longrope",
                .factor = 0,  // 128 / 32
                .original_max_position_embeddings = 32,
                .short_factor = {1.0, 1.05, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0},
                .long_factor = {1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0}};
  RotaryEmbedding r(16, 128, 1e4, s);  // attention factor sqrt(1 + ln 4 / ln 32)
  expect_near(row(r.cos, 31), {1.08233774, -1.17858231, -1.12187457, 0.862446785, 1.1610769, 1.18179488, 1.18312502,
                               1.18320966});
  expect_near(row(r.sin_long, 100), {-0.599139929, 0.933643758, -1.13461459, 0.840975463, 0.14751713, 0.0233838391,
                                     0.00493005197, 0.00116926793});
  EXPECT_EQ(r.cos.shape()[0], 32);
  // A sequence of 32 uses the short tables, one of 33 the long ones, from position 0.
  EXPECT_TRUE(r.cos_sin(32).first.shares_storage_with(r.cos));
  EXPECT_TRUE(r.cos_sin(33).first.shares_storage_with(r.cos_long));
  EXPECT_ERROR_HAS(RotaryEmbedding(16, 128, 1e4, {.rope_type = "longrope", .original_max_position_embeddings = 32,
                                                  .short_factor = {1.0}, .long_factor = s.long_factor}),
                   "short_factor has 1 numbers", "8");
}

TEST(Rotary, PartialRotaryTablesCoverThePart) {
  RotaryEmbedding r(16, 8, 1e4, {.partial_rotary_factor = 0.75});
  EXPECT_EQ(r.cos.shape(), Shape({8, 12}));
  EXPECT_ERROR_HAS(RotaryEmbedding(16, 8, 1e4, {.partial_rotary_factor = 0.4375}), "int(head_dim 16",
                   "must be even");
}

}  // namespace
}  // namespace tg::test
