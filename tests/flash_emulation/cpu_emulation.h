// Runs a CUDA kernel on the CPU, for checking its logic on a machine without a GPU: every
// CUDA thread of a block is a ucontext fiber on one OS thread, blocks run one after another.
// Covers what the attention kernels use: threadIdx / blockIdx / blockDim / gridDim,
// __syncthreads, __syncwarp, __shfl_xor_sync / __shfl_up_sync / __shfl_sync (float, int), dynamic shared memory (by default
// `extern __shared__ float smem[]`; emu::use_shared names another array), cp.async as
// emu::cp_async / commit / wait: a copy writes NaN bytes (0xff) at issue and its data at the wait
// that completes its group, so reading a tile before its wait (RAW) or refilling one other warps
// still read (WAR) shows as NaN in the results; and the tensor-core fragments of
// ldmatrix.x4 (.trans) and mma.sync m16n8k16 bf16 as emu::ldmatrix_x4 / emu::mma_16816. Not a
// timing model; a passing run says nothing about bank conflicts, registers or warp-level races
// the fiber order hides, and the MMA sums in float in k order (the tensor core's rounding differs).
//
// Compile with the CUDA headers for the vector types: g++ -std=c++20 -I/usr/local/cuda/include.
#pragma once

#include <ucontext.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

using std::max;  // CUDA's integer min / max
using std::min;

inline uint3 threadIdx, blockIdx;  // the running fiber's
inline dim3 blockDim, gridDim;
namespace {
alignas(16) float smem[(232 << 10) / 4];  // the kernels' `extern __shared__ float smem[]`
}

namespace emu {

struct Copy {
  void* dst;
  std::array<unsigned char, 16> data;
  int bytes;
};
struct Barrier {
  int count = 0, arrived = 0;
  long generation = 0;
};
struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  uint3 tid;
  bool done = false;
  std::vector<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;
  const Barrier* waiting = nullptr;  // the barrier it waits at, until its generation moves
  long waiting_for = 0;
};

inline Fiber* current = nullptr;
inline unsigned char* shared = reinterpret_cast<unsigned char*>(smem);  // the blocks' shared memory
inline size_t shared_size = sizeof(smem);
// Kernels whose dynamic shared memory is another array (e.g. `extern __shared__ unsigned char
// smem[]` in a namespace) name it here before launching.
inline void use_shared(void* p, size_t bytes) {
  shared = static_cast<unsigned char*>(p);
  shared_size = bytes;
}
inline ucontext_t scheduler;
inline Barrier block_barrier;
inline std::vector<Barrier> warp_barriers;
inline std::vector<std::array<float, 32>> warp_exchange;
inline std::vector<std::array<const void*, 32>> warp_pointers;           // ldmatrix's row addresses
inline std::vector<std::array<std::array<uint32_t, 6>, 32>> warp_frags;  // mma's a[4], b0, b1

inline void arrive(Barrier& b) {
  const long mine = b.generation;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  current->waiting = &b;
  current->waiting_for = mine;
  while (b.generation == mine) swapcontext(&current->ctx, &scheduler);
  current->waiting = nullptr;
}
inline bool blocked(const Fiber& f) { return f.waiting && f.waiting->generation == f.waiting_for; }

inline void cp_async(void* dst, const void* src, int bytes, bool valid) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % bytes) {
    std::fprintf(stderr, "cp.async of %d bytes misaligned\n", bytes);
    std::abort();
  }
  Copy c{dst, {}, bytes};
  if (valid) std::memcpy(c.data.data(), src, bytes);  // else zeros, as src-size 0
  std::memset(dst, 0xff, bytes);
  current->open.push_back(c);
}
inline void commit() {
  current->groups.push_back(std::move(current->open));
  current->open.clear();
}
inline void wait(size_t pending) {  // cp.async.wait_group: all but the `pending` newest groups land
  while (current->groups.size() > pending) {
    for (const Copy& c : current->groups.front()) std::memcpy(c.dst, c.data.data(), c.bytes);
    current->groups.erase(current->groups.begin());
  }
}

template <class P>
struct Entry {
  static inline void (*kernel)(P);
  static inline const P* params;
  static void run() {
    kernel(*params);
    if (!current->open.empty() || !current->groups.empty()) {
      std::fprintf(stderr, "a thread ended with cp.async copies not waited for\n");
      std::abort();
    }
    current->done = true;
    swapcontext(&current->ctx, &scheduler);
  }
};

// A fiber that runs entry as thread t; out of line, as getcontext returns twice.
[[gnu::noinline]] inline void start(Fiber& f, int t, void (*entry)()) {
  f.done = false;
  f.waiting = nullptr;
  f.groups.clear();
  f.open.clear();
  f.tid = make_uint3(t, 0, 0);
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, entry, 0);
}

