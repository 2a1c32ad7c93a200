#include "ops/attention.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>

#include "core/autograd.h"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/attention_kernels.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/dropout.h"
#include "ops/detail/layout.h"
#include "ops/masked_fill.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace tg {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// What the fused kernels read in place: a unit last stride, and on CUDA every row 16-byte
// aligned (tensor-core tiles are loaded 16 bytes at a time). Anything else is copied.
bool readable_in_place(const Tensor& t) {
  if (t.strides().back() != 1 && t.shape().back() != 1) return false;
  if (!t.device().is_cuda()) return true;
  const int64_t vec = 16 / static_cast<int64_t>(t.element_size());
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.shape()[d] != 1 && t.strides()[d] % vec != 0) return false;
  return true;
}

Tensor in_place_or_copy(const Tensor& t) {
  NoGradGuard g;  // internal: the attention node covers it
  return readable_in_place(t) ? t : contiguous(t);
}

bool fused_cpu_applies(const Tensor& q, double dropout_p) {
  return q.device().is_cpu() && (q.dtype() == kFloat32 || q.dtype() == kFloat64) && dropout_p == 0.0;
}

// The flash kernels' head dims (ops/attention_kernels.h).
bool flash_head_dims(int64_t E, int64_t Ev) { return E == Ev && (E == 32 || E == 64 || E == 128); }

// The fused CUDA kernels' domain (ops/attention_kernels.h): the flash kernels' head dims, and
// cuDNN's multiples of 8 up to 256 when it is enabled (it may still decline the call). The flash
// grid puts heads x batches in its x dim and the 64-row blocks of the sequence in its y dim; a
// longer sequence stays here too, to be refused by name (kCudaAttentionMaxSeq) rather than sent to
// the composition's [L, S] scores.
bool cuda_fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p) {
  const int64_t n = q.dim();
  if (!q.device().is_cuda() || q.dtype() != kBFloat16 || dropout_p != 0.0 || (n != 3 && n != 4)) return false;
  const int64_t E = q.shape()[n - 1], Ev = v.shape()[n - 1];
  const bool cudnn = cudnn_sdp_enabled() && E % 8 == 0 && Ev % 8 == 0 && E <= 256 && Ev <= 256;
  if (!flash_head_dims(E, Ev) && !cudnn) return false;
  if (q.numel() == 0 || k.numel() == 0) return false;
  const int64_t heads = q.shape()[n - 3], batch = n == 4 ? q.shape()[0] : 1;
  return heads * batch <= INT32_MAX;
}

// The CUDA decode kernel's domain (ops/attention_kernels.h): one query a row, nothing to
// differentiate.
bool decode_cuda_applies(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double dropout_p) {
  if (!q.device().is_cuda() || q.dim() != 4 || q.shape()[2] != 1 || is_causal || dropout_p != 0.0) return false;
  if (q.dtype() != kBFloat16 && q.dtype() != kFloat32) return false;
  if (needs_record({{"q", q}, {"k", k}, {"v", v}})) return false;
  const int64_t E = q.shape()[3];
  if (v.shape()[3] != E || E < 8 || E > 256 || (E & (E - 1)) != 0 || q.numel() == 0 || k.shape()[2] < 1) return false;
  if (q.shape()[0] > 65535 || q.shape()[1] > 65535 || k.shape()[2] > INT32_MAX) return false;
  auto rows_aligned = [](const Tensor& t, int dims) {  // dims 0 .. dims-1 step whole 16-byte rows
    if (t.strides()[3] != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16) return false;
    for (int d = 0; d < dims; ++d)
      if ((t.strides()[d] * static_cast<int64_t>(t.element_size())) % 16) return false;
    return true;
  };
  return rows_aligned(q, 2) && rows_aligned(k, 3) && rows_aligned(v, 3);
}

