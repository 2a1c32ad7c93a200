/*
dev/cuda/03_attention_f32.cu's kernels run on the CPU under tests/flash_emulation/cpu_emulation.h,
through that file's own check (every variant, every check shape, against its float64 reference):
a kernel change's logic and synchronisation checked without a GPU. The GPU run stays the authority: here
exp2f / log2f are glibc's, and the emulation says nothing of speed, registers or bank conflicts.

Build and run (from the repository root; about 15 s):
  g++ -std=c++20 -O2 -fno-strict-aliasing -I. -I/usr/local/cuda/include -Wno-attributes -o attention_f32_cpu \
    dev/cuda/03_attention_f32_cpu.cpp
  ./attention_f32_cpu
*/
#include "tests/flash_emulation/flash_ptx_cpu.h"

#include "ops/cuda/flash_attention.cuh"  // the constants 03_attention_f32.cu takes from it

// 03_attention_f32.cu's shared-memory loads.
namespace {
float4 lds128(const float* p) { return *reinterpret_cast<const float4*>(p); }
float2 lds64(const float* p) { return *reinterpret_cast<const float2*>(p); }
}  // namespace

#define ATTENTION_F32_KERNELS_ONLY
#include "03_attention_f32.cu"

namespace {

// One problem in host memory: check_shape's backend.
struct Cpu {
  Shape s;
  Inputs in;
  std::vector<float> out, dq, dk, dv, lse, delta;
  Params p;
  Cpu(const Shape& shape, const Inputs& inputs)
      : s(shape), in(inputs), out(s.nq()), dq(s.nq()), dk(s.nk()), dv(s.nk()), lse(s.nl()), delta(s.nl()) {
    p = params_of(s, in.q.data(), in.k.data(), in.v.data(), in.dout.data(), out.data(), dq.data(), dk.data(),
                  dv.data(), lse.data(), delta.data());
  }
  Cpu(const Cpu&) = delete;
  void clear(float* d, size_t n) const { std::fill_n(d, n, std::numeric_limits<float>::quiet_NaN()); }
  bool run(const Kernel& k) const {
    emu::launch(k.fn, k.grid(p), k.threads, k.smem, p);
    return true;
  }
  void run_delta() const { emu::launch(delta_kernel(s.hd), delta_grid(p, s.hd), kDeltaThreads, 0, p); }
  std::vector<float> fetch(const float* d, size_t n) const { return {d, d + n}; }
};

}  // namespace

int main() {
  bool ok = true;
  std::printf("check on the CPU (tolerance %.0e of each output's largest value)\n", kTolerance);
  for (const Shape& s : check_shapes()) {
    const Inputs in = make_inputs(s);
    Cpu cpu(s, in);
    ok = check_shape(s, in, cpu) && ok;
  }
  std::printf("check: %s\n", ok ? "all ok" : "FAILED");
  return ok ? 0 : 1;
}
