// scaled_dot_product_attention through cuDNN's fused flash-attention kernels (the contract is in
// ops/attention_kernels.h; ops/cuda/cudnn_sdpa.cuh builds the graphs): execution plans built once
// per shape and layout and kept, workspace from the caching allocator, the device's handle on
// its stream, the deterministic backward in chunks that bound its workspace. A build without
// cuDNN has no plans (sdpa_cudnn_forward and sdpa_cudnn_backward say false).
#include "ops/attention_kernels.h"

#ifdef TG_WITH_CUDNN
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/cudnn_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda_settings.h"
#include "ops/cuda/cudnn_sdpa.cuh"
#include "ops/detail/layout.h"
#endif

namespace tg::cuda {

#ifdef TG_WITH_CUDNN
namespace {

using cudnn_sdpa::Dims;
using cudnn_sdpa::Plan;
using cudnn_sdpa::Problem;

// [b, h, s, d] strides of a 3-D or 4-D tensor (3-D: one batch).
Dims strides4(const Shape& shape, const Shape& strides) {
  if (shape.size() == 4) return {strides[0], strides[1], strides[2], strides[3]};
  return {shape[0] * strides[0], strides[0], strides[1], strides[2]};
}

Problem problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, bool causal, bool backward) {
  const int64_t n = q.dim();
  Problem p;
  p.backward = backward, p.causal = causal, p.deterministic = backward && cudnn_sdp_deterministic();
  p.b = n == 4 ? q.shape()[0] : 1;
  p.hq = q.shape()[n - 3], p.hkv = k.shape()[n - 3];
  p.sq = q.shape()[n - 2], p.skv = k.shape()[n - 2];
  p.d_qk = q.shape()[n - 1], p.d_v = v.shape()[n - 1];
  p.q = strides4(q.shape(), q.strides()), p.k = strides4(k.shape(), k.strides());
  p.v = strides4(v.shape(), v.strides()), p.o = strides4(out.shape(), out.strides());
  if (backward) {  // the layouts the op allocates the gradients in, dout in out's
    p.dout = p.o;
    p.dq = strides4(q.shape(), dense_strides_like(q.shape(), q.strides()));
    p.dk = strides4(k.shape(), dense_strides_like(k.shape(), k.strides()));
    p.dv = strides4(v.shape(), dense_strides_like(v.shape(), v.strides()));
  }
  return p;
}

int sm_major(int device) {
  int major = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Every plan built, by device and Problem::key(); null where cuDNN declined the call. Never
// destroyed (plans may be used until exit); a process that meets many shapes stops building
// new ones at kMaxPlans (each may cost a kernel compilation) and those calls take the flash
// kernels or the composition.
class Plans {
 public:
  static constexpr size_t kMaxPlans = 256;

  // The plan for `p` on `device`; built now if it is new and `build` (never while a capture runs
  // on the device).
  const Plan* get(const Problem& p, int device, bool build) {
    std::vector<int64_t> key = p.key();
    key.push_back(device);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    if (!build || is_capturing(device) || plans_.size() >= kMaxPlans) return nullptr;
    std::unique_ptr<Plan> plan;
    if (cudnn_sdpa::unsupported_reason(p, cudnnGetVersion(), sm_major(device)).empty())
      plan = cudnn_sdpa::build_plan(cudnn_handle(device), p);
    return plans_.emplace(std::move(key), std::move(plan)).first->second.get();
  }

 private:
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
};

Plans& plans() {
  static auto* p = new Plans;
  return *p;
}

// cuDNN's deterministic backward keeps dP ([b, hq, sq, skv] bf16) in its workspace, quadratic in
// the length. A call whose dP would take more than 1/64 of the device's memory (at least 256 MiB,
// cudnn-frontend's default limit for that workspace when it was optional) runs in chunks of
// batches, or of kv-head groups of one batch, that fit (or of one kv head's group where that alone
// is more). Chunks cost time (bench/RESULTS.md): the budget keeps training shapes whole.
int64_t dp_budget(int device) {
  static std::mutex mu;
  static std::map<int, int64_t> budgets;
  std::lock_guard<std::mutex> lock(mu);
  auto it = budgets.find(device);
  if (it == budgets.end()) {
    cudaDeviceProp prop;
    TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    it = budgets.emplace(device, std::max<int64_t>(int64_t(256) << 20, int64_t(prop.totalGlobalMem / 64))).first;
  }
  return it->second;
}

// How a backward call runs: `sub` (the plan's problem) over chunks of `batches` batches and
// `kv_heads` kv heads (with their query heads), each a divisor of the call's, so one plan serves.
struct Chunks {
  Problem sub;
  int64_t batches, kv_heads;
  bool within_budget;  // false: one kv head's group alone passes it
};

Chunks chunks_of(const Problem& p, int device) {
  Chunks c{p, p.b, p.hkv, true};
  const int64_t group = p.hq / p.hkv;
  auto dp_bytes = [&](int64_t b, int64_t kv) { return b * kv * group * p.sq * p.skv * int64_t(2); };
  const int64_t budget = dp_budget(device);
  if (!p.deterministic || dp_bytes(p.b, p.hkv) <= budget) return c;
  auto largest_divisor = [](int64_t n, auto&& ok) {
    for (int64_t d = n; d > 1; --d)
      if (n % d == 0 && ok(d)) return d;
    return int64_t(1);
  };
  c.batches = largest_divisor(p.b, [&](int64_t b) { return dp_bytes(b, p.hkv) <= budget; });
  if (dp_bytes(c.batches, p.hkv) > budget)
    c.kv_heads = largest_divisor(p.hkv, [&](int64_t kv) { return dp_bytes(1, kv) <= budget; });
  c.sub.b = c.batches, c.sub.hkv = c.kv_heads, c.sub.hq = c.kv_heads * group;
  c.within_budget = dp_bytes(c.batches, c.kv_heads) <= budget;
  return c;
}

// p + n elements of `bytes` each.
template <class P>
P* advance(P* p, int64_t n, size_t bytes) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(p) + n * static_cast<int64_t>(bytes));
}

