// The PTX the flash-attention kernels (ops/cuda/flash_attention.cuh) use: cp.async, ldmatrix,
// mma.sync m16n8k16 bf16, ex2.approx / lg2.approx and the programmatic-dependent-launch controls.
// Kept apart so that the kernels can run on the CPU: with TG_FLASH_PTX_EMULATE defined (by
// tests/flash_emulation/flash_ptx_cpu.h, which defines the same functions for a host compiler)
// this file declares nothing. The CUDA build never defines it.
#ifndef TG_OPS_CUDA_FLASH_PTX_CUH
#define TG_OPS_CUDA_FLASH_PTX_CUH

#if defined(TG_FLASH_PTX_EMULATE) && defined(__CUDACC__)
#error "TG_FLASH_PTX_EMULATE is for the host-compiled CPU emulation, not for nvcc"
#endif

#if !defined(TG_FLASH_PTX_EMULATE)
#include <cuda_bf16.h>

#include <cstdint>

namespace tg::cuda::flash {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, zero-filled when !valid (src must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and receives
// (row l / 4, cols 2 (l % 4) + {0, 1}) of each (transposed with _t).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// d += a b for a 16x16 (row-major) and b 16x8 (column-major) bf16 tile, float32 d.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float exp2_approx(float x) {  // ex2.approx: exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float log2_approx(float x) { return __log2f(x); }  // lg2.approx

// Programmatic dependent launch (sm_90): a kernel launched with the programmatic-serialization
// attribute may start while the kernel before it in the stream runs. wait_for_previous_kernel
// blocks until that kernel has finished and its writes are visible; launch_dependents lets the
// next kernel start once every block of this one has called it.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_kernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace tg::cuda::flash
#endif  // !TG_FLASH_PTX_EMULATE

#endif  // TG_OPS_CUDA_FLASH_PTX_CUH
