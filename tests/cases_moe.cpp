// Op cases: grouped_mm (the experts of a MoE layer: plain, with biases and LoRA, over a
// transposed weight, an expert without rows in each), grouped_mm_4bit (QLoRA's experts) and
// topk's values.
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "ops/cast.h"
#include "ops/grouped_mm.h"
#include "ops/moe_routing.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;
const std::vector<int64_t> kSizes = {3, 0, 4};  // 7 rows for 3 experts, the second without any

TG_OP_CASES({
    {"grouped_mm", {S{{7, 5}}, S{{3, 4, 5}}}, [](const Inputs& x) { return grouped_mm(x[0], x[1], kSizes); }},
    // gpt-oss's biases and [E, in, out] weight (a transposed view), peft's LoRA on it
    {"grouped_mm_bias_lora_transposed",
     {S{{7, 5}}, S{{3, 4, 5}, S::Normal, 0, true, true}, S{{3, 4}}, S{{3, 2, 5}}, S{{3, 4, 2}}},
     [](const Inputs& x) { return grouped_mm(x[0], x[1], kSizes, x[2], x[3], x[4], 0.5); }},
    {"grouped_mm_lora",
     {S{{7, 5}}, S{{3, 4, 5}}, S{{3, 2, 5}}, S{{3, 4, 2}}},
     [](const Inputs& x) {
       return grouped_mm(x[0], x[1], {0, 7, 0}, Tensor(), x[2], x[3], 2.0);
     }},
    // x, bias, LoRA; the 4-bit experts [4, 9] (a block of 32 values and a partial one each, double
    // quantised) are constants quantised on x's device, dequantised in x's dtype
    {"grouped_mm_4bit_bias_lora",
     {S{{7, 9}, S::Normal, 0, true, true}, S{{3, 4}}, S{{3, 2, 9}}, S{{3, 4, 2}}},
     [](const Inputs& x) {
       std::vector<QuantState4bit> w;
       for (int e = 0; e < 3; ++e) {
         std::vector<float> v(36);
         for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + e));
         w.push_back(quantize_4bit(to(from_vector(v, {4, 9}), x[0].device()), "nf4", true, 32));
       }
       return grouped_mm_4bit(x[0], w, kSizes, x[1], x[2], x[3], 0.5);
     }},
    {"topk", {S{{6, 9}}}, [](const Inputs& x) { return topk(x[0], 3).first; }},
    {"topk_all", {S{{2, 3, 4}}}, [](const Inputs& x) { return topk(x[0], 4).first; }},
});

}  // namespace
}  // namespace tg::test
