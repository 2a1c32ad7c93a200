// One query a head against a KV cache (generation's decode step), flash-decoding: the keys of
// each (batch, head) are split over several blocks when B * H alone would leave multiprocessors
// idle; each block scores its keys (G lanes a key, 16 bytes a lane), takes their softmax and
// its share of P V in float32, and a second kernel merges the blocks' partial results by their
// maxima. bfloat16 or float32, head dims 8 to 256 (powers of two); an optional bool mask drops
// keys (a row with none left gives 0). Traffic: k and v read once, q, out and the mask once.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/attention_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32, kMaxKeysPerSplit = 4096;

struct DecodeParams {
  const void *q, *k, *v;
  void* out;
  const bool* mask;  // nullptr: every key
  int64_t q_sb, q_sh, k_sb, k_sh, k_st, v_sb, v_sh, v_st, o_sb, o_sh, m_sb, m_sh, m_ss;
  int H, Hkv, S, keys_per_split, splits;
  float scale_log2;
  float *part_o, *part_ml;  // [B H splits, E] and [B H splits, 2] (max in base 2, sum)
};

// Lanes a key (G) and 16-byte chunks a lane (C) for head dim E of T.
template <class T, int E>
struct Layout {
  static constexpr int V = 16 / int(sizeof(T)), G = std::min(32, E / V), C = E / (G * V), KPW = 32 / G;
};

template <class T, int E>
__device__ __forceinline__ void load_row(float (&f)[Layout<T, E>::C][Layout<T, E>::V], const T* row, int sub) {
  using L = Layout<T, E>;
#pragma unroll
  for (int c = 0; c < L::C; ++c) {
    Pack<T, L::V> p;
    load_pack<Access::plain>(p, row + (c * L::G + sub) * L::V);
#pragma unroll
    for (int e = 0; e < L::V; ++e) f[c][e] = elem(p, e);
  }
}

__device__ __forceinline__ float block_reduce(float v, float* scratch, bool is_max) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();
  return r;
}

// Block (split, h, b): keys [split * keys_per_split, ...) of query (b, h).
template <class T, int E>
__global__ void __launch_bounds__(kThreads) decode_partial(const DecodeParams p) {
  using L = Layout<T, E>;
  extern __shared__ float smem[];
  float* s = smem;                        // the split's scores, then probabilities
  float* acc_sh = smem + p.keys_per_split;  // [kWarps][E]
  __shared__ float scratch[kWarps];
  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / (p.H / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % L::G, kl = lane / L::G;
  const int j0 = split * p.keys_per_split, n = min(p.keys_per_split, p.S - j0);
  const T* k = static_cast<const T*>(p.k) + b * p.k_sb + hk * p.k_sh;
  const T* v = static_cast<const T*>(p.v) + b * p.v_sb + hk * p.v_sh;
  const bool* mask = p.mask ? p.mask + b * p.m_sb + h * p.m_sh : nullptr;
  float q[L::C][L::V];
  load_row<T, E>(q, static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh, sub);

  for (int base = warp * L::KPW; base < n; base += kWarps * L::KPW) {  // warp-uniform bound
    const int i = base + kl;
    float dot = 0.f;
    if (i < n) {
      float kr[L::C][L::V];
      load_row<T, E>(kr, k + int64_t(j0 + i) * p.k_st, sub);
#pragma unroll
      for (int c = 0; c < L::C; ++c)
#pragma unroll
        for (int e = 0; e < L::V; ++e) dot = fmaf(q[c][e], kr[c][e], dot);
    }
#pragma unroll
    for (int off = L::G / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    if (i < n && sub == 0) s[i] = mask && !mask[int64_t(j0 + i) * p.m_ss] ? -INFINITY : dot * p.scale_log2;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) mx = fmaxf(mx, s[i]);
  mx = block_reduce(mx, scratch, true);
  float sum = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float e = mx == -INFINITY ? 0.f : exp2f(s[i] - mx);
    s[i] = e;
    sum += e;
  }
  sum = block_reduce(sum, scratch, false);  // its barrier also publishes s

  float acc[L::C][L::V] = {};
  for (int base = warp * L::KPW; base < n; base += kWarps * L::KPW) {
    const int i = base + kl;
    if (i < n) {
      const float pr = s[i];
      float vr[L::C][L::V];
      load_row<T, E>(vr, v + int64_t(j0 + i) * p.v_st, sub);
#pragma unroll
      for (int c = 0; c < L::C; ++c)
#pragma unroll
        for (int e = 0; e < L::V; ++e) acc[c][e] = fmaf(pr, vr[c][e], acc[c][e]);
    }
  }
  // Sum over the warp's key lanes, then over the warps.
#pragma unroll
  for (int c = 0; c < L::C; ++c)
#pragma unroll
    for (int e = 0; e < L::V; ++e) {
#pragma unroll
      for (int off = 16; off >= L::G; off /= 2) acc[c][e] += __shfl_xor_sync(0xffffffffu, acc[c][e], off);
      if (kl == 0) acc_sh[warp * E + (c * L::G + sub) * L::V + e] = acc[c][e];
    }
  __syncthreads();
  const int64_t part = (int64_t(b) * p.H + h) * p.splits + split;
  for (int d = threadIdx.x; d < E; d += kThreads) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += acc_sh[w * E + d];
    p.part_o[part * E + d] = t;
  }
  if (threadIdx.x == 0) p.part_ml[2 * part] = mx, p.part_ml[2 * part + 1] = sum;
}

