// Eigen for the CPU kernels, included instead of <Eigen/Core> by every file that uses it (one
// configuration for all, as the ODR wants). Eigen stays single-threaded: tapegrad's own pool
// (core/parallel.h) splits the work, and an Eigen product must not start OpenMP threads of its
// own inside a pool thread.
#pragma once

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
// GCC 12's AVX-512 intrinsics, first included here, warn of their own `__m512 __Y = __Y`
// wherever they are inlined into our code (GCC 13 does not): silenced for their lines alone.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
