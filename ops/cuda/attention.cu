// Launches the flash-attention kernels of ops/cuda/flash_attention.cuh for the backend contract
// (ops/attention_kernels.h): tile shapes per head dim, the mask's and the band's kernel variants,
// traces.
#include "ops/cuda/flash_attention.cuh"

#include <algorithm>
#include <type_traits>

#include "core/cuda/cuda_utils.cuh"
#include "core/trace.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"

namespace tg::cuda {
namespace {

using namespace flash;

Rows rows_of(const Tensor& t) {
  if (!t.defined()) return {};
  const int64_t n = t.dim();
  Rows r;
  r.p = static_cast<__nv_bfloat16*>(t.data_ptr());
  r.sb = n == 4 ? t.strides()[0] : 0;
  r.sh = t.strides()[n - 3];
  r.st = t.strides()[n - 2];
  return r;
}

Params params_of(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& first) {
  const char* op = "scaled_dot_product_attention (CUDA)";
  const int64_t n = q.dim();
  TG_CHECK((n == 3 || n == 4) && q.dtype() == kBFloat16 && k.dtype() == kBFloat16 && v.dtype() == kBFloat16, op,
           "the flash kernels want bfloat16 3-D or 4-D q, k, v, got ", q.dtype(), " ", q.shape());
  const int64_t E = q.shape()[n - 1];
  TG_CHECK(v.shape()[n - 1] == E && (E == 32 || E == 64 || E == 128), op, "the flash kernels want head_dim 32, 64 or ",
           "128 for q, k and v, got q ", q.shape(), ", v ", v.shape());
  static_assert(kCudaAttentionMaxSeq == int64_t{65535} * kBlock, "the grid's y holds 65,535 blocks of kBlock rows");
  TG_CHECK(q.shape()[n - 2] <= kCudaAttentionMaxSeq && k.shape()[n - 2] <= kCudaAttentionMaxSeq, op,
           "the flash kernels take sequences of at most ", kCudaAttentionMaxSeq, " tokens, got ", q.shape()[n - 2],
           " queries and ", k.shape()[n - 2], " keys: split the row (or pack shorter ones)");
  Params p;
  p.q = rows_of(q), p.k = rows_of(k), p.v = rows_of(v);
  p.B = n == 4 ? static_cast<int>(q.shape()[0]) : 1;
  p.H = static_cast<int>(q.shape()[n - 3]);
  p.Hkv = static_cast<int>(k.shape()[n - 3]);
  p.L = static_cast<int>(q.shape()[n - 2]);
  p.S = static_cast<int>(k.shape()[n - 2]);
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.causal = causal;
  if (first.defined()) {
    TG_CHECK(causal && first.dtype() == kInt32 && first.dim() == 2 && first.shape()[1] == p.L, op,
             "a band wants causal attention and int32 first keys [rows, ", p.L, "], got ", first.shape());
    p.first = first.data_ptr<int>();
    p.first_sb = first.shape()[0] == 1 ? 0 : p.L;
  }
  return p;
}

// Runs kernel<<<grid, 128, smem>>>(p) on the current device. With `overlap` the kernel may start
// while the one before it in the stream finishes (programmatic dependent launch): only for a
// kernel that waits for that one (flash_attention.cuh says where), itself one of ours, and only
// where the kernel has its griddepcontrol.wait (sm_90 code).
template <class Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, const Params& p, cudaStream_t s, bool overlap = false) {
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  const void* fn = reinterpret_cast<const void*>(kernel);
  allow_smem(fn, smem, device);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = s;
  config.attrs = &attr;
  config.numAttrs = overlap && compiled_for_sm90(fn, device) ? 1 : 0;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

template <int HD>
constexpr size_t tile_bytes(int rows) {
  return size_t(rows) * kLd<HD> * sizeof(__nv_bfloat16);
}

// Tile shapes per head dim: forward 16 MT query rows a warp and BN keys a step; dk / dv 16 MT keys
// a warp and BQ queries a step; dq 16 MT query rows a warp and BN keys a step. The fastest of
// dev/cuda/02_attention_tiles.cu's on the H200 (8x12x1024x64 and 4x32x2048x128, causal; the table is
// in dev/cuda/attention.md); head dim 32 (not timed) keeps the shapes 64 had before.
template <int HD>
struct Tiles {
  static constexpr int kFwdMT = 2, kFwdBN = HD == 64 ? 128 : 64;
  static constexpr int kKvMT = 1, kBQ = 64;
  static constexpr int kDqMT = HD == 64 ? 1 : 2, kBN = HD == 32 ? 64 : 32;
};

template <int HD, bool kBand>
void forward_hd(const Params& p, cudaStream_t s) {
  constexpr int MT = Tiles<HD>::kFwdMT, BN = Tiles<HD>::kFwdBN;
  const dim3 grid = flash_grid((p.L + kBlock * MT - 1) / (kBlock * MT), p.H, p.B);
  launch(flash_forward<HD, MT, BN, kBand>, grid, tile_bytes<HD>(kBlock * MT + 4 * BN), p, s);
}

template <int HD, bool kBand>
void backward_hd(const Params& p, bool want_dq, bool want_dk, bool want_dv, cudaStream_t s) {
  if (want_dq || want_dk) {
    const int64_t rows = int64_t(p.B) * p.H * p.L;
    attention_delta<HD><<<blocks_for(rows, 256 / 32 * kDeltaRowsPerWarp<HD>), 256, 0, s>>>(p);
    TG_CUDA_CHECK_LAUNCH("attention_delta");
  }
  if (want_dk || want_dv) {
    constexpr int MT = Tiles<HD>::kKvMT, BQ = Tiles<HD>::kBQ;
    const dim3 grid = flash_grid((p.S + kBlock * MT - 1) / (kBlock * MT), p.Hkv, p.B);
    // lse and delta (and a band's first keys) of two stages
    const size_t smem = tile_bytes<HD>(2 * kBlock * MT + 4 * BQ) + (kBand ? 6 : 4) * BQ * sizeof(float);
    const bool after_delta = want_dq || want_dk;
    if (want_dk && want_dv) {
      KernelTrace::record("sdpa.flash_cuda.dk_dv");
      launch(flash_backward_dkdv<HD, BQ, MT, true, true, kBand>, grid, smem, p, s, after_delta);
    } else if (want_dk) {
      KernelTrace::record("sdpa.flash_cuda.dk");
      launch(flash_backward_dkdv<HD, BQ, MT, true, false, kBand>, grid, smem, p, s, after_delta);
    } else {
      KernelTrace::record("sdpa.flash_cuda.dv");
      launch(flash_backward_dkdv<HD, BQ, MT, false, true, kBand>, grid, smem, p, s, after_delta);
    }
  }
  if (want_dq) {
    constexpr int MT = Tiles<HD>::kDqMT, BN = Tiles<HD>::kBN;
    KernelTrace::record("sdpa.flash_cuda.dq");
    const dim3 grid = flash_grid((p.L + kBlock * MT - 1) / (kBlock * MT), p.H, p.B);
    launch(flash_backward_dq<HD, BN, MT, kBand>, grid, tile_bytes<HD>(2 * kBlock * MT + 4 * BN), p, s,
           want_dk || want_dv);
  }
}

// Head dim and band as template arguments: f(std::integral_constant<int, HD>, std::bool_constant<kBand>).
template <class F>
void with_shape(int64_t hd, bool band, F&& f) {
  auto with_band = [&](auto hd_tag) {
    if (band) f(hd_tag, std::true_type{});
    else f(hd_tag, std::false_type{});
  };
  switch (hd) {
    case 32: return with_band(std::integral_constant<int, 32>{});
    case 64: return with_band(std::integral_constant<int, 64>{});
    default: return with_band(std::integral_constant<int, 128>{});
  }
}

}  // namespace

void sdpa_band(const Tensor& first, const Tensor& position_ids, int64_t window) {
  const int64_t rows = first.shape()[0], L = first.shape()[1];
  TG_CHECK(rows <= INT32_MAX && L <= INT32_MAX, "banded_causal_attention (CUDA)", "a band of ", rows, " x ", L,
           " queries is past 2^31");
  constexpr int kRowsPerBlock = kThreads / 32;
  // A window as long as the row reaches every key: capped there, it fits an int.
  const BandParams bp{first.data_ptr<int>(), position_ids.defined() ? position_ids.data_ptr<int64_t>() : nullptr,
                      static_cast<int>(rows), static_cast<int>(L), static_cast<int>(std::min(window, L))};
  attention_band<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0, stream_for(first)>>>(bp);
  TG_CUDA_CHECK_LAUNCH("attention_band");
}

void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool causal, double scale, const Tensor& first) {
  Params p = params_of(q, k, v, causal, scale, first);
  p.o = rows_of(out);
  p.lse = lse.data_ptr<float>();
  cudaStream_t s = stream_for(q);
  with_shape(q.shape().back(), first.defined(), [&](auto hd, auto band) {
    forward_hd<decltype(hd)::value, decltype(band)::value>(p, s);
  });
}

void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& delta,
                   bool causal, double scale, const Tensor& first) {
  Params p = params_of(q, k, v, causal, scale, first);
  p.o = rows_of(out), p.dout = rows_of(dout), p.dq = rows_of(dq), p.dk = rows_of(dk), p.dv = rows_of(dv);
  p.lse = lse.data_ptr<float>();
  p.delta = delta.defined() ? delta.data_ptr<float>() : nullptr;
  cudaStream_t s = stream_for(q);
  const bool wq = dq.defined(), wk = dk.defined(), wv = dv.defined();
  with_shape(q.shape().back(), first.defined(), [&](auto hd, auto band) {
    backward_hd<decltype(hd)::value, decltype(band)::value>(p, wq, wk, wv, s);
  });
}

}  // namespace tg::cuda