#ifdef TG_WITH_CUDA
// dq, dk, dv (those `mask` asks for) from cuDNN's backward, which computes all three; empty when
// cuDNN cannot take the call.
std::vector<Tensor> cudnn_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, bool causal, double scale,
                                   const GradMask& mask) {
  Tensor dq = empty_like_layout(q), dk = empty_like_layout(k), dv = empty_like_layout(v);
  const bool flash = flash_head_dims(q.shape().back(), v.shape().back());
  if (!cuda::sdpa_cudnn_backward(dq, dk, dv, grad, q, k, v, out, lse, causal, scale, flash)) return {};
  KernelTrace::record("sdpa.cudnn_backward");
  return {mask[0] ? dq : Tensor(), mask[1] ? dk : Tensor(), mask[2] ? dv : Tensor()};
}
#endif

// Saves q, k and the per-row logsumexp; v and the output only when dq or dk can be asked for
// (dv needs neither), or cuDNN's backward (all three at once) is to be tried. Backward
// recomputes the probabilities (ops/attention_kernels.h).
struct SdpaFusedBackward final : Node {
  enum { kQ, kK, kV, kOut, kLse, kSinks };
  bool causal = false;
  bool try_cudnn = false;    // after cuDNN's forward: its backward first, whichever gradients are asked for
  double scale = 1.0;
  Tensor first, attn_mask;   // the band and the mask as the kernels read them (undefined: none)
  Shape v_shape, v_strides;  // dv's layout (v itself may not be saved)
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor q = unpack(kQ), k = unpack(kK), lse = unpack(kLse);
    const bool dqk = mask[0] || mask[1];
    Tensor v = dqk || try_cudnn ? unpack(kV) : Tensor();
    const bool with_sinks = mask.size() > 3;  // an input only where the call had sinks
    Tensor out = dqk || try_cudnn || (with_sinks && mask[3]) ? unpack(kOut) : Tensor();
    const Tensor dsinks = with_sinks && mask[3] ? sinks_gradient(g[0], out, lse, unpack(kSinks)) : Tensor();
#ifdef TG_WITH_CUDA
    if (try_cudnn) {
      std::vector<Tensor> grads = cudnn_backward(g[0], q, k, v, out, lse, causal, scale, mask);
      if (!grads.empty()) return with_sinks ? std::vector<Tensor>{grads[0], grads[1], grads[2], dsinks} : grads;
    }
#endif
    KernelTrace::record(q.device().is_cuda() ? "sdpa.flash_cuda_backward" : "sdpa.fused_cpu_backward");
    Tensor dout = in_place_or_copy(g[0]);
    Tensor dq = mask[0] ? empty_with_layout(q.shape(), q.strides(), q.options()) : Tensor();
    Tensor dk = mask[1] ? empty_with_layout(k.shape(), k.strides(), k.options()) : Tensor();
    Tensor dv = mask[2] ? empty_with_layout(v_shape, v_strides, k.options()) : Tensor();
    Tensor delta = dqk ? Tensor::empty(lse.shape(), lse.options()) : Tensor();
    if (attn_mask.defined())  // only the CPU kernel takes a mask (cuda_fused_applies)
      cpu::sdpa_backward(dq, dk, dv, dout, q, k, v, out, lse, delta, causal, scale, first, attn_mask);
    else
      TG_DISPATCH(q.device(), sdpa_backward, dq, dk, dv, dout, q, k, v, out, lse, delta, causal, scale, first);
    if (!with_sinks) return {dq, dk, dv};
    return {dq, dk, dv, dsinks};
  }

  // With lse taking the sinks in, P and the gradients of q, k, v are as without them; a sink's own
  // gradient is -sum over its head's rows of exp(sink - lse) * rowsum(dout * out).
  static Tensor sinks_gradient(const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& sinks) {
    const int64_t H = sinks.numel(), n = lse.dim();
    const Tensor delta = sum(mul(to(dout, lse.dtype()), to(out, lse.dtype())), {-1});
    const Tensor p = exp(sub(reshape(to(sinks, lse.dtype()), {H, 1}), lse));
    std::vector<int64_t> others;
    for (int64_t d = 0; d < n; ++d)
      if (d != n - 2) others.push_back(d);
    return to(neg(sum(mul(p, delta), others)), sinks.dtype());
  }
};

}  // namespace

