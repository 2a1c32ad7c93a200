// cuBLAS helpers: every cuBLAS call goes through TG_CUBLAS_CHECK, which raises tg::Error naming
// the call, the status and where it was made; cublas_handle(device) is the device's handle.
#pragma once

#include <cublas_v2.h>

#include "core/error.h"

namespace tg::cuda {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(detail::cat("cublas: ", call, " failed with ", cublasGetStatusName(st), " (",
                          cublasGetStatusString(st), ") at ", file, ":", line));
}

#define TG_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    cublasStatus_t tg_st_ = (call);                                                             \
    if (tg_st_ != CUBLAS_STATUS_SUCCESS) ::tg::cuda::throw_cublas_error(tg_st_, #call, __FILE__, __LINE__); \
  } while (0)

// The cuBLAS handle of `device`, created on first use: bound to the device's stream, with a
// workspace from the caching allocator (so cuBLAS never allocates on its own and a CUDA graph
// can capture its calls), float32 split-K reductions for bf16 GEMMs. Lives until exit.
cublasHandle_t cublas_handle(int device);

}  // namespace tg::cuda