cudnn_sdpa::Pointers pointers_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) {
  cudnn_sdpa::Pointers t;
  t.q = q.data_ptr(), t.k = k.data_ptr(), t.v = v.data_ptr(), t.o = out.data_ptr(), t.stats = lse.data_ptr();
  return t;
}

Tensor workspace_for(const Plan& plan, Device device) {
  return Tensor::empty({plan.workspace_bytes}, {kUInt8, device});  // stream-ordered reuse after the call
}

}  // namespace

size_t sdpa_cudnn_version() { return cudnnGetVersion(); }

bool sdpa_cudnn_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        bool causal, double scale, bool with_backward, bool build) {
  const int device = q.device().index;
  const Plan* fwd = plans().get(problem_of(q, k, v, out, causal, false), device, build);
  if (!fwd) return false;
  if (with_backward && !plans().get(chunks_of(problem_of(q, k, v, out, causal, true), device).sub, device, true))
    return false;
  Tensor workspace = workspace_for(*fwd, q.device());
  cudnn_sdpa::execute(cudnn_handle(device), *fwd, pointers_of(q, k, v, out, lse), static_cast<float>(scale),
                      workspace.data_ptr());
  return true;
}

bool sdpa_cudnn_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                         double scale, bool flash_fallback) {
  const int device = q.device().index;
  const Problem p = problem_of(q, k, v, out, causal, true);
  const Chunks c = chunks_of(p, device);
  if (flash_fallback && !c.within_budget) return false;
  const Plan* bwd = plans().get(c.sub, device, true);
  if (!bwd) return false;
  TG_CHECK(dq.strides() == dense_strides_like(q.shape(), q.strides()) &&
               dk.strides() == dense_strides_like(k.shape(), k.strides()) &&
               dv.strides() == dense_strides_like(v.shape(), v.strides()),
           "scaled_dot_product_attention (cuDNN)", "the backward wants dq, dk, dv in q, k, v's layouts (ops/detail/layout.h)");
  Tensor d = dout;  // the plan reads dout in out's layout
  if (dout.strides() != out.strides() || reinterpret_cast<uintptr_t>(dout.data_ptr()) % 16) {
    d = empty_like_layout(out);
    copy_strided(d, dout);
  }
  Tensor workspace = workspace_for(*bwd, q.device());
  const cudnn_sdpa::Pointers all = pointers_of(q, k, v, out, lse);
  const int64_t group = p.hq / p.hkv, bf16 = 2, f32 = 4;
  for (int64_t b = 0; b < p.b; b += c.batches)
    for (int64_t kv = 0; kv < p.hkv; kv += c.kv_heads) {
      const int64_t h = kv * group;  // the chunk's first query head
      cudnn_sdpa::Pointers t;
      t.q = advance(all.q, b * p.q[0] + h * p.q[1], bf16);
      t.k = advance(all.k, b * p.k[0] + kv * p.k[1], bf16);
      t.v = advance(all.v, b * p.v[0] + kv * p.v[1], bf16);
      t.o = advance(all.o, b * p.o[0] + h * p.o[1], bf16);
      t.stats = advance(all.stats, (b * p.hq + h) * p.sq, f32);
      t.dout = advance(d.data_ptr(), b * p.dout[0] + h * p.dout[1], bf16);
      t.dq = advance(dq.data_ptr(), b * p.dq[0] + h * p.dq[1], bf16);
      t.dk = advance(dk.data_ptr(), b * p.dk[0] + kv * p.dk[1], bf16);
      t.dv = advance(dv.data_ptr(), b * p.dv[0] + kv * p.dv[1], bf16);
      cudnn_sdpa::execute(cudnn_handle(device), *bwd, t, static_cast<float>(scale), workspace.data_ptr());
    }
  return true;
}

#else

size_t sdpa_cudnn_version() { return 0; }

bool sdpa_cudnn_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, bool,
                        bool) {
  return false;
}

bool sdpa_cudnn_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, bool, double, bool) {
  return false;
}

#endif

}  // namespace tg::cuda
