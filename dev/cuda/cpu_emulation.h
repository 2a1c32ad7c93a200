// Runs a dev/cuda kernel on the CPU, for checking its logic on a machine without a GPU: every
// CUDA thread of a block is a ucontext fiber on one OS thread, blocks run one after another.
// Covers what the float32 attention kernels use: threadIdx / blockIdx / blockDim / gridDim,
// __syncthreads, __syncwarp, __shfl_xor_sync (float), dynamic shared memory declared as
// `extern __shared__ float smem[]` (NaN at each block's start, writes past the launch's size
// abort), and cp.async as emu::cp_async / commit / wait: a copy writes NaN at issue and its data
// at the wait that completes its group, so reading a tile before its wait (RAW) or refilling one
// other warps still read (WAR) shows as NaN in the results. Not a timing model; a passing run
// says nothing about bank conflicts, registers or warp-level races the fiber order hides.
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
struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  uint3 tid;
  bool done = false;
  std::vector<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;
};
struct Barrier {
  int count = 0, arrived = 0;
  long generation = 0;
};

inline Fiber* current = nullptr;
inline ucontext_t scheduler;
inline Barrier block_barrier;
inline std::vector<Barrier> warp_barriers;
inline std::vector<std::array<float, 32>> warp_exchange;

inline void arrive(Barrier& b) {
  const long mine = b.generation;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == mine) swapcontext(&current->ctx, &scheduler);
}

inline void cp_async(void* dst, const void* src, int bytes, bool valid) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % bytes) {
    std::fprintf(stderr, "cp.async of %d bytes misaligned\n", bytes);
    std::abort();
  }
  Copy c{dst, {}, bytes};
  if (valid) std::memcpy(c.data.data(), src, bytes);  // else zeros, as src-size 0
  std::fill_n(static_cast<float*>(dst), bytes / 4, std::numeric_limits<float>::quiet_NaN());
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
  if (smem_bytes > sizeof(smem)) {
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
        std::fill(std::begin(smem), std::end(smem), std::numeric_limits<float>::quiet_NaN());
        block_barrier = Barrier{threads};
        warp_barriers.assign(warps, Barrier{32});
        warp_exchange.assign(warps, {});
        for (int t = 0; t < threads; ++t) start(fibers[t], t, &Entry<P>::run);
        ::blockIdx = make_uint3(x, y, z), ::blockDim = dim3(threads), ::gridDim = grid;
        for (bool running = true; running;) {
          running = false;
          for (Fiber& f : fibers) {
            if (f.done) continue;
            running = true;
            current = &f;
            ::threadIdx = f.tid;
            swapcontext(&scheduler, &f.ctx);
          }
        }
        for (size_t i = smem_bytes / 4; i < std::size(smem); ++i)
          if (!std::isnan(smem[i])) {
            std::fprintf(stderr, "shared memory written past the launch's %zu bytes\n", smem_bytes);
            std::abort();
          }
      }
}

}  // namespace emu

inline void __syncthreads() { emu::arrive(emu::block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::arrive(emu::warp_barriers[threadIdx.x / 32]); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {  // every lane of the warp takes part
  std::array<float, 32>& x = emu::warp_exchange[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  x[lane] = v;
  __syncwarp();
  const float r = x[lane ^ lane_mask];
  __syncwarp();
  return r;
}