void sdpa_add_sinks(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  NoGradGuard no_grad;
  const int64_t H = sinks.numel();
  const Tensor z = reshape(to(sinks.detach(), lse.dtype()), {H, 1});  // broadcast over [..., H, L]
  // lse' = max(lse, z) + log(1 + exp(-|lse - z|)), without overflow either way
  const Tensor d = sub(lse, z), larger = add(z, relu(d));
  const Tensor joined = add(larger, log(add(exp(neg(add(relu(d), relu(neg(d))))), 1.0)));
  const Tensor shrink = unsqueeze(exp(sub(lse, joined)), -1);  // in (0, 1]
  copy_(out, to(mul(to(out, lse.dtype()), shrink), out.dtype()));
  copy_(lse, joined);
}

namespace {

// The output: [B, H, L, Ev] for 4-D inputs is a view of [B, L, H, Ev] memory (as PyTorch's
// flash attention), so the usual merge of heads back to [B, L, H * Ev] is free.
Tensor empty_output(const Tensor& q, int64_t Ev) {
  Shape shape = q.shape();
  shape.back() = Ev;
  if (shape.size() != 4) return Tensor::empty(shape, q.options());
  const int64_t H = shape[1], L = shape[2];
  return Tensor::empty(shape, q.options()).as_strided(shape, {L * H * Ev, Ev, H * Ev, 1}, 0);
}

// Runs the fused forward and names the kernel that ran: cuDNN's where it takes the call (faster
// than the flash kernels both ways, deterministic backward included: bench/RESULTS.md), else the
// flash kernels; nullptr when neither takes it (cuDNN declined a head dim the flash kernels
// lack). `grads`: a backward may follow. cuDNN's plans are built for such calls (a training step
// repeats its shapes) and at head dims without a flash kernel; a call without gradients at a
// flash head dim uses one only when built already (generation's prompts change length at every
// call, and a plan costs up to a second to build).
const char* fused_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          bool causal, double s, const Tensor& mask, const Tensor& first, const Tensor& sinks,
                          [[maybe_unused]] bool grads) {
  if (q.device().is_cpu()) {
    cpu::sdpa_forward(out, lse, q, k, v, causal, s, first, mask, sinks);
    return "sdpa.fused_cpu";
  }
#ifdef TG_WITH_CUDA
  const bool flash = flash_head_dims(q.shape().back(), v.shape().back());
  if (!first.defined() && !sinks.defined() && cudnn_sdp_enabled() &&  // a band or sinks stay on the flash kernels
      cuda::sdpa_cudnn_forward(out, lse, q, k, v, causal, s, grads && !flash, grads || !flash))
    return "sdpa.cudnn";
  if (!flash) return nullptr;
  cuda::sdpa_forward(out, lse, q, k, v, causal, s, first);
  if (sinks.defined()) sdpa_add_sinks(out, lse, sinks);
  return "sdpa.flash_cuda";
#else
  fail(kOp, "needs the CUDA backend, which this build lacks");
#endif
}

