// Op cases: matmul (2-D, batched, broadcast, vectors, transposed operands), linear and lora_linear.
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/matmul.h"
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
    {"linear_strided_x", {S{{6, 9}, S::Normal, 0, true, true}, S{{5, 9}}, S{{5}}},
     [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
    // x, weight, bias, lora_A [r, in], lora_B [out, r]: the harness freezes each in turn
    {"lora_linear", {S{{6, 9}}, S{{5, 9}}, S{{5}}, S{{3, 9}}, S{{5, 3}}},
     [](const Inputs& x) { return lora_linear(x[0], x[1], x[2], x[3], x[4], 2.0); }},
    {"lora_linear_3d_strided_x", {S{{2, 9, 4}, S::Normal, 0, true, true}, S{{4, 4}}, S{{2, 4}}, S{{4, 2}}},
     [](const Inputs& x) { return lora_linear(x[0], x[1], Tensor(), x[2], x[3], 0.5); }},
});

}  // namespace
}  // namespace tg::test