// kernel<<<grid, threads, smem_bytes>>>(p), block by block.
template <class P>
void launch(void (*kernel)(P), dim3 grid, int threads, size_t smem_bytes, const P& p) {
  if (smem_bytes > shared_size) {
    std::fprintf(stderr, "%zu bytes of shared memory: more than a multiprocessor has\n", smem_bytes);
    std::abort();
  }
  Entry<P>::kernel = kernel;
  Entry<P>::params = &p;
  std::vector<Fiber> fibers(threads);
  for (Fiber& f : fibers) f.stack.resize(256 << 10);
  const int warps = (threads + 31) / 32;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(shared, 0xff, shared_size);
        block_barrier = Barrier{threads};
        warp_barriers.assign(warps, Barrier{32});
        warp_exchange.assign(warps, {});
        warp_pointers.assign(warps, {});
        warp_frags.assign(warps, {});
        for (int t = 0; t < threads; ++t) start(fibers[t], t, &Entry<P>::run);
        ::blockIdx = make_uint3(x, y, z), ::blockDim = dim3(threads), ::gridDim = grid;
        // Warps run one at a time, each as far as it can (to a barrier it waits at, or its end),
        // in ascending order in even blocks and descending in odd ones: a warp that runs ahead
        // of the others shows the shared-memory races the barriers should prevent (it refills a
        // tile the others still read, or reads one they have not loaded yet).
        const bool reverse = (x + grid.x * (y + grid.y * z)) % 2;
        for (;;) {
          bool ran = false, left = false;
          for (int i = 0; i < warps; ++i) {
            const int w = reverse ? warps - 1 - i : i;
            for (bool again = true; again;) {
              again = false;
              for (int t = 32 * w; t < std::min(threads, 32 * w + 32); ++t) {
                Fiber& f = fibers[t];
                if (f.done || blocked(f)) continue;
                current = &f;
                ::threadIdx = f.tid;
                swapcontext(&scheduler, &f.ctx);
                again = ran = true;
              }
            }
            for (int t = 32 * w; t < std::min(threads, 32 * w + 32); ++t) left |= !fibers[t].done;
          }
          if (!left) break;
          if (!ran) {
            std::fprintf(stderr, "every thread left waits at a barrier that not all of its threads reach\n");
            std::abort();
          }
        }
        for (size_t i = smem_bytes; i < shared_size; ++i)
          if (shared[i] != 0xff) {
            std::fprintf(stderr, "shared memory written past the launch's %zu bytes\n", smem_bytes);
            std::abort();
          }
      }
}

}  // namespace emu

inline void __syncthreads() { emu::arrive(emu::block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::arrive(emu::warp_barriers[threadIdx.x / 32]); }
namespace emu {
// Lane src(lane)'s v for every lane of the warp (each takes part); ints travel as their bits.
template <class T, class Src>
T shuffle(T v, Src src) {
  static_assert(sizeof(T) == sizeof(float));
  std::array<float, 32>& x = warp_exchange[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  std::memcpy(&x[lane], &v, sizeof v);
  __syncwarp();
  T r;
  std::memcpy(&r, &x[src(lane)], sizeof r);
  __syncwarp();
  return r;
}
}  // namespace emu
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return emu::shuffle(v, [&](int lane) { return lane ^ lane_mask; });
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta) {  // lanes below delta keep their own
  return emu::shuffle(v, [&](int lane) { return lane >= int(delta) ? lane - int(delta) : lane; });
}
template <class T>
T __shfl_sync(unsigned, T v, int src_lane) {
  return emu::shuffle(v, [&](int) { return src_lane % 32; });
}

namespace emu {

inline float bf16_at(const void* p) {  // the bf16 at p, widened
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float bf16_half(uint32_t r, int hi) {  // element hi (0: low 16 bits) of a bf16 pair
  const uint32_t bits = hi ? r & 0xffff0000u : r << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives the address of row l % 8 of
// matrix l / 8; r[i] gets (row l / 4, cols 2 (l % 4) + {0, 1}) of matrix i, low half first, or
// with trans (rows 2 (l % 4) + {0, 1}, col l / 4).
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  warp_pointers[w][l] = row;
  __syncwarp();
  for (int i = 0; i < 4; ++i) {
    const auto* rows = &warp_pointers[w][8 * i];
    uint16_t lo, hi;
    if (!trans) {
      const unsigned char* p = static_cast<const unsigned char*>(rows[l / 4]) + 4 * (l % 4);
      std::memcpy(&lo, p, 2);
      std::memcpy(&hi, p + 2, 2);
    } else {
      std::memcpy(&lo, static_cast<const unsigned char*>(rows[2 * (l % 4)]) + 2 * (l / 4), 2);
      std::memcpy(&hi, static_cast<const unsigned char*>(rows[2 * (l % 4) + 1]) + 2 * (l / 4), 2);
    }
    r[i] = uint32_t(lo) | uint32_t(hi) << 16;
  }
  __syncwarp();
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += a b: lane (g = l / 4, t = l % 4)
// holds A (16 x 16) rows g / g + 8 at cols 2t + {0, 1} (a[0] / a[1]) and 2t + 8 + {0, 1} (a[2] /
// a[3]), B (16 x 8) cols g at rows 2t + {0, 1} (b0) and 2t + 8 + {0, 1} (b1), and D rows g / g + 8
// at cols 2t + {0, 1} (d[0..1] / d[2..3]).
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
  auto& f = warp_frags[w];
  f[l] = {a[0], a[1], a[2], a[3], b0, b1};
  __syncwarp();
  auto A = [&](int row, int k) { return bf16_half(f[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2); };
  auto B = [&](int k, int n) { return bf16_half(f[4 * n + (k % 8) / 2][4 + (k >= 8)], k % 2); };
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    d[e] = acc;
  }
  __syncwarp();
}

}  // namespace emu