// mask: undefined, or bool [..., L, S] over q's leading dims with a unit last stride (CPU only);
// first: undefined, or a band as sdpa_band writes it (ops/attention_kernels.h).
// An undefined result: no fused kernel took the call (fused_forward), the composition serves it.
Tensor sdpa_fused(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double s, const Tensor& mask,
                  const Tensor& first = Tensor(), const Tensor& sinks = Tensor()) {
  Tensor qc = in_place_or_copy(q), kc = in_place_or_copy(k), vc = in_place_or_copy(v);
  Tensor out = empty_output(q, v.shape().back());
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  Tensor lse = Tensor::empty(lse_shape, {q.dtype() == kFloat64 ? kFloat64 : kFloat32, q.device()});
  // A checkpointed layer's first run picks the kernel its recomputation will (cuDNN's or the flash
  // kernels round differently).
  const bool grads = needs_record({{"q", q}, {"k", k}, {"v", v}, {"sinks", sinks}}) || in_checkpoint_first_pass();
  const Tensor sinks_c = sinks.defined() ? contiguous(sinks.detach()) : Tensor();
  const char* kernel = fused_forward(out, lse, qc, kc, vc, is_causal, s, mask, first, sinks_c, grads);
  if (!kernel) return Tensor();
  KernelTrace::record(kernel);
  std::vector<NamedInput> inputs = {{"q", q}, {"k", k}, {"v", v}};
  if (sinks.defined()) inputs.push_back({"sinks", sinks});
  if (auto node = record<SdpaFusedBackward>(inputs, {out})) {
    node->causal = is_causal;
    node->scale = s;
    node->first = first;
    node->attn_mask = mask;
    node->v_shape = vc.shape();
    node->v_strides = vc.strides();
    node->try_cudnn = std::string_view(kernel) == "sdpa.cudnn";
    const bool keep = q.requires_grad() || k.requires_grad() || node->try_cudnn;
    const bool dsinks = sinks.defined() && sinks.requires_grad();
    node->saved = {SavedTensor(qc, "q"), SavedTensor(kc, "k"), SavedTensor(keep ? vc : Tensor(), "v"),
                   SavedTensor(keep || dsinks ? out : Tensor(), "out"), SavedTensor(lse, "lse"),
                   SavedTensor(dsinks ? sinks_c : Tensor(), "sinks")};
  }
  return out;
}

// [..., Hkv, S, E] -> [..., Hkv * group, S, E], each kv head repeated `group` times (the
// composition's grouped-query attention; the fused kernels index the kv heads instead).
Tensor repeat_kv_heads(const Tensor& x, int64_t group) {
  if (group == 1) return x;
  Shape s = x.shape(), expanded = x.shape();
  const int64_t h = static_cast<int64_t>(s.size()) - 3;
  expanded.insert(expanded.begin() + h + 1, group);
  s[h] *= group;
  return reshape(expand(unsqueeze(x, h + 1), expanded), s);
}

// attn_mask as the kernels and the composition read it: expanded to [..., L, S] over q's
// leading dims (a view; copied only when its last dim is broadcast), after checking it.
Tensor expanded_mask(const Tensor& attn_mask, const Tensor& q, int64_t S, bool is_causal) {
  const char* op = kOp;
  TG_CHECK(attn_mask.dtype() == kBool, op, "attn_mask must be bool (true: the key takes part), got ",
           attn_mask.dtype());
  TG_CHECK(attn_mask.device() == q.device(), op, "attn_mask is on ", attn_mask.device(), " but q is on ", q.device());
  TG_CHECK(!is_causal, op, "pass either attn_mask or is_causal, not both (as PyTorch)");
  Shape want = q.shape();
  want.back() = S;
  const Shape& m = attn_mask.shape();
  bool fits = m.size() <= want.size();
  for (size_t i = 0; fits && i < m.size(); ++i) fits = m[i] == 1 || m[i] == want[want.size() - m.size() + i];
  TG_CHECK(fits, op, "attn_mask of shape ", m, " does not broadcast to ", want, " (q's leading dims, ",
           want[want.size() - 2], " queries, ", S, " keys)");
  NoGradGuard g;
  Tensor e = expand(attn_mask, want);
  return e.strides().back() == 1 || S == 1 ? e : contiguous(e);
}

// The composition's masked softmax: masked scores -inf; a row with no key left is zero, as
// PyTorch's _safe_softmax (its scores are left unmasked so nothing there is NaN, and `live`
// zeroes the row and its gradient).
Tensor masked_softmax_rows(const Tensor& scores, const Tensor& mask, Tensor& live) {
  Tensor keep = to(mask, scores.dtype());       // 1: the key takes part
  live = max(keep, -1, /*keepdim=*/true);       // 1: the row sees a key
  Tensor drop = to(mul(1.0 - keep, live), kBool);
  return softmax(masked_fill(scores, drop, -std::numeric_limits<double>::infinity()), -1);
}

