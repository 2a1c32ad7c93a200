// Op cases: views, copies and reductions.
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;
const S k3d{{3, 4, 5}};

TG_OP_CASES({
    {"reshape", {k3d}, [](const Inputs& x) { return reshape(x[0], {4, -1}) * 2.0; }},
    {"reshape_copy", {S{{4, 6}, S::Normal, 0, true, true}}, [](const Inputs& x) { return reshape(x[0], {3, 8}) * 2.0; }},
    {"view", {k3d}, [](const Inputs& x) { return view(x[0], {5, -1}) * 2.0; }},
    {"flatten", {k3d}, [](const Inputs& x) { return flatten(x[0], 1) * 2.0; }},
    {"squeeze_unsqueeze", {S{{3, 1, 5}}}, [](const Inputs& x) { return unsqueeze(squeeze(x[0], 1), 0) * 2.0; }},
    {"unsqueeze", {S{{3, 5}}}, [](const Inputs& x) { return unsqueeze(x[0], -1) * 2.0; }},
    {"transpose", {k3d}, [](const Inputs& x) { return transpose(x[0], 0, 2) * 2.0; }},
    {"permute", {k3d}, [](const Inputs& x) { return permute(x[0], {2, 0, 1}) * 2.0; }},
    {"slice_step", {S{{9, 5}}}, [](const Inputs& x) { return slice(x[0], 0, 1, 8, 3) * 2.0; }},
    {"slice_negative", {S{{4, 11}}}, [](const Inputs& x) { return slice(x[0], -1, -7, -1) * 2.0; }},
    {"expand", {S{{3, 1}}}, [](const Inputs& x) { return expand(x[0], {2, 3, 4}) * 2.0; }},
    {"contiguous", {S{{5, 6}, S::Normal, 0, true, true}}, [](const Inputs& x) { return contiguous(x[0]) * 2.0; }},
    {"clone", {k3d}, [](const Inputs& x) { return clone(x[0]) * 2.0; }},
    {"cat", {S{{2, 3}}, S{{4, 3}}, S{{1, 3}}}, [](const Inputs& x) { return cat({x[0], x[1], x[2]}, 0) * 2.0; }},
    {"cat_last_dim", {S{{2, 3}}, S{{2, 5}}}, [](const Inputs& x) { return cat({x[0], x[1]}, -1) * 2.0; }},
    {"split_all_used", {S{{7, 4}}}, [](const Inputs& x) {
       auto p = split(x[0], 3, 0);
       return cat({p[2] * 2.0, p[0], p[1] * p[1]}, 0);
     }},
    {"split_one_used", {S{{4, 9}}}, [](const Inputs& x) { return split(x[0], {2, 3, 4}, 1)[1] * 2.0; }},
    {"sum_all", {k3d}, [](const Inputs& x) { return sum(x[0]); }},
    {"sum_dims", {k3d}, [](const Inputs& x) { return sum(x[0], {0, 2}); }},
    {"sum_keepdim", {k3d}, [](const Inputs& x) { return sum(x[0], {1}, true); }},
    {"sum_strided", {S{{6, 7}, S::Normal, 0, true, true}}, [](const Inputs& x) { return sum(x[0], {0}); }},
    {"mean_dims", {k3d}, [](const Inputs& x) { return mean(x[0], {-1}); }},
    {"mean_all", {k3d}, [](const Inputs& x) { return mean(x[0]); }},
    {"max_dim", {k3d}, [](const Inputs& x) { return max(x[0], 1); }},
    {"max_keepdim_last", {k3d}, [](const Inputs& x) { return max(x[0], -1, true); }},
    {"max_all", {k3d}, [](const Inputs& x) { return max(x[0]); }},
    {"sum_to", {k3d}, [](const Inputs& x) { return sum_to(x[0], {4, 1}); }},
});

}  // namespace
}  // namespace tg::test
