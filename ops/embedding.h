// embedding(weight [V, D], indices int32/int64 of any shape) -> [..., D]: gathers rows.
// Backward scatter-adds into dweight only when the table needs a gradient (a frozen embedding
// costs nothing in backward); repeated indices add up (in float32, or float64 for float64
// tables; on CUDA by atomics, so the last bits of a repeated row's sum can vary between runs).
// An index outside [0, V) is an error. On the CPU it is raised at once, naming the index and its
// position. On CUDA the op cannot wait for the device to look at the indices: the bad row reads
// nothing and comes out as zeros (it also adds no gradient), and the next embedding or
// cross_entropy call on that device, once the kernel has finished, throws tg::Error naming the
// index (see ops/cuda/index_check.cuh). Anything that waits for the device (item(), a copy to
// the host) makes the next call see it.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tg
