// nn::RotaryEmbedding's yarn and longrope tables (issue 34) against numbers computed apart from
// tapegrad: a float32 emulation of transformers 5's _compute_yarn_parameters /
// _compute_longrope_parameters in plain Python (tests/fixtures/hf/rope_reference.py prints them).
// tests/fixtures/hf's llama_yarn and phi3_longrope fixtures check the whole models against
// transformers itself.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/limits.h"
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

bool finite(const Tensor& table) {
  if (!table.defined()) return true;
  for (float v : table.to_vector<float>())
    if (!std::isfinite(v)) return false;
  return true;
}

// Every rope type with each field it reads at the edges of its range: refused with the field's
// name, or built with finite tables. Before, RotaryEmbedding took rope_theta 1e-300 (inf
// frequencies), yarn's beta_fast below beta_slow, longrope factors of 1e-300 (0 as a float32) or a
// derived attention factor over log(1), and made NaN tables the logits then carried.
TEST(Rotary, EveryRopeTypeAtEdgeValuesIsRefusedByNameOrFinite) {
  const std::vector<double> numbers = {-1, 0, 1e-310, 1e-300, 1e-40, 1e-7, 0.5, 1, 1 + 1e-15, 1.5, 2, 4, 32, 33, 1e6,
                                       1e38, 1e39, 1e300, DBL_MAX, INFINITY, NAN};
  const std::vector<double> sizes = {-1, 0, 1, 2, 15, 16, 17, 64, 65, 1e9, static_cast<double>(kMaxContext) + 1};
  const std::vector<std::string> number_fields = {"rope_theta", "factor", "low_freq_factor", "high_freq_factor",
                                                  "attention_factor", "beta_fast", "beta_slow", "mscale",
                                                  "mscale_all_dim", "short_factor", "long_factor",
                                                  "partial_rotary_factor"};
  const std::vector<std::string> size_fields = {"original_max_position_embeddings", "max_position_embeddings"};
  int built = 0, refused = 0;
  for (const char* type : {"default", "linear", "dynamic", "llama3", "yarn", "longrope"})
    for (const auto& [fields, values] : {std::pair{&number_fields, &numbers}, std::pair{&size_fields, &sizes}})
      for (const std::string& field : *fields)
        for (double v : *values) {
          SCOPED_TRACE(std::string(type) + " " + field + " = " + std::to_string(v));
          RopeScaling s;
          s.rope_type = type;
          s.factor = s.rope_type == "default" ? 1.0 : 4.0;
          s.original_max_position_embeddings = 16;
          s.short_factor = {1, 1.5, 2, 3};
          s.long_factor = {1, 2, 4, 8};
          double theta = 1e4;
          int64_t positions = 64;
          if (field == "rope_theta") theta = v;
          if (field == "factor") s.factor = v;
          if (field == "low_freq_factor") s.low_freq_factor = v;
          if (field == "high_freq_factor") s.high_freq_factor = v;
          if (field == "attention_factor") s.attention_factor = v;
          if (field == "beta_fast") s.beta_fast = v;
          if (field == "beta_slow") s.beta_slow = v;
          if (field == "mscale") s.mscale = v;
          if (field == "mscale_all_dim") s.mscale_all_dim = v;
          if (field == "short_factor") s.short_factor[1] = v;
          if (field == "long_factor") s.long_factor[2] = v;
          if (field == "partial_rotary_factor") s.partial_rotary_factor = v;
          if (field == "original_max_position_embeddings") s.original_max_position_embeddings = static_cast<int64_t>(v);
          if (field == "max_position_embeddings") positions = static_cast<int64_t>(v);
          try {
            RotaryEmbedding r(8, positions, theta, s);
            EXPECT_TRUE(finite(r.cos) && finite(r.sin) && finite(r.cos_long) && finite(r.sin_long));
            ++built;
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
            ++refused;
          }
        }
  EXPECT_GT(built, 500);
  EXPECT_GT(refused, 300);
}

}  // namespace
}  // namespace tg::test
