// dropout(x, p): zeroes each element with probability p and scales the rest by 1/(1-p) when
// training; the identity otherwise. The mask comes from Philox counters reserved from `gen`,
// so backward regenerates it instead of storing it, and the CPU and the GPU draw the same mask:
// element i (row-major) is kept when uniform01(philox(gen.seed(), first + i / 4).v[i % 4]) >= p,
// `first` being the first of the ceil(numel / 4) counters the call reserves.
// p == 0 or !training returns x itself (no copy, no node); p == 1 returns zeros (zero gradient,
// no counters drawn); p outside [0, 1] is an error.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

Tensor dropout(const Tensor& x, double p, bool training = true, Generator& gen = default_generator());

}  // namespace tg
