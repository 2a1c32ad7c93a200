// The cuDNN handle of each device (builds with cuDNN only; CMakeLists.txt says how it is found).
#ifdef TG_WITH_CUDNN
#include <mutex>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/cudnn_utils.cuh"
#include "core/cuda/runtime.h"

namespace tg::cuda {

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mu;
  static std::vector<cudnnHandle_t> handles;
  cudaStream_t s = stream(device);  // checks the device exists and makes it current
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() < static_cast<size_t>(device_count())) handles.resize(device_count(), nullptr);
  cudnnHandle_t& h = handles[static_cast<size_t>(device)];
  if (!h) {
    cudnnHandle_t created = nullptr;
    TG_CUDNN_CHECK(cudnnCreate(&created));
    TG_CUDNN_CHECK(cudnnSetStream(created, s));
    h = created;
  }
  return h;
}

}  // namespace tg::cuda
#endif
