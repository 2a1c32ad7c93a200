// scaled_dot_product_attention through cuDNN's fused flash-attention kernels (the contract is in
// ops/attention_kernels.h; ops/cuda/cudnn_sdpa.cuh builds the graphs): execution plans built once
// per shape and layout and kept, workspace from the caching allocator, the device's handle on
// its stream. A build without cuDNN has no plans (sdpa_cudnn_forward says false).
#include "ops/attention_kernels.h"

#ifdef TG_WITH_CUDNN
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/cudnn_utils.cuh"
#include "core/cuda/runtime.h"
#include "ops/cuda/cudnn_sdpa.cuh"
#include "ops/layout.h"
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
  p.backward = backward, p.causal = causal, p.deterministic = true;
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
// new ones at kMaxPlans (each costs a kernel compilation) and those calls take the flash kernels.
class Plans {
 public:
  static constexpr size_t kMaxPlans = 256;

  // The plan for `p` on `device`: built at its first use unless a capture runs on the device.
  const Plan* get(const Problem& p, int device) {
    std::vector<int64_t> key = p.key();
    key.push_back(device);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.get();
    if (is_capturing(device) || plans_.size() >= kMaxPlans) return nullptr;
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

cudnn_sdpa::Pointers pointers_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) {
  cudnn_sdpa::Pointers t;
  t.q = q.data_ptr(), t.k = k.data_ptr(), t.v = v.data_ptr(), t.o = out.data_ptr(), t.stats = lse.data_ptr();
  return t;
}

void execute(const Plan& plan, const cudnn_sdpa::Pointers& t, double scale, Device device) {
  Tensor workspace = Tensor::empty({plan.workspace_bytes}, {kUInt8, device});  // stream-ordered reuse
  cudnn_sdpa::execute(cudnn_handle(device.index), plan, t, static_cast<float>(scale), workspace.data_ptr());
}

}  // namespace

size_t sdpa_cudnn_version() { return cudnnGetVersion(); }

bool sdpa_cudnn_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        bool causal, double scale, bool with_backward) {
  const int device = q.device().index;
  const Plan* fwd = plans().get(problem_of(q, k, v, out, causal, false), device);
  if (!fwd || (with_backward && !plans().get(problem_of(q, k, v, out, causal, true), device))) return false;
  execute(*fwd, pointers_of(q, k, v, out, lse), scale, q.device());
  return true;
}

bool sdpa_cudnn_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                         double scale) {
  const Plan* bwd = plans().get(problem_of(q, k, v, out, causal, true), q.device().index);
  if (!bwd) return false;
  TG_CHECK(dq.strides() == dense_strides_like(q.shape(), q.strides()) &&
               dk.strides() == dense_strides_like(k.shape(), k.strides()) &&
               dv.strides() == dense_strides_like(v.shape(), v.strides()),
           "scaled_dot_product_attention (cuDNN)", "the backward wants dq, dk, dv in q, k, v's layouts (ops/layout.h)");
  Tensor d = dout;  // the plan reads dout in out's layout
  if (dout.strides() != out.strides() || reinterpret_cast<uintptr_t>(dout.data_ptr()) % 16) {
    d = empty_like_layout(out);
    copy_strided(d, dout);
  }
  cudnn_sdpa::Pointers t = pointers_of(q, k, v, out, lse);
  t.dout = d.data_ptr(), t.dq = dq.data_ptr(), t.dk = dk.data_ptr(), t.dv = dv.data_ptr();
  execute(*bwd, t, scale, q.device());
  return true;
}

#else

size_t sdpa_cudnn_version() { return 0; }

bool sdpa_cudnn_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double,
                        bool) {
  return false;
}

bool sdpa_cudnn_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, bool, double) {
  return false;
}

#endif

}  // namespace tg::cuda
