// Op-harness coverage (after ggml's show_test_coverage): every public function of ops/*.h has a
// registered case or an exemption below that says why and where it is tested instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/op_harness.h"

namespace tg::test {
namespace {

const std::string kOpsDir = (std::filesystem::path(TG_TESTS_DIR).parent_path() / "ops").string();

// Case-name prefixes that abbreviate the op they exercise.
const std::map<std::string, std::string> kCasePrefixes = {
    {"sdpa", "scaled_dot_product_attention"},
};

// Functions without a case, and why.
const std::map<std::string, std::string> kExempt = {
    // Inline spellings of add / sub / mul / div / neg, whose cases cover them.
    {"operator+", "alias"}, {"operator-", "alias"}, {"operator*", "alias"}, {"operator/", "alias"},
    // The optimizer's in-place update: no autograd node (test_optim.cpp, CPU and GPU).
    {"adamw_step_", "no gradient"},
    // The static KV cache's in-place write: no autograd node (test_cuda_graph.cpp, CPU and GPU).
    {"index_copy_", "no gradient"},
    // A MoE layer's grouping of its tokens by expert: integer outputs (test_moe_ops.cpp, CPU and GPU).
    {"sort_by_expert", "no gradient"},
    // Integer outputs or constant tables, nothing to differentiate (test_cuda.cpp, test_nn.cpp,
    // test_attention.cpp; RoPE frequencies: the HfFixtures of scaled RoPE).
    {"argmax", "no gradient"}, {"sample_categorical", "no gradient"}, {"causal_mask", "no gradient"}, {"banded_causal_mask", "no gradient"},
    {"rotary_cos_sin", "no gradient"},
    {"rotary_inv_freq", "no gradient"},
    // The harness itself casts every case's inputs between dtypes and devices (test_tensor.cpp,
    // test_mixed_precision.cpp test the op).
    {"to", "the harness casts"},
    // Detached rounded copies an op reads without autograd (test_tensor.cpp, CPU and GPU; the
    // LoRA cases of linear_group and lora_linear run it).
    {"to_packed", "no gradient"},
    // bitsandbytes' 4-bit format: bytes and tables, nothing to differentiate (test_nf4.cpp checks
    // them against the reference fixture, CPU and GPU; the linear_4bit case runs them).
    {"quantize_4bit", "no gradient"}, {"dequantize_4bit", "no gradient"}, {"dequantize_4bit_", "no gradient"},
    {"check_quant_state", "no gradient"}, {"dynamic_map_8bit", "no gradient"},
    // FP8 weights and activation tiles: bytes and multipliers (test_fp8.cpp checks them against a
    // float reference, CPU and GPU; the linear_fp8 case runs them).
    {"quantize_fp8", "no gradient"}, {"dequantize_fp8", "no gradient"}, {"dequantize_fp8_", "no gradient"},
    {"check_fp8_weight", "no gradient"}, {"quantize_fp8_activation", "no gradient"},
    // Quantised weights as lora_linear's frozen bases: constants (the linear_group_lora_over_fp8
    // and lora_linear_over_4bit cases run them, CPU and GPU).
    {"frozen_fp8", "no gradient"}, {"frozen_4bit", "no gradient"},
};

std::string op_of(const std::string& case_name, const std::vector<std::string>& functions) {
  for (const auto& [prefix, op] : kCasePrefixes)
    if (case_name == prefix || case_name.rfind(prefix + "_", 0) == 0) return op;
  return op_of_case(case_name, functions);
}

TEST(OpHarness, FindsThePublicFunctionsOfTheOpHeaders) {
  const std::vector<std::string> fns = public_op_functions(kOpsDir);
  for (const char* f : {"rms_norm", "layer_norm", "linear", "split", "operator+", "sum_to", "adamw_step_"})
    EXPECT_NE(std::find(fns.begin(), fns.end(), f), fns.end()) << f;
  // Kernel contracts, namespaces below tg and struct members are not op functions.
  for (const char* f : {"rms_norm_forward", "norm_rstd", "check_inputs", "AdamWParamStep"})
    EXPECT_EQ(std::find(fns.begin(), fns.end(), f), fns.end()) << f;
  EXPECT_EQ(op_of_case("log_softmax_last", fns), "log_softmax");
  EXPECT_EQ(op_of_case("silu_mul_strided", fns), "silu_mul");
  EXPECT_EQ(op_of_case("expand", fns), "expand");
  EXPECT_EQ(op_of_case("mean_all", fns), "mean");
}

TEST(OpHarness, EveryPublicOpHasACaseOrAnExemption) {
  const std::vector<std::string> fns = public_op_functions(kOpsDir);
  std::set<std::string> covered;
  for (const auto& c : op_cases()) {
    const std::string op = op_of(c.name, fns);
    EXPECT_FALSE(op.empty()) << "case " << c.name << " names no public op (ops/*.h): name it <op> or <op>_<what>";
    covered.insert(op);
  }
  for (const auto& f : fns) {
    const bool exempt = kExempt.count(f) > 0;
    EXPECT_TRUE(covered.count(f) || exempt) << f << " (ops/*.h) has no op case: register one with TG_OP_CASES "
                                            << "(tests/cases_*.cpp) or exempt it here, saying why";
    EXPECT_FALSE(covered.count(f) && exempt) << f << " has a case now: drop its exemption";
  }
  for (const auto& [f, why] : kExempt)
    EXPECT_NE(std::find(fns.begin(), fns.end(), f), fns.end()) << "exemption of " << f << " names no op";
}

}  // namespace
}  // namespace tg::test
