// Out-of-range indices on the GPU (embedding rows, cross_entropy targets, index_copy_ entries,
// sort_by_expert's expert ids).
//
// A kernel cannot throw, and checking the indices on the host would make the op wait for the
// device. So a kernel that meets a bad index reads and writes nothing for it (the op's result
// holds zeros, or nan for a loss) and records the first bad index in a small per-device flag.
// Behind the kernel the op queues a copy of the flag to pinned host memory; the next checked op
// on that device (embedding or cross_entropy, forward or backward) whose copy has landed throws
// tg::Error naming the index. The error is late by at least one call (more when the host runs
// far ahead of the device; anything that waits for the device, e.g. item(), makes the next call
// see it), but it is never lost and nothing outside a tensor is ever touched.
#pragma once

#include <cuda_runtime.h>

namespace tg::cuda::index_check {

enum What : long long { kEmbedding = 1, kCrossEntropy = 2, kIndexCopy = 3, kMoeExpert = 4 };

// Four words on the device: {what (0 = no error), bad index, bound, unused}.
long long* flag(int device);
// Throws the recorded error of an earlier launch on `device` once its report has arrived.
void raise_pending(int device);
// Queues the copy of the flag to the host behind the kernels already on `stream`.
void watch(int device, cudaStream_t stream);

// Device side: the first bad index wins, later ones are dropped.
__device__ __forceinline__ void report(long long* flag, long long what, long long index, long long bound) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(flag), 0ull, static_cast<unsigned long long>(what)) == 0ull) {
    flag[1] = index;
    flag[2] = bound;
  }
}

}  // namespace tg::cuda::index_check