// A constant table made once per (what, L, S, device): a training step asks for the same one at
// every step, and a CUDA graph's capture cannot upload it. Never destroyed: it may outlive the
// allocator.
enum class Table { CausalMask, KeyIndex };
Tensor cached_table(Table what, int64_t L, int64_t S, Device device, Tensor (*make)(int64_t, int64_t, Device)) {
  static std::mutex mu;
  static auto* made = new std::map<std::tuple<Table, int64_t, int64_t, int, int>, Tensor>;
  std::lock_guard<std::mutex> lock(mu);
  const std::tuple<Table, int64_t, int64_t, int, int> key{what, L, S, static_cast<int>(device.type), device.index};
  auto it = made->find(key);
  if (it != made->end()) return it->second;
  NoGradGuard g;
  if (made->size() >= 16) made->clear();  // bounded: shapes that change every call need no cache
  return made->emplace(key, make(L, S, device)).first->second;
}

// 0, 1, ..., S - 1 as float32 [S] (the key index, broadcast against per-query bounds).
Tensor key_index(int64_t S, Device device) {
  return cached_table(Table::KeyIndex, 0, S, device, [](int64_t, int64_t s, Device d) {
    return arange(0, static_cast<double>(s), 1, {kFloat32, d});
  });
}

// The checks q, k and v get from every attention op (`op` names it in errors); returns the query
// heads each kv head serves (1 without grouped-query heads).
int64_t check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool enable_gqa) {
  check_floating(op, "q", q);
  check_floating(op, "k", k);
  check_floating(op, "v", v);
  check_same(op, {{"q", q}, {"k", k}, {"v", v}});
  TG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
           "q, k, v must have the same number of dims (>= 2), got q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  const int64_t n = q.dim(), S = k.shape()[n - 2], E = q.shape()[n - 1];
  TG_CHECK(k.shape()[n - 1] == E, op, "q has head_dim ", E, " but k has ", k.shape()[n - 1], " (q ", q.shape(),
           ", k ", k.shape(), ")");
  TG_CHECK(v.shape()[n - 2] == S, op, "k has ", S, " keys but v has ", v.shape()[n - 2], " values (k ", k.shape(),
           ", v ", v.shape(), ")");
  TG_CHECK(!enable_gqa || n >= 3, op, "enable_gqa wants q, k, v of 3 or more dims [..., heads, L, E], got q ",
           q.shape());
  int64_t group = 1;
  for (int64_t d = 0; d < n - 2; ++d) {
    const bool head_dim = enable_gqa && d == n - 3;
    TG_CHECK(k.shape()[d] == v.shape()[d], op, "k and v differ in dim ", d, ": k ", k.shape(), ", v ", v.shape());
    if (head_dim && q.shape()[d] != k.shape()[d]) {
      TG_CHECK(k.shape()[d] > 0 && q.shape()[d] % k.shape()[d] == 0, op, "enable_gqa: q's ", q.shape()[d],
               " heads are not a multiple of k's ", k.shape()[d], " (q ", q.shape(), ", k ", k.shape(), ")");
      group = q.shape()[d] / k.shape()[d];
      continue;
    }
    TG_CHECK(q.shape()[d] == k.shape()[d], op, "leading dims differ: q ", q.shape(), ", k ", k.shape(), ", v ",
             v.shape(), enable_gqa ? "" : " (grouped kv heads want enable_gqa = true)");
  }
  return group;
}

