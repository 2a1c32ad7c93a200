// ops/cuda/flash_ptx.cuh on the CPU, over cpu_emulation.h: the same functions (cp.async,
// ldmatrix, mma.sync, ex2.approx, lg2.approx, the dependent-launch controls) for the CPU harnesses
// that run the attention kernels. It defines TG_FLASH_PTX_EMULATE, the switch that makes
// flash_ptx.cuh declare nothing; include it before ops/cuda/flash_attention.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cpu_emulation.h"

#define TG_FLASH_PTX_EMULATE 1

namespace tg::cuda::flash {
inline void cp_async16(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, 16, valid); }
inline void cp_async4(void* dst, const void* src, bool valid) { emu::cp_async(dst, src, 4, valid); }
inline void cp_async_commit() { emu::commit(); }
template <int N>
void cp_async_wait() {
  emu::wait(N);
}
inline void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) { emu::ldmatrix_x4(r, p, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16* p) { emu::ldmatrix_x4(r, p, true); }
inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu::mma_16816(d, a, b0, b1); }
inline float exp2_approx(float x) { return std::exp2(x); }
inline float log2_approx(float x) { return std::log2(x); }
inline void launch_dependents() {}
inline void wait_for_previous_kernel() {}
}  // namespace tg::cuda::flash
