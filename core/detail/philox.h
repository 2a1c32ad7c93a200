// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Block i of a stream is a pure function of (key, i), so the CPU and
// CUDA produce the same bits for the same counters, in any order, on any number of threads.
#pragma once

#include <cstdint>

#include "core/bfloat16.h"  // TG_HOST_DEVICE

namespace tg {

struct Philox4 {
  uint32_t v[4];
};

TG_HOST_DEVICE inline Philox4 philox(uint64_t key, uint64_t counter, uint64_t stream = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// A uniform float in [0, 1) with 24 random bits: exact, so identical on every device.
TG_HOST_DEVICE inline float uniform01(uint32_t u) { return static_cast<float>(u >> 8) * (1.0f / 16777216.0f); }

}  // namespace tg
