// cuDNN helpers (builds with cuDNN only: TG_WITH_CUDNN): every cuDNN call goes through
// TG_CUDNN_CHECK, which raises tg::Error naming the call, the status, cuDNN's own last message and
// where it was made; cudnn_handle(device) is the device's handle (core/cuda/cudnn.cu).
#pragma once

#include <cudnn.h>

#include "core/error.h"

namespace tg::cuda {

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  char last[512] = "";
  cudnnGetLastErrorString(last, sizeof(last));
  throw Error(detail::cat("cudnn: ", call, " failed with ", cudnnGetErrorString(st), " (", static_cast<int>(st),
                          last[0] ? std::string(": ") + last : std::string(), ") at ", file, ":", line));
}

#define TG_CUDNN_CHECK(call)                                                                   \
  do {                                                                                         \
    cudnnStatus_t tg_st_ = (call);                                                             \
    if (tg_st_ != CUDNN_STATUS_SUCCESS) ::tg::cuda::throw_cudnn_error(tg_st_, #call, __FILE__, __LINE__); \
  } while (0)

// The cuDNN handle of `device`, created on first use and bound to the device's stream (so its
// work is ordered with every op's and a CUDA graph captures it). Lives until exit.
cudnnHandle_t cudnn_handle(int device);

}  // namespace tg::cuda
