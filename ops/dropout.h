// dropout(x, p): zeroes each element with probability p and scales the rest by 1/(1-p) when
// training; the identity otherwise. The mask comes from Philox counters reserved from `gen`,
// so backward regenerates it instead of storing it, and the CPU and the GPU draw the same mask.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

Tensor dropout(const Tensor& x, double p, bool training = true, Generator& gen = default_generator());

}  // namespace tg
