// Op cases: matmul (2-D, batched, broadcast, vectors, transposed operands), linear, lora_linear,
// linear_group, linear_4bit and linear_fp8, LoRA over FP8 and 4-bit frozen bases.
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/matmul.h"
#include "ops/nf4.h"
#include "ops/shape.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;

TG_OP_CASES({
    {"matmul_2d", {S{{5, 7}}, S{{7, 3}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_transposed_operands", {S{{5, 7}, S::Normal, 0, true, true}, S{{7, 3}, S::Normal, 0, true, true}},
     [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_batched", {S{{2, 3, 4, 5}}, S{{2, 3, 5, 6}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_broadcast_batch", {S{{3, 4, 5}}, S{{5, 2}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_broadcast_both", {S{{2, 1, 4, 5}}, S{{3, 5, 2}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_vector_right", {S{{4, 5}}, S{{5}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"matmul_vector_left", {S{{5}}, S{{2, 5, 3}}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
    {"linear", {S{{6, 9}}, S{{5, 9}}, S{{5}}}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
    {"linear_no_bias_3d", {S{{2, 3, 9}}, S{{4, 9}}}, [](const Inputs& x) { return linear(x[0], x[1]); }},
    // x and bias; the 4-bit weight [5, 9] (two blocks of 32 values, double quantised) is a
    // constant quantised on x's device, dequantised in x's dtype (float64 for the gradcheck)
    {"linear_4bit", {S{{2, 3, 9}, S::Normal, 0, true, true}, S{{5}}},
     [](const Inputs& x) {
       std::vector<float> w(45);
       for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
       const QuantState4bit q = quantize_4bit(to(from_vector(w, {5, 9}), x[0].device()), "nf4", true, 32);
       return linear_4bit(x[0], q, x[1]);
     }},
    // x and bias; the FP8 weight [5, 130] (two 128x128 blocks, the second partial) is a constant
    // quantised on x's device, dequantised in x's dtype
    {"linear_fp8", {S{{2, 3, 130}, S::Normal, 0, true, true}, S{{5}}},
     [](const Inputs& x) {
       std::vector<float> w(5 * 130);
       for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)));
       return linear_fp8(x[0], quantize_fp8(to(from_vector(w, {5, 130}), x[0].device())), x[1]);
     }},
    // LoRA over frozen bases in the op: two parts over FP8 weights ([5, 130] and [4, 130], the
    // second with a bias), and one over a 4-bit weight; the bases are constants quantised on x's
    // device, computing in x's dtype; x, the adapters and the bias train
    {"linear_group_lora_over_fp8",
     {S{{2, 3, 130}, S::Normal, 0, true, true}, S{{2, 130}}, S{{5, 2}}, S{{3, 130}}, S{{4, 3}}, S{{4}}},
     [](const Inputs& x) {
       auto fp8 = [&](int64_t out, double f) {
         std::vector<float> w(out * 130);
         for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::cos(f * static_cast<double>(i)));
         return frozen_fp8(quantize_fp8(to(from_vector(w, {out, 130}), x[0].device())), x[0].dtype());
       };
       LinearSpec a{Tensor(), Tensor(), x[1], x[2], 2.0}, b{Tensor(), x[5], x[3], x[4], 0.5};
       a.frozen = fp8(5, 0.3), b.frozen = fp8(4, 0.7);
       auto y = linear_group(x[0], {a, b});
       return cat({y[0], y[1]}, -1);
     },
     1e-5, 1e-7, 1e-4, 0.1},  // bf16: sums of 130 products of N(0, 1) values, cancelling to ~0.1 here and there
    {"lora_linear_over_4bit", {S{{6, 9}}, S{{5}}, S{{3, 9}}, S{{5, 3}}},
     [](const Inputs& x) {
       std::vector<float> w(45);
       for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.4 * static_cast<double>(i)));
       LinearSpec spec{Tensor(), x[1], x[2], x[3], 1.5};
       spec.frozen = frozen_4bit(quantize_4bit(to(from_vector(w, {5, 9}), x[0].device()), "nf4", true, 32), x[0].dtype());
       return linear_group(x[0], {spec})[0];
     }},
    {"linear_strided_x", {S{{6, 9}, S::Normal, 0, true, true}, S{{5, 9}}, S{{5}}},
     [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
    // x, weight, bias, lora_A [r, in], lora_B [out, r]: the harness freezes each in turn
    {"lora_linear", {S{{6, 9}}, S{{5, 9}}, S{{5}}, S{{3, 9}}, S{{5, 3}}},
     [](const Inputs& x) { return lora_linear(x[0], x[1], x[2], x[3], x[4], 2.0); }},
    {"lora_linear_3d_strided_x", {S{{2, 9, 4}, S::Normal, 0, true, true}, S{{4, 4}}, S{{2, 4}}, S{{4, 2}}},
     [](const Inputs& x) { return lora_linear(x[0], x[1], Tensor(), x[2], x[3], 0.5); }},
    // q / k / v: two LoRA parts of other scalings and widths, a plain one with a bias; the outputs
    // (column views of one buffer) joined so every gradient flows
    {"linear_group_lora",
     {S{{2, 3, 8}}, S{{8, 8}}, S{{2, 8}}, S{{8, 2}}, S{{4, 8}}, S{{3, 8}}, S{{4, 3}}, S{{4, 8}}, S{{4}}},
     [](const Inputs& x) {
       auto y = linear_group(x[0], {{x[1], Tensor(), x[2], x[3], 2.0}, {x[4], Tensor(), x[5], x[6], 0.5},
                                    {x[7], x[8]}});
       return cat({y[0], y[1], y[2]}, -1);
     }},
    // gate / up: two plain bias-free parts; and two LoRA parts of one scaling (one dA product)
    {"linear_group_plain", {S{{5, 6}}, S{{7, 6}}, S{{3, 6}}},
     [](const Inputs& x) {
       auto y = linear_group(x[0], {{x[1]}, {x[2]}});
       return cat({y[0], mul(y[1], y[1])}, -1);
     }},
    {"linear_group_same_scaling", {S{{4, 6}}, S{{5, 6}}, S{{2, 6}}, S{{5, 2}}, S{{3, 6}}, S{{2, 6}}, S{{3, 2}}},
     [](const Inputs& x) {
       auto y = linear_group(x[0], {{x[1], Tensor(), x[2], x[3], 1.5}, {x[4], Tensor(), x[5], x[6], 1.5}});
       return cat({y[0], y[1]}, -1);
     }},
});

}  // namespace
}  // namespace tg::test
