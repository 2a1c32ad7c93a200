// Keys and their values sorted by the keys' low end_bit bits with CUB's stable radix sort (equal
// keys keep their order), its temporary storage from the caching allocator (stream-ordered reuse
// after the call). The embedding's deterministic backward and MoE routing sort this way.
#pragma once

#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/cuda_utils.cuh"
#include "core/tensor.h"

namespace tg::cuda {

inline void radix_sort_pairs(const uint32_t* keys, uint32_t* sorted_keys, const int32_t* values, int32_t* sorted_values,
                             int n, int end_bit, Device device, cudaStream_t s) {
  size_t temp_bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_keys, values, sorted_values, n, 0,
                                                end_bit, s));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 8 + 1)}, {kInt64, device});
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr<int64_t>(), temp_bytes, keys, sorted_keys, values,
                                                sorted_values, n, 0, end_bit, s));
}

}  // namespace tg::cuda
