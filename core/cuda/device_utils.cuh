// What every CUDA kernel shares: value conversion, element packs and their loads / stores,
// alignment, and the float32 / bfloat16 dtype dispatch of the GPU kernels.
//   cvt<D>(v)                  v as D, with the CPU's semantics (tg::convert)
//   Pack<T, N>                 N elements of T moved as one aligned access of N * sizeof(T) bytes
//   p.get(e) / p.set(e, v)     element e of a pack as T
//   elem(p, e)                 element e of a float32 / bfloat16 pack widened to float
//   pack_of<T>(f)              N floats rounded to T as one pack
//   zero_pack(p)               every element 0
//   kPack16<T>                 elements of T in a 16-byte pack
//   load_pack<A>(p, src)       one whole-pack global load under cache hint A (Access)
//   store_pack<A>(dst, p)      one whole-pack global store under cache hint A
//   aligned(p, bytes)          whether p is a multiple of `bytes`
//   dispatch_gpu_float(t, op, f)  f(type_tag<T>{}) for float32 / bfloat16, else an error naming op
//   dispatch_gpu_float_index(t, i, op, f)  f(type_tag<T>{}, type_tag<I>{}), I int32 / int64
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/detail/type_dispatch.h"

namespace tg::cuda {

// ------------------------------------------------------------------ conversion
// bf16 goes through float; float -> bf16 rounds to nearest even in one instruction (NaN stays NaN).
template <class D, class S>
__device__ __forceinline__ D cvt(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, bf16>) {
    return static_cast<D>(__uint_as_float(static_cast<unsigned>(v.bits) << 16));
  } else if constexpr (std::is_same_v<D, bf16>) {
    bf16 r;
    r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)));
    return r;
  } else {
    return static_cast<D>(v);
  }
}

// ------------------------------------------------------------------ packs
// Held as 32-bit words (a pack under 4 bytes as one smaller word): with 16-bit members the
// compiler split each loaded word into halves and joined them again at every use (the norm
// backward issued 2.1x the instructions), so elements go through get / set / elem.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int kBytes = sizeof(T) * N;
  using Word = std::conditional_t<(kBytes >= 4), unsigned, std::conditional_t<(kBytes == 2), unsigned short, unsigned char>>;
  Word w[kBytes >= 4 ? kBytes / 4 : 1];

  __device__ __forceinline__ T get(int e) const {
    T v;
    memcpy(&v, reinterpret_cast<const unsigned char*>(w) + e * sizeof(T), sizeof(T));
    return v;
  }
  __device__ __forceinline__ void set(int e, T v) {
    memcpy(reinterpret_cast<unsigned char*>(w) + e * sizeof(T), &v, sizeof(T));
  }
};

template <class T>
inline constexpr int kPack16 = 16 / int(sizeof(T));

// bf16 is the high half of a float, so an element is its word shifted (even e) or masked (odd e).
template <int N>
__device__ __forceinline__ float elem(const Pack<bf16, N>& p, int e) {
  if constexpr (N == 1) return __uint_as_float(static_cast<unsigned>(p.w[0]) << 16);
  else return __uint_as_float(e % 2 ? p.w[e / 2] & 0xffff0000u : p.w[e / 2] << 16);
}
template <int N>
__device__ __forceinline__ float elem(const Pack<float, N>& p, int e) {
  return __uint_as_float(p.w[e]);
}

// Rounds to nearest even as cvt does; bf16 two at a time (one instruction a pair).
template <class T, int N>
__device__ __forceinline__ Pack<T, N> pack_of(const float (&f)[N]) {
  Pack<T, N> p;
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < N; ++e) p.w[e] = __float_as_uint(f[e]);
  } else if constexpr (N == 1) {
    p.w[0] = cvt<bf16>(f[0]).bits;
  } else {
#pragma unroll
    for (int e = 0; e < N; e += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[e], f[e + 1]);  // f[e] in the low half
      memcpy(&p.w[e / 2], &h, 4);
    }
  }
  return p;
}

template <class T, int N>
__device__ __forceinline__ void zero_pack(Pack<T, N>& p) {
  memset(&p, 0, sizeof p);
}

// The register type of one access of B bytes.
template <int B>
struct RawOf;
template <>
struct RawOf<16> { using type = int4; };
template <>
struct RawOf<8> { using type = int2; };
template <>
struct RawOf<4> { using type = int; };
template <>
struct RawOf<2> { using type = short; };

// Cache hints of whole-pack accesses: `stream` for data read or written once (evict first, so
// what is reused keeps its L2 lines), `plain` the default, `cached` for data every block reads
// (the read-only path). Plain beat both hints on the norm backward's rows (dev/NOTES.md).
enum class Access { stream, plain, cached };

template <Access A, class T, int N>
__device__ __forceinline__ void load_pack(Pack<T, N>& out, const T* p) {
  using R = typename RawOf<sizeof(T) * N>::type;
  const R* q = reinterpret_cast<const R*>(p);
  R r;
  if constexpr (A == Access::stream) r = __ldcs(q);
  else if constexpr (A == Access::cached) r = __ldg(q);
  else r = *q;
  memcpy(&out, &r, sizeof r);
}
template <Access A, class T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& v) {
  static_assert(A != Access::cached, "stores have no read-only path");
  using R = typename RawOf<sizeof(T) * N>::type;
  R r;
  memcpy(&r, &v, sizeof r);
  if constexpr (A == Access::stream) __stcs(reinterpret_cast<R*>(p), r);
  else *reinterpret_cast<R*>(p) = r;
}

// ------------------------------------------------------------------ alignment
__host__ __device__ __forceinline__ bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ------------------------------------------------------------------ dtype dispatch
// float64 exists for the CPU's gradient checks; the GPU kernels take float32 and bfloat16.
template <class F>
void dispatch_gpu_float(DType t, const char* op, F&& f) {
  switch (t) {
    case kFloat32: f(type_tag<float>{}); return;
    case kBFloat16: f(type_tag<bf16>{}); return;
    case kFloat64:
      fail(op, "float64 is not supported on CUDA (float64 is CPU-only, for gradient checks); use "
           "float32 or bfloat16");
    default: fail(op, "wants a floating-point tensor (float32 or bfloat16 on CUDA), got ", t);
  }
}
// f(type_tag<T>{}, type_tag<I>{}) for a float32 / bfloat16 value dtype and an index dtype.
template <class F>
void dispatch_gpu_float_index(DType value, DType index, const char* op, F&& f) {
  dispatch_gpu_float(value, op, [&](auto tag) { dispatch_index(index, op, [&](auto itag) { f(tag, itag); }); });
}

}  // namespace tg::cuda
