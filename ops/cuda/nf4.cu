// quantize_4bit on CUDA (from_pretrained quantises each weight on the GPU as it arrives): one warp a
// block of `blocksize` values: the block's max |x| (a max: the same whatever the order, so the
// CPU's value), then each lane packs pairs x * (1 / absmax) rounded as the CPU rounds them
// (__fdiv_rn, __fmul_rn), so the bytes equal the CPU kernel's. For blocks of 64 a lane reads and
// writes one pair. A NaN or inf lowers first_bad to its index (atomicMin: the first one).
//
// dequantize_4bit on CUDA: out[i] = quant_map[code i] * absmax[i / blocksize], rounded to out's
// dtype, with absmax = nested_quant_map[q] * nested_absmax[block / 256] + offset when double
// quantised (products and sums rounded as the CPU kernel rounds them, so both give the same bits).
// Memory traffic: n / 2 bytes of codes and one absmax (4 bytes, or 1 byte + a cached nested
// value) per block read, n * sizeof(out) written: for bfloat16 out 2.5 bytes a weight, about 80%
// of it the store. Each thread turns the codes of one 16-byte output pack (8 bf16 or 4 float32
// values: a 4- or 2-byte load) into that pack, so a warp's loads and stores are both contiguous;
// one pack a thread, no grid-stride loop, keeps many independent loads in flight. The 16-value
// map sits in shared memory (16 words in 16 banks: no conflicts).
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/nf4_kernels.h"
#include "ops/nf4_math.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// The P / 2 bytes of codes of pack c, streamed (read once).
template <int P>
__device__ __forceinline__ uint32_t load_codes(const uint8_t* packed, int64_t c) {
  if constexpr (P == 8) return __ldcs(reinterpret_cast<const unsigned int*>(packed) + c);
  else if constexpr (P == 4) return __ldcs(reinterpret_cast<const unsigned short*>(packed) + c);
  else return __ldcs(packed + c);
}

struct Scales {
  const float* absmax;         // float32 absmax, or null when nested
  const uint8_t* codes;        // nested: the 8-bit absmax codes
  const float* nested_absmax;  // nested: one scale per 256 absmax
  const float* nested_map;     // nested: the 256-value dynamic map
  float offset;
  __device__ __forceinline__ float of(int64_t block) const {
    if (absmax) return __ldg(absmax + block);
    const float a = __ldg(nested_map + __ldg(codes + block));
    return __fadd_rn(__fmul_rn(a, __ldg(nested_absmax + block / nf4::kNestedBlocksize)), offset);
  }
};

template <class T>
__global__ void dequantize_4bit_kernel(T* __restrict__ out, const uint8_t* __restrict__ packed,
                                       const float* __restrict__ quant_map, Scales scales, int block_shift,
                                       int64_t n, bool vectors) {
  __shared__ float lut[16];
  if (threadIdx.x < 16) lut[threadIdx.x] = quant_map[threadIdx.x];
  __syncthreads();
  constexpr int P = kPack16<T>;  // values of one 16-byte store; P >= 2, so a pack starts on a byte
  const int64_t chunks = (n + P - 1) / P;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t first = c * P;
    const float s = scales.of(first >> block_shift);  // a pack lies in one block: blocksize >= 32
    if (vectors && first + P <= n) {
      const uint32_t codes = load_codes<P>(packed, c);
      float f[P];
#pragma unroll
      for (int e = 0; e < P; e += 2) {
        const uint32_t byte = (codes >> (4 * e)) & 0xFF;  // values e, e + 1 share byte e / 2
        f[e] = __fmul_rn(lut[byte >> 4], s);
        f[e + 1] = __fmul_rn(lut[byte & 0x0F], s);
      }
      store_pack<Access::stream>(out + first, pack_of<T>(f));
    } else {
      const int64_t last = first + P < n ? first + P : n;
      for (int64_t i = first; i < last; ++i) {
        const uint8_t byte = packed[i / 2];
        out[i] = cvt<T>(__fmul_rn(lut[i % 2 == 0 ? byte >> 4 : byte & 0x0F], s));
      }
    }
  }
}