// banded_causal_attention's band for L queries (`op` names it in errors): int32 [rows, L] as
// sdpa_band writes it, rows 1 for position_ids [L] (or none) and `batch` for [batch, L] (batch 0:
// only [L] is taken).
Tensor band_of(const char* op, const Tensor& position_ids, int64_t window, int64_t batch, int64_t L, Device device) {
  TG_CHECK(window >= 0, op, "window must be >= 0 (0: none), got ", window);
  TG_CHECK(L <= INT32_MAX, op, "more than 2^31 queries: ", L);
  Tensor pos;
  int64_t rows = 1;
  if (position_ids.defined()) {
    TG_CHECK(is_integral(position_ids.dtype()) && position_ids.dtype() != kBool, op,
             "position_ids must be int32 or int64, got ", position_ids.dtype());
    TG_CHECK(position_ids.device() == device, op, "position_ids are on ", position_ids.device(), " but q is on ", device);
    const Shape& ps = position_ids.shape();
    TG_CHECK(ps == Shape({L}) || (batch > 0 && ps == Shape({batch, L})), op, "position_ids must be [", L, "]",
             batch > 0 ? " or [" + std::to_string(batch) + ", " + std::to_string(L) + "]" : std::string(), ", got ", ps);
    rows = ps.size() == 2 ? batch : 1;
    NoGradGuard g;
    pos = contiguous(reshape(to(position_ids, kInt64), {rows, L}));
  }
  Tensor first = Tensor::empty({rows, L}, {kInt32, device});
  if (first.numel() > 0) TG_DISPATCH(device, sdpa_band, first, pos, window);
  return first;
}

// The band as a bool mask: [rows, 1, L, S] (4-D attention) or [L, S] (rows 1): true where
// first[row, i] <= j <= i.
Tensor band_keep(const Tensor& first, int64_t S, bool four_dims) {
  NoGradGuard g;
  const int64_t rows = first.shape()[0], L = first.shape()[1];
  const Device d = first.device();
  const Tensor lo = reshape(to(first, kFloat32), {rows, 1, L, 1});
  const Tensor after = relu(add(sub(key_index(S, d), lo), 0.5));  // > 0 where j >= first[i]
  Tensor keep = to(mul(after, 1.0 - to(causal_mask(L, S, d), kFloat32)), kBool);
  return four_dims ? keep : reshape(keep, {L, S});
}

// sinks: undefined, or one logit per query head [Hq] of q's dtype and device (q [..., Hq, L, E]).
void check_sinks(const char* op, const Tensor& q, const Tensor& sinks) {
  if (!sinks.defined()) return;
  check_same(op, {{"q", q}, {"sinks", sinks}});
  TG_CHECK(q.dim() >= 3 && sinks.dim() == 1 && sinks.shape()[0] == q.shape()[q.dim() - 3], op,
           "sinks must be [heads] for q [..., heads, L, E], got sinks ", sinks.shape(), ", q ", q.shape());
}

// not mask (bool), no gradient.
Tensor logical_not(const Tensor& mask) {
  NoGradGuard g;
  return to(1.0 - to(mask, kFloat32), kBool);
}

}  // namespace