// Block (b * H + h): out = sum_s w_s o_s / sum_s w_s l_s, w_s = 2^(m_s - max m).
template <class T, int E>
__global__ void decode_combine(const DecodeParams p) {
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H;
  const float* ml = p.part_ml + int64_t(bh) * p.splits * 2;
  float mx = -INFINITY;
  for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, ml[2 * s]);
  T* out = static_cast<T*>(p.out) + b * p.o_sb + h * p.o_sh;
  for (int d = threadIdx.x; d < E; d += blockDim.x) {
    float num = 0.f, den = 0.f;
    for (int s = 0; s < p.splits; ++s) {
      const float w = ml[2 * s] == -INFINITY ? 0.f : exp2f(ml[2 * s] - mx);
      num += w * p.part_o[(int64_t(bh) * p.splits + s) * E + d];
      den += w * ml[2 * s + 1];
    }
    out[d] = cvt<T>(den > 0.f ? num / den : 0.f);
  }
}

template <class T, int E>
void launch(DecodeParams p, int B, cudaStream_t stream) {
  const size_t smem = (size_t(p.keys_per_split) + size_t(kWarps) * E) * sizeof(float);
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  allow_smem(reinterpret_cast<const void*>(decode_partial<T, E>), smem, device);
  decode_partial<T, E><<<dim3(p.splits, p.H, B), kThreads, smem, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH("sdpa_decode");
  decode_combine<T, E><<<B * p.H, std::min(E, 256), 0, stream>>>(p);
  TG_CUDA_CHECK_LAUNCH("sdpa_decode combine");
}

int multiprocessors(int device) {
  int n = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

}  // namespace

void sdpa_decode(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                 const Tensor& mask) {
  const int B = static_cast<int>(q.shape()[0]), H = static_cast<int>(q.shape()[1]);
  const int S = static_cast<int>(k.shape()[2]), E = static_cast<int>(q.shape()[3]);
  DecodeParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.out = out.data_ptr();
  p.q_sb = q.strides()[0], p.q_sh = q.strides()[1];
  p.k_sb = k.strides()[0], p.k_sh = k.strides()[1], p.k_st = k.strides()[2];
  p.v_sb = v.strides()[0], p.v_sh = v.strides()[1], p.v_st = v.strides()[2];
  p.o_sb = out.strides()[0], p.o_sh = out.strides()[1];
  if (mask.defined()) {  // bool [B, H, 1, S], broadcast dims with stride 0
    p.mask = mask.data_ptr<bool>();
    p.m_sb = mask.strides()[0], p.m_sh = mask.strides()[1], p.m_ss = mask.strides()[3];
  }
  p.H = H, p.Hkv = static_cast<int>(k.shape()[1]), p.S = S;
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  // Enough blocks for two a multiprocessor, at least 32 keys a block, at most kMaxKeysPerSplit.
  const int sms = multiprocessors(q.device().index);  // each call: devices may differ (a cheap host query)
  const int want = std::max(1, (2 * sms + B * H - 1) / (B * H));
  int per = std::max(32, (S + want - 1) / want);
  per = std::min(kMaxKeysPerSplit, (per + 31) / 32 * 32);
  p.keys_per_split = per;
  p.splits = (S + per - 1) / per;
  Tensor parts = Tensor::empty({int64_t(B) * H * p.splits * (E + 2)}, {kFloat32, q.device()});
  p.part_o = parts.data_ptr<float>();
  p.part_ml = p.part_o + int64_t(B) * H * p.splits * E;
  cudaStream_t s = stream_for(q);
  auto by_dim = [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (E) {
      case 8: return launch<T, 8>(p, B, s);
      case 16: return launch<T, 16>(p, B, s);
      case 32: return launch<T, 32>(p, B, s);
      case 64: return launch<T, 64>(p, B, s);
      case 128: return launch<T, 128>(p, B, s);
      default: return launch<T, 256>(p, B, s);
    }
  };
  if (q.dtype() == kBFloat16) by_dim(type_tag<bf16>{});
  else by_dim(type_tag<float>{});
}

}  // namespace tg::cuda
