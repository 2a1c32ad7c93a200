// Eigen for the CPU kernels, included instead of <Eigen/Core> by every file that uses it (one
// configuration for all, as the ODR wants). Eigen stays single-threaded: tapegrad's own pool
// (core/parallel.h) splits the work, and an Eigen product must not start OpenMP threads of its
// own inside a pool thread.
#pragma once

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#include <Eigen/Core>
