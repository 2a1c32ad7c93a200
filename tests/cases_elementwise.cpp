// Op cases: unary, scalar and binary elementwise ops (including broadcasting and strided inputs).
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/unary.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;
const S kOdd{{7, 33}};          // odd sizes, not a multiple of any vector width
const S kPos{{5, 19}, S::Positive};
const S kStrided{{6, 9}, S::Normal, 0, true, true};

TG_OP_CASES({
    {"neg", {kOdd}, [](const Inputs& x) { return neg(x[0]); }},
    {"exp", {kOdd}, [](const Inputs& x) { return exp(x[0]); }},
    {"log", {kPos}, [](const Inputs& x) { return log(x[0]); }},
    {"sqrt", {kPos}, [](const Inputs& x) { return sqrt(x[0]); }},
    {"rsqrt", {kPos}, [](const Inputs& x) { return rsqrt(x[0]); }},
    {"tanh", {kOdd}, [](const Inputs& x) { return tanh(x[0]); }},
    {"sigmoid", {kOdd}, [](const Inputs& x) { return sigmoid(x[0]); }},
    {"relu", {kOdd}, [](const Inputs& x) { return relu(x[0]); }},
    {"gelu_erf", {kOdd}, [](const Inputs& x) { return gelu(x[0]); }},
    {"gelu_tanh", {kOdd}, [](const Inputs& x) { return gelu(x[0], "tanh"); }},
    {"silu", {kOdd}, [](const Inputs& x) { return silu(x[0]); }},
    {"pow_2_5", {kPos}, [](const Inputs& x) { return pow(x[0], 2.5); }},
    {"pow_neg1", {kPos}, [](const Inputs& x) { return pow(x[0], -1.0); }},
    {"mul_add_div_sub_scalars", {kOdd}, [](const Inputs& x) { return (x[0] * 3.0 + 1.5) / 2.0 - 0.25; }},
    {"div_scalar_by_tensor", {kPos}, [](const Inputs& x) { return 2.0 / x[0]; }},
    {"silu_strided", {kStrided}, [](const Inputs& x) { return silu(x[0]); }},
    {"add", {kOdd, kOdd}, [](const Inputs& x) { return x[0] + x[1]; }},
    {"sub", {kOdd, kOdd}, [](const Inputs& x) { return x[0] - x[1]; }},
    {"mul", {kOdd, kOdd}, [](const Inputs& x) { return x[0] * x[1]; }},
    {"div", {kOdd, S{{7, 33}, S::Positive}},
     [](const Inputs& x) { return x[0] / x[1]; }},
    {"add_broadcast_row", {S{{4, 3, 17}}, S{{17}}}, [](const Inputs& x) { return x[0] + x[1]; }},
    {"mul_broadcast_both", {S{{4, 1, 5}}, S{{3, 1}}}, [](const Inputs& x) { return x[0] * x[1]; }},
    {"div_broadcast", {S{{3, 5}}, S{{3, 1}, S::Positive}}, [](const Inputs& x) { return x[0] / x[1]; }},
    {"mul_sub_strided", {kStrided, S{{6, 9}}}, [](const Inputs& x) { return x[0] * x[1] - x[0]; }},
    {"mul_same_input_twice", {kOdd}, [](const Inputs& x) { return x[0] * x[0] + x[0]; }},
});

}  // namespace
}  // namespace tg::test
