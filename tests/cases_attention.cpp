// Op cases: scaled_dot_product_attention, banded_causal_attention, apply_rotary and apply_rotary_pos_emb. On the CPU these run the fused kernel (float64
// gradcheck, and the harness freezes q, k and v in turn); on a GPU they compare the CUDA
// flash kernels (bf16, head dims 32 / 64 / 128) or the composition against it. Odd sizes (L = 7, E = 5) so no vector width divides a row; L = 70
// spans three query blocks of the CPU kernel.
#include "core/factory.h"
#include "ops/attention.h"
#include "ops/apply_rotary.h"
#include "ops/binary.h"
#include "ops/shape.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;

TG_OP_CASES({
    {"sdpa_causal", {S{{2, 3, 7, 5}}, S{{2, 3, 7, 5}}, S{{2, 3, 7, 5}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
    {"sdpa_full", {S{{2, 3, 7, 5}}, S{{2, 3, 7, 5}}, S{{2, 3, 7, 5}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }},
    // more keys than queries and a value width other than head_dim, one leading dim
    {"sdpa_full_rect", {S{{3, 7, 5}}, S{{3, 9, 5}}, S{{3, 9, 4}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }},
    // causal with S > L (the last keys are never seen) and with S < L (late queries see all)
    {"sdpa_causal_more_keys", {S{{2, 7, 5}}, S{{2, 9, 5}}, S{{2, 9, 3}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
    {"sdpa_causal_fewer_keys", {S{{2, 9, 5}}, S{{2, 4, 5}}, S{{2, 4, 5}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
    {"sdpa_causal_blocks", {S{{1, 2, 70, 4}}, S{{1, 2, 70, 4}}, S{{1, 2, 70, 3}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
    {"sdpa_scale_2d", {S{{6, 5}}, S{{6, 5}}, S{{6, 5}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true, 0.7); }},
    // transposed (non-unit last stride) inputs, copied by the op
    {"sdpa_strided", {S{{2, 7, 5}, S::Normal, 0, true, true}, S{{2, 7, 5}}, S{{2, 7, 5}, S::Normal, 0, true, true}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
    // heads split from [B, T, H, hd] projections: read in place, gradients in that layout
    {"sdpa_head_views", {S{{2, 7, 3, 5}}, S{{2, 7, 3, 5}}, S{{2, 7, 3, 5}}},
     [](const Inputs& x) {
       Tensor a = scaled_dot_product_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2), true);
       return reshape(transpose(a, 1, 2), {2, 7, 15});
     }},

    // grouped-query heads (2 query heads per kv head): dk / dv summed over each group in the kernel
    {"sdpa_gqa", {S{{2, 4, 9, 6}}, S{{2, 2, 9, 6}}, S{{2, 2, 9, 6}}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], true, std::nullopt, 0.0, default_generator(), true);
     }},
    // head dims the CUDA flash kernels take (bf16 there), 3-D and 4-D (tests/test_attention_cuda.cpp
    // covers many tiles; gradcheck here costs 2 forwards per element)
    {"sdpa_flash_shapes_gqa", {S{{1, 4, 20, 32}}, S{{1, 2, 20, 32}}, S{{1, 2, 20, 32}}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], true, std::nullopt, 0.0, default_generator(), true);
     }},
    {"sdpa_flash_shapes_3d", {S{{1, 17, 64}}, S{{1, 20, 64}}, S{{1, 20, 64}}},
     [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }},

    // attn_mask (bool, true: attend): per batch and query [2, 1, 7, 9] over 3 heads, more keys
    // than queries; broadcast [6, 6] under grouped-query heads; [7, 1] (one bit per query) leaves
    // some rows without any key, which give zeros (the composition on a GPU)
    {"sdpa_mask", {S{{2, 3, 7, 5}}, S{{2, 3, 9, 5}}, S{{2, 3, 9, 4}}, S{{2, 1, 7, 9}, S::Mask}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], false, std::nullopt, 0.0, default_generator(), false, x[3]);
     }},
    {"sdpa_mask_gqa", {S{{2, 4, 6, 8}}, S{{2, 2, 6, 8}}, S{{2, 2, 6, 8}}, S{{6, 6}, S::Mask}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], false, std::nullopt, 0.0, default_generator(), true, x[3]);
     }},
    {"sdpa_mask_empty_rows", {S{{2, 7, 5}}, S{{2, 7, 5}}, S{{2, 7, 5}}, S{{7, 1}, S::Mask}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], false, std::nullopt, 0.0, default_generator(), false, x[3]);
     }},

    // banded_causal_attention: packed documents (positions restarting at 0) per sequence, random
    // position ids (any ids give a band: the bound only moves forward), sliding windows alone and
    // with documents, grouped-query heads, 3-D, and the head dim of the CUDA flash kernels
    {"banded_causal_attention_packed", {S{{2, 3, 11, 5}}, S{{2, 3, 11, 5}}, S{{2, 3, 11, 4}}},
     [](const Inputs& x) {
       const std::vector<int64_t> pos = {0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1,   // documents of 3, 5, 1, 2 tokens
                                         0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3};  // 7, 4
       return banded_causal_attention(x[0], x[1], x[2], from_vector(pos, {2, 11}, x[0].device()));
     }},
    {"banded_causal_attention_random_positions", {S{{2, 4, 9, 6}}, S{{2, 2, 9, 6}}, S{{2, 2, 9, 6}}, S{{2, 9}, S::Index, 5}},
     [](const Inputs& x) {
       return banded_causal_attention(x[0], x[1], x[2], x[3], 0, std::nullopt, 0.0, default_generator(), true);
     }},
    {"banded_causal_attention_window", {S{{1, 2, 9, 4}}, S{{1, 2, 9, 4}}, S{{1, 2, 9, 4}}},
     [](const Inputs& x) { return banded_causal_attention(x[0], x[1], x[2], Tensor(), 3); }},
    // gpt-oss's attention sinks (a logit per query head): causal under grouped-query heads, a mask
    // leaving some rows without any key (their sink takes every probability), a sliding window
    {"sdpa_sinks_gqa", {S{{2, 4, 7, 5}}, S{{2, 2, 7, 5}}, S{{2, 2, 7, 5}}, S{{4}}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], true, std::nullopt, 0.0, default_generator(), true,
                                           Tensor(), x[3]);
     }},
    {"sdpa_sinks_mask", {S{{2, 3, 7, 5}}, S{{2, 3, 9, 5}}, S{{2, 3, 9, 4}}, S{{7, 1}, S::Mask}, S{{3}}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], false, std::nullopt, 0.0, default_generator(), false,
                                           x[3], x[4]);
     }},
    {"banded_causal_attention_window_sinks", {S{{1, 2, 9, 4}}, S{{1, 2, 9, 4}}, S{{1, 2, 9, 4}}, S{{2}}},
     [](const Inputs& x) {
       return banded_causal_attention(x[0], x[1], x[2], Tensor(), 3, std::nullopt, 0.0, default_generator(), false,
                                      x[3]);
     }},
    {"banded_causal_attention_window_3d", {S{{3, 9, 5}}, S{{3, 9, 5}}, S{{3, 9, 5}}, S{{9}, S::Index, 4}},
     [](const Inputs& x) { return banded_causal_attention(x[0], x[1], x[2], x[3], 4, 0.5); }},
    {"banded_causal_attention_flash_shapes", {S{{1, 2, 40, 32}}, S{{1, 1, 40, 32}}, S{{1, 1, 40, 32}}},
     [](const Inputs& x) {
       std::vector<int64_t> pos(40);
       for (int64_t i = 0; i < 40; ++i) pos[i] = i < 13 ? i : i < 30 ? i - 13 : i - 30;  // 13, 17, 10 tokens
       return banded_causal_attention(x[0], x[1], x[2], from_vector(pos, {1, 40}, x[0].device()), 9,
                                      std::nullopt, 0.0, default_generator(), true);
     }},
    // Sinks at the flash kernels' head dims: causal grouped-query heads with sinks scaled up so
    // some rows' sink outweighs their largest score, and a window over packed documents
    {"sdpa_sinks_flash_shapes", {S{{1, 4, 40, 32}}, S{{1, 2, 40, 32}}, S{{1, 2, 40, 32}}, S{{4}}},
     [](const Inputs& x) {
       return scaled_dot_product_attention(x[0], x[1], x[2], true, std::nullopt, 0.0, default_generator(), true,
                                           Tensor(), mul(x[3], 3.0));
     }},
    {"banded_causal_attention_flash_sinks", {S{{1, 2, 40, 32}}, S{{1, 1, 40, 32}}, S{{1, 1, 40, 32}}, S{{2}}},
     [](const Inputs& x) {
       std::vector<int64_t> pos(40);
       for (int64_t i = 0; i < 40; ++i) pos[i] = i < 21 ? i : i - 21;  // 21, 19 tokens
       return banded_causal_attention(x[0], x[1], x[2], from_vector(pos, {1, 40}, x[0].device()), 8,
                                      std::nullopt, 0.0, default_generator(), true, x[3]);
     }},

    // apply_rotary (fused on the CPU): tables as inputs without gradients, odd T, a head view
    {"apply_rotary", {S{{2, 3, 7, 6}}, S{{7, 6}, S::Normal, 0, false}, S{{7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(x[0], x[1], x[2]); }},
    {"apply_rotary_head_view", {S{{2, 7, 3, 4}}, S{{7, 4}, S::Normal, 0, false}, S{{7, 4}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(transpose(x[0], 1, 2), x[1], x[2]); }},
    {"apply_rotary_strided",
     {S{{4, 6}, S::Normal, 0, true, true}, S{{4, 6}, S::Normal, 0, false}, S{{4, 6}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(x[0], x[1], x[2]); }},
    // rows wide enough for 16-byte packs (hd 32), and a head view of them
    {"apply_rotary_wide", {S{{2, 2, 5, 32}}, S{{5, 32}, S::Normal, 0, false}, S{{5, 32}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(x[0], x[1], x[2]); }},
    {"apply_rotary_wide_head_view",
     {S{{2, 5, 3, 32}}, S{{5, 32}, S::Normal, 0, false}, S{{5, 32}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(transpose(x[0], 1, 2), x[1], x[2]); }},
    // a table per sequence [B, 1, T, hd] (packed or left-padded positions), on a head view too
    {"apply_rotary_per_sequence",
     {S{{2, 3, 7, 6}}, S{{2, 1, 7, 6}, S::Normal, 0, false}, S{{2, 1, 7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(x[0], x[1], x[2]); }},
    {"apply_rotary_per_sequence_head_view",
     {S{{2, 5, 3, 32}}, S{{2, 1, 5, 32}, S::Normal, 0, false}, S{{2, 1, 5, 32}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary(transpose(x[0], 1, 2), x[1], x[2]); }},
    // apply_rotary_pos_emb: q and k (GQA: fewer kv heads) rotated as one node; outputs joined on the heads
    {"apply_rotary_pos_emb",
     {S{{2, 3, 7, 6}}, S{{2, 3, 7, 6}}, S{{7, 6}, S::Normal, 0, false}, S{{7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) {
       auto [q, k] = apply_rotary_pos_emb(x[0], x[1], x[2], x[3]);
       return cat({q, k}, 1);
     }},
    {"apply_rotary_pos_emb_gqa_wide",
     {S{{2, 4, 5, 32}}, S{{2, 2, 5, 32}}, S{{5, 32}, S::Normal, 0, false}, S{{5, 32}, S::Normal, 0, false}},
     [](const Inputs& x) {
       auto [q, k] = apply_rotary_pos_emb(x[0], x[1], x[2], x[3]);
       return cat({q, k}, 1);
     }},
    // q and k as head views of one [B, T, (4 + 2) * 32] projection, as the models give them
    {"apply_rotary_pos_emb_head_views",
     {S{{2, 5, 192}}, S{{5, 32}, S::Normal, 0, false}, S{{5, 32}, S::Normal, 0, false}},
     [](const Inputs& x) {
       Tensor q = transpose(reshape(slice(x[0], 2, 0, 128), {2, 5, 4, 32}), 1, 2);
       Tensor k = transpose(reshape(slice(x[0], 2, 128, 192), {2, 5, 2, 32}), 1, 2);
       auto [qe, ke] = apply_rotary_pos_emb(q, k, x[1], x[2]);
       return cat({qe, ke}, 1);
     }},
    {"apply_rotary_pos_emb_per_sequence",
     {S{{2, 3, 7, 6}}, S{{2, 1, 7, 6}}, S{{2, 1, 7, 6}, S::Normal, 0, false}, S{{2, 1, 7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) {
       auto [q, k] = apply_rotary_pos_emb(x[0], x[1], x[2], x[3]);
       return cat({q, k}, 1);
     }},
    // one output unused: its input's gradient is zeros, the other's alone
    {"apply_rotary_pos_emb_q_only",
     {S{{2, 3, 7, 6}}, S{{2, 1, 7, 6}}, S{{7, 6}, S::Normal, 0, false}, S{{7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary_pos_emb(x[0], x[1], x[2], x[3]).first; }},
    {"apply_rotary_pos_emb_k_only",
     {S{{2, 3, 7, 6}}, S{{2, 1, 7, 6}}, S{{7, 6}, S::Normal, 0, false}, S{{7, 6}, S::Normal, 0, false}},
     [](const Inputs& x) { return apply_rotary_pos_emb(x[0], x[1], x[2], x[3]).second * 1.5; }},
    {"rotate_half", {S{{2, 3, 6}}}, [](const Inputs& x) { return rotate_half(x[0]); }},
});

}  // namespace
}  // namespace tg::test