template <class T>
__global__ void quantize_4bit_kernel(const T* __restrict__ x, uint8_t* __restrict__ packed, float* __restrict__ absmax,
                                     unsigned long long* first_bad, int64_t n, int64_t blocksize,
                                     const nf4::Codebook book) {
  const int lane = threadIdx.x % 32;
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t b = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; b < blocks; b += warps) {
    const int64_t first = b * blocksize, last = first + blocksize < n ? first + blocksize : n;
    float m = 0.0f;
    int64_t bad = n;
    for (int64_t i = first + lane; i < last; i += 32) {
      const float v = cvt<float>(x[i]);
      if (!isfinite(v) && i < bad) bad = i;
      m = fmaxf(m, fabsf(v));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (bad < n) atomicMin(first_bad, static_cast<unsigned long long>(bad));
    if (lane == 0) absmax[b] = m;
    const float inv = __fdiv_rn(1.0f, m);
    for (int64_t i = first + 2 * lane; i < last; i += 64) {
      const float second = i + 1 < n ? cvt<float>(x[i + 1]) : 0.0f;
      packed[i / 2] = nf4::pack_codes(__fmul_rn(cvt<float>(x[i]), inv), __fmul_rn(second, inv), book);
    }
  }
}

}  // namespace

void quantize_4bit(const Tensor& x, const Tensor& packed, const Tensor& absmax, const Tensor& first_bad,
                   int64_t blocksize, bool fp4) {
  const int64_t n = x.numel(), blocks = (n + blocksize - 1) / blocksize;
  auto* bad = reinterpret_cast<unsigned long long*>(first_bad.data_ptr<int64_t>());
  dispatch_gpu_float(x.dtype(), "quantize_4bit", [&](auto tag) {
    using T = typename decltype(tag)::type;
    quantize_4bit_kernel<T><<<blocks_for(blocks * 32, kThreads), kThreads, 0, stream_for(x)>>>(
        x.data_ptr<T>(), packed.data_ptr<uint8_t>(), absmax.data_ptr<float>(), bad, n, blocksize,
        fp4 ? nf4::kFP4Codebook : nf4::kNF4Codebook);
    TG_CUDA_CHECK_LAUNCH("quantize_4bit");
  });
}

void dequantize_4bit(const Tensor& out, const Tensor& packed, const Tensor& absmax, const Tensor& quant_map,
                     const Tensor& nested_absmax, const Tensor& nested_quant_map, float offset, int64_t blocksize) {
  const int64_t n = out.numel();
  int shift = 0;
  while ((int64_t(1) << shift) < blocksize) ++shift;
  Scales scales{};
  if (nested_absmax.defined()) {
    scales.codes = absmax.data_ptr<uint8_t>();
    scales.nested_absmax = nested_absmax.data_ptr<float>();
    scales.nested_map = nested_quant_map.data_ptr<float>();
    scales.offset = offset;
  } else {
    scales.absmax = absmax.data_ptr<float>();
  }
  const uint8_t* codes = packed.data_ptr<uint8_t>();
  dispatch_gpu_float(out.dtype(), "dequantize_4bit", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    constexpr int P = kPack16<T>;
    const bool vectors = aligned(codes, P / 2) && aligned(dst, 16);
    const int64_t chunks = (n + P - 1) / P;
    dequantize_4bit_kernel<T><<<blocks_for(chunks, kThreads, (int64_t(1) << 31) - 1), kThreads, 0, stream_for(out)>>>(
        dst, codes, quant_map.data_ptr<float>(), scales, shift, n, vectors);
    TG_CUDA_CHECK_LAUNCH("dequantize_4bit");
  });
}

}  // namespace tg::cuda