Tensor causal_mask(int64_t L, int64_t S, Device device) {
  return cached_table(Table::CausalMask, L, S, device, [](int64_t l, int64_t s, Device d) {
    // (j - i) > 0 from two broadcast ranges, without a host loop, on any device.
    Tensor i = reshape(arange(0, static_cast<double>(l), 1, {kFloat32, d}), {l, 1});
    Tensor j = reshape(arange(0, static_cast<double>(s), 1, {kFloat32, d}), {1, s});
    return to(relu(sub(j, i)), kBool);
  });
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    std::optional<double> scale, double dropout_p, Generator& gen, bool enable_gqa,
                                    const Tensor& attn_mask, const Tensor& sinks) {
  const char* op = kOp;
  const int64_t group = check_qkv(op, q, k, v, enable_gqa);
  check_sinks(op, q, sinks);
  const int64_t n = q.dim(), L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1];
  TG_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, "dropout_p must be in [0, 1), got ", dropout_p);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  const Tensor mask = attn_mask.defined() ? expanded_mask(attn_mask, q, S, is_causal) : Tensor();
  // The decoding kernel takes no sinks; the flash kernels take them as sdpa_add_sinks joins them.
  if (!sinks.defined() && decode_cuda_applies(q, k, v, is_causal, dropout_p)) {
    KernelTrace::record("sdpa.decode_cuda");
    Tensor out = empty_output(q, E);
    TG_DISPATCH(q.device(), sdpa_decode, out, q, k, v, s, mask);
    return out;
  }
  if (fused_cpu_applies(q, dropout_p) ||
      (!mask.defined() && cuda_fused_applies(q, k, v, dropout_p))) {
    Tensor out = sdpa_fused(q, k, v, is_causal, s, mask, Tensor(), sinks);
    if (out.defined()) return out;
  }

  KernelTrace::record("sdpa.composite");
  const Tensor kr = repeat_kv_heads(k, group), vr = repeat_kv_heads(v, group);
  // scaled on q, not on the [..., L, S] scores: the same bits when the scale is a power of two
  Tensor scores = matmul(mul(q, s), transpose(kr, -2, -1));
  if (is_causal) scores = masked_fill(scores, causal_mask(L, S, q.device()), -std::numeric_limits<double>::infinity());
  Tensor live, p;
  if (sinks.defined()) {  // transformers' eager gpt-oss: the sink a last column of every row, dropped after softmax
    if (mask.defined()) scores = masked_fill(scores, logical_not(mask), -std::numeric_limits<double>::infinity());
    Shape column = scores.shape();
    column.back() = 1;
    const int64_t H = sinks.numel();
    const Tensor sink = expand(reshape(sinks, {H, 1, 1}), column);
    p = slice(softmax(cat({scores, sink}, -1), -1), -1, 0, S);
  } else {
    p = mask.defined() ? masked_softmax_rows(scores, mask, live) : softmax(scores, -1);
  }
  if (dropout_p > 0.0) p = dropout(p, dropout_p, true, gen);
  Tensor out = matmul(p, vr);
  return live.defined() ? mul(out, live) : out;
}

Tensor banded_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& position_ids,
                               int64_t window, std::optional<double> scale, double dropout_p, Generator& gen,
                               bool enable_gqa, const Tensor& sinks) {
  const char* op = "banded_causal_attention";
  check_qkv(op, q, k, v, enable_gqa);
  check_sinks(op, q, sinks);
  const int64_t n = q.dim(), L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1];
  TG_CHECK(n == 3 || n == 4, op, "wants q, k, v of 3 or 4 dims ([B,] heads, L, E), got q ", q.shape());
  TG_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, "dropout_p must be in [0, 1), got ", dropout_p);
  TG_CHECK(window >= 0, op, "window must be >= 0 (0: none), got ", window);
  if (!position_ids.defined() && (window == 0 || window >= L))  // one document, no window reaches back
    return scaled_dot_product_attention(q, k, v, true, scale, dropout_p, gen, enable_gqa, Tensor(), sinks);
  const Tensor first = band_of(op, position_ids, window, n == 4 ? q.shape()[0] : 0, L, q.device());
  if (fused_cpu_applies(q, dropout_p) || cuda_fused_applies(q, k, v, dropout_p)) {
    Tensor out = sdpa_fused(q, k, v, true, scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E)), Tensor(), first,
                            sinks);
    if (out.defined()) return out;  // undefined: a head dim only cuDNN has, which takes no band
  }
  return scaled_dot_product_attention(q, k, v, false, scale, dropout_p, gen, enable_gqa, band_keep(first, S, n == 4),
                                      sinks);
}

Tensor banded_causal_mask(const Tensor& position_ids, int64_t window, int64_t L, int64_t S, Device device) {
  const char* op = "banded_causal_mask";
  TG_CHECK(L >= 0 && S >= 0, op, "wants L, S >= 0, got ", L, " and ", S);
  const int64_t batch = position_ids.defined() && position_ids.dim() == 2 ? position_ids.shape()[0] : 0;
  const Tensor first = band_of(op, position_ids, window, batch, L, position_ids.defined() ? position_ids.device() : device);
  return band_keep(first, S, batch > 0);
}

}  // namespace tg
