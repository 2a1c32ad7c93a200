// The one dispatch point between an op and its backends. Every op's backend contract lives in
// ops/<op>_kernels.h as the same void function in namespace tg::cpu and tg::cuda; the op's
// .cpp calls TG_DISPATCH(device, kernel, args...), which picks the backend by device. Kernels
// take their outputs pre-allocated, so an op decides (and tests can see) every allocation.
#pragma once

#include "core/error.h"

#ifdef TG_WITH_CUDA
#define TG_DISPATCH(device, kernel, ...) \
  ((device).is_cuda() ? ::tg::cuda::kernel(__VA_ARGS__) : ::tg::cpu::kernel(__VA_ARGS__))
#else
#define TG_DISPATCH(device, kernel, ...) \
  ((device).is_cuda() ? ::tg::fail(#kernel, "needs the CUDA backend, which this build lacks") \
                      : ::tg::cpu::kernel(__VA_ARGS__))
#endif
