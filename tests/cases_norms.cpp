// Op cases: rms_norm, fused_add_rms_norm and layer_norm (odd widths, 3-D inputs, optional
// parameters, a strided input, and the fused op's two outputs each alone and together).
#include "ops/binary.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"
#include "ops/unary.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;
const S kX{{5, 37}};  // 37: not a multiple of any vector width
const S kW{{37}};
const S kX3{{2, 3, 17}};
const S kW3{{17}};
const S kStrided{{6, 9}, S::Normal, 0, true, true};

TG_OP_CASES({
    {"rms_norm", {kX, kW}, [](const Inputs& x) { return rms_norm(x[0], x[1]); }},
    {"rms_norm_no_weight", {kX}, [](const Inputs& x) { return rms_norm(x[0], Tensor()); }},
    {"rms_norm_3d", {kX3, kW3}, [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-6); }},
    {"rms_norm_strided_x", {kStrided, S{{9}}}, [](const Inputs& x) { return rms_norm(x[0], x[1]); }},
    {"rms_norm_width_1", {S{{4, 1}}, S{{1}}}, [](const Inputs& x) { return rms_norm(x[0], x[1], 0.5); }},
    {"layer_norm", {kX, kW, kW}, [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }},
    {"layer_norm_weight_only", {kX, kW}, [](const Inputs& x) { return layer_norm(x[0], x[1], Tensor()); }},
    {"layer_norm_no_params", {kX}, [](const Inputs& x) { return layer_norm(x[0], Tensor(), Tensor()); }},
    {"layer_norm_3d", {kX3, kW3, kW3}, [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }},
    {"layer_norm_strided_x", {kStrided, S{{9}}, S{{9}}},
     [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }},
    // Both outputs carry gradient: dx = dresidual = y-path gradient + 3 (the gradient of r).
    {"fused_add_rms_norm", {kX, kX, kW},
     [](const Inputs& x) {
       auto [y, r] = fused_add_rms_norm(x[0], x[1], x[2]);
       return y * 2.0 + r * 3.0;
     }},
    {"fused_add_rms_norm_y_only", {kX3, kX3, kW3},
     [](const Inputs& x) { return fused_add_rms_norm(x[0], x[1], x[2]).first; }},
    {"fused_add_rms_norm_r_only", {kX, kX, kW},
     [](const Inputs& x) { return fused_add_rms_norm(x[0], x[1], x[2]).second * 1.5; }},
    {"fused_add_rms_norm_no_weight", {kX, kX},
     [](const Inputs& x) {
       auto [y, r] = fused_add_rms_norm(x[0], x[1], Tensor());
       return y * r;
     }},
});

}  // namespace
}  // namespace tg::test
