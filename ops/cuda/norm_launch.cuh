// Host side of the RMSNorm / LayerNorm kernels: launch shapes (threads per row, staged or
// register kernel, persistent grids) and the launches rms_norm.cu / layer_norm.cu call.
#pragma once

#include "ops/cuda/norm_forward.cuh"
#include "ops/cuda/norm_backward.cuh"

namespace tg::cuda::normk {

// ------------------------------------------------------------------ host side: launch plans
// Resident blocks of `fn` per multiprocessor (cached per kernel, block size, smem and device).
inline int blocks_per_sm(const void* fn, int block, size_t smem, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int64_t>, int> cache;
  allow_smem(fn, smem, device);
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(fn, (int64_t(smem) * 2048 + block) * 64 + device);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  TG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, block, smem));
  TG_CHECK(n >= 1, "norm", "a kernel configuration does not fit on the GPU (block ", block, ", ", smem,
           " bytes of shared memory)");
  return cache[key] = n;
}

// Threads per row the planner aims for at most (then more vectors per thread, up to kMaxIters):
// 512; for a backward, 256 over rows of 8-byte vectors and 16 over rows of at most 32 vectors
// (the H200 sweeps behind them: dev/NOTES.md). It never depends on the mask, so frozen and
// unfrozen variants reduce a row in the same order (bitwise-identical dx).
enum class Pass { forward, backward };
inline int preferred_tpr(int vb, int64_t nv, Pass pass) {
  if (pass == Pass::backward) {
    if (vb == 8) return 256;
    if (nv <= 32) return 16;
  }
  return kMaxTpr;
}

struct Config {
  int vb = 0;     // bytes per vector access
  int iters = 0;  // vectors per thread (0: the looping kernels)
  int tpr = 0, gpb = 0, block = 0;
  int64_t nv = 0;  // vectors per row
};

// The launch shape of `pass` for rows of `dim` elements of `esize` bytes whose pointers are
// `ptrs` (null entries ignored), aiming at preferred_tpr threads per row.
inline Config plan(int64_t dim, int esize, std::initializer_list<const void*> ptrs, Pass pass) {
  Config c;
  c.vb = 16;
  auto fits = [&](int vb) {
    if ((dim * esize) % vb) return false;
    for (const void* p : ptrs)
      if (p && !aligned(p, vb)) return false;
    return true;
  };
  while (c.vb > esize && !fits(c.vb)) c.vb = c.vb == 16 ? 8 : esize;
  c.nv = dim * esize / c.vb;
  const int pref = preferred_tpr(c.vb, c.nv, pass);
  c.iters = 1;
  while (c.iters < kMaxIters && (c.nv + c.iters - 1) / c.iters > pref) c.iters *= 2;
  int64_t tpr = (c.nv + c.iters - 1) / c.iters;
  if (tpr > max_tpr(c.iters)) {  // too wide for registers
    c.iters = 0;
    c.tpr = kLoopTpr;
    c.gpb = 1;
  } else if (tpr <= 32) {
    int t = 1;
    while (t < tpr) t *= 2;
    c.tpr = t;
    c.gpb = kGroupBlock / t;
  } else {
    // A row per block: the dW / dB accumulators of a block are then one row's worth, which
    // keeps blocks small enough for several to share a multiprocessor's shared memory.
    c.tpr = static_cast<int>((tpr + 31) / 32 * 32);
    c.gpb = 1;
  }
  c.block = c.tpr * c.gpb;
  return c;
}

inline int grid_for(int64_t rows, const Config& c, const void* fn, size_t smem, int device) {
  const int64_t groups = (rows + c.gpb - 1) / c.gpb;
  const int64_t resident = int64_t(sm_count(device)) * blocks_per_sm(fn, c.block, smem, device);
  return static_cast<int>(groups < resident ? (groups < 1 ? 1 : groups) : resident);
}

// Calls f(std::integral_constant<int, N>, std::integral_constant<int, ITERS>) for the config's
// elements per vector and vectors per thread (ITERS 0: the looping kernels).
template <class T, class F>
void with_shape(const Config& c, F&& f) {
  auto by_iters = [&](auto n) {
    switch (c.iters) {
      case 1: return f(n, std::integral_constant<int, 1>{});
      case 2: return f(n, std::integral_constant<int, 2>{});
      case 4: return f(n, std::integral_constant<int, 4>{});
      case 8: return f(n, std::integral_constant<int, 8>{});
      case 16: return f(n, std::integral_constant<int, 16>{});
      default: return f(n, std::integral_constant<int, 0>{});
    }
  };
  if (c.vb == 16) return by_iters(std::integral_constant<int, 16 / int(sizeof(T))>{});
  if (c.vb == 8) return by_iters(std::integral_constant<int, 8 / int(sizeof(T))>{});
  return by_iters(std::integral_constant<int, 1>{});
}

// The kernel instantiations of a shape: forward, backward with dx (register-resident, or looping
// for dx alone), staged (where staged_fits), and dW / dB alone.
template <class T, int N, int IT, bool LN>
constexpr auto fwd_instance() {
  if constexpr (IT == 0) return &norm_fwd_loop_kernel<T, N, LN>;
  else return &norm_fwd_kernel<T, N, IT, LN>;
}
template <class T, int N, int IT, bool LN, bool DW, bool DB, bool RES>
constexpr auto dx_instance() {
  if constexpr (IT == 0) return &norm_bwd_loop_kernel<T, N, LN>;
  else return &norm_bwd_kernel<T, N, IT, LN, DW, DB, RES>;
}
template <class T, int N, int IT>
constexpr bool staged_fits = IT != 0 && N * sizeof(T) == 16 && IT * N <= kStagedMaxElems;

// The kernel `pick(n, it)` gives for the config's shape, as the pointer occupancy queries take.
template <class T, class Pick>
const void* kernel_of(const Config& c, Pick&& pick) {
  const void* fn = nullptr;
  with_shape<T>(c, [&](auto n, auto it) { fn = reinterpret_cast<const void*>(pick(n, it)); });
  return fn;
}
template <class T, bool LN>
const void* fwd_kernel(const Config& c) {
  return kernel_of<T>(c, [](auto n, auto it) { return fwd_instance<T, n(), it(), LN>(); });
}
template <class T, bool LN, bool DW, bool DB, bool RES>
const void* bwd_kernel(const Config& c) {
  return kernel_of<T>(c, [](auto n, auto it) { return dx_instance<T, n(), it(), LN, DW, DB, RES>(); });
}
template <class T, bool LN, bool DW, bool DB, bool RES>
const void* staged_kernel(const Config& c) {
  return kernel_of<T>(c, [](auto n, auto it) -> const void* {
    if constexpr (staged_fits<T, n(), it()>) return reinterpret_cast<const void*>(
        &norm_bwd_staged_kernel<T, n(), it(), LN, DW, DB, RES>);
    else return nullptr;
  });
}
template <class T, bool LN, bool DW, bool DB>
const void* param_kernel(const Config& c) {
  return kernel_of<T>(c, [](auto n, auto) { return &norm_bwd_param_kernel<T, n(), LN, DW, DB>; });
}

// Launches kernel<<<grid, block, smem, s>>>(args...), as a cooperative launch when `coop` (the
// grid must be co-resident: the kernel ends with a grid barrier; grids sized by occupancy are).
template <class... Params, class... Args>
void launch(bool coop, void (*kernel)(Params...), int grid, int block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = coop ? 1 : 0;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// The row shape fields FwdArgs and BwdArgs share.
template <class Args>
void set_shape(Args& a, int64_t rows, int64_t dim, const Config& c) {
  a.rows = rows;
  a.dim = static_cast<int>(dim);
  a.nv = static_cast<int>(c.nv);
  a.tpr = c.tpr;
  a.gpb = c.gpb;
  a.inv_dim = 1.f / static_cast<float>(dim);
}

// ------------------------------------------------------------------ forward
template <class T, bool LN>
void launch_forward(const Tensor& y, const Tensor& r, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                    const Tensor& res, const Tensor& w, const Tensor& b, double eps) {
  const int64_t dim = x.shape()[1], rows = x.shape()[0];
  if (rows == 0) return;
  auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; };
  auto stat = [](const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  FwdArgs<T> a{};
  a.y = y.data_ptr<T>();
  a.r = ptr(r);
  a.mean = stat(mean);
  a.rstd = stat(rstd);
  a.x = x.data_ptr<T>();
  a.res = ptr(res);
  a.w = ptr(w);
  a.b = ptr(b);
  const Config c = plan(dim, sizeof(T), {a.y, a.r, a.x, a.res, a.w, a.b}, Pass::forward);
  set_shape(a, rows, dim, c);
  a.eps = static_cast<float>(eps);
  const int device = x.device().index;
  const int grid = grid_for(rows, c, fwd_kernel<T, LN>(c), 0, device);
  with_shape<T>(c, [&](auto n, auto it) {
    launch(false, fwd_instance<T, n(), it(), LN>(), grid, c.block, 0, stream_for(x), a);
  });
  TG_CUDA_CHECK_LAUNCH(LN ? "layer_norm.forward" : "rms_norm.forward");
}

// ------------------------------------------------------------------ staged kernel plan
// Stages per block and blocks per multiprocessor of a staged launch; stages == 0 where the
// kernel does not apply (dW / dB alone; dx alone where the register kernel fits two blocks per
// multiprocessor; rows not of 16-byte vectors, several rows a block, more than kStagedMaxElems
// elements a thread, rows too large for two stages; a build without Hopper's bulk copies).
struct Staged {
  int stages = 0, blocks_per_sm = 0;
  size_t smem = 0;
};

// Bytes of rows a multiprocessor's staged blocks keep in flight: its share of the bandwidth times
// the loaded latency (dev/NOTES.md has the figures). Filling the shared memory instead made every
// block's first row wait behind the whole grid's prefetch. Two blocks a multiprocessor only
// where each still gets 3 stages; else one.
constexpr size_t kStagedInFlight = 96 * 1024;

template <class T, bool LN, bool DW, bool DB, bool RES>
Staged staged_plan(const Config& c, int64_t dim, int device) {
  Staged st;
  // dx alone keeps the register kernel while two or more of its blocks share a multiprocessor
  // (as fast or faster); with fewer (float32 rows of 8192) staging keeps enough rows in flight.
  if (c.vb != 16 || c.gpb != 1 || c.iters == 0 || c.iters * 16 / int(sizeof(T)) > kStagedMaxElems) return st;
  if (!(DW || DB) && blocks_per_sm(bwd_kernel<T, LN, DW, DB, RES>(c), c.block, 0, device) * c.block >= 1024)
    return st;
  const void* fn = staged_kernel<T, LN, DW, DB, RES>(c);
  if (!compiled_for_sm90(fn, device)) return st;  // its body needs Hopper's bulk copies
  // Blocks that fit by registers and threads alone; shared memory is then split among them.
  const int reg_fit = blocks_per_sm(fn, c.block, 0, device);
  static std::mutex mu;
  static std::map<int, int> smem_per_sm, smem_per_block;
  int per_sm, per_block;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!smem_per_sm.count(device)) {
      cudaDeviceProp prop;
      TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
      smem_per_sm[device] = static_cast<int>(prop.sharedMemPerMultiprocessor);
      smem_per_block[device] = static_cast<int>(prop.sharedMemPerBlockOptin);
    }
    per_sm = smem_per_sm[device];
    per_block = smem_per_block[device];
  }
  const size_t stage_bytes = 2 * dim * sizeof(T);
  const size_t reserve = 2048;  // static shared memory and the per-block reservation
  for (int blocks : {2, 1}) {
    if (blocks > reg_fit) continue;
    const size_t avail = std::min<size_t>(per_sm / blocks - reserve, per_block - reserve) - kStageHeader;
    const size_t budget = std::max<size_t>(2, kStagedInFlight / (blocks * stage_bytes));
    const int stages = static_cast<int>(std::min<size_t>({size_t(kMaxStages), avail / stage_bytes, budget}));
    if (stages >= (blocks == 2 ? 3 : 2)) {
      st.stages = stages;
      st.blocks_per_sm = blocks;
      st.smem = kStageHeader + stages * stage_bytes;
      return st;
    }
  }
  return st;
}

// Persistent grid of the staged kernel.
template <class T, bool LN, bool DW, bool DB, bool RES>
int staged_grid(int64_t rows, const Config& c, const Staged& st, int device) {
  const void* fn = staged_kernel<T, LN, DW, DB, RES>(c);
  const int fit = std::min(st.blocks_per_sm, blocks_per_sm(fn, c.block, st.smem, device));
  const int64_t resident = int64_t(sm_count(device)) * fit;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, resident)));
}

// ------------------------------------------------------------------ backward plans
// Dynamic shared memory of a backward variant: its dW / dB accumulator slots, at least the
// final reduction's scratch.
template <class T, bool DW, bool DB>
size_t bwd_smem(const Config& c) {
  if (!DW && !DB) return 0;
  const size_t slots = c.iters ? size_t(int(DW) + int(DB)) * c.iters * (c.vb / sizeof(T)) * c.block * sizeof(float) : 0;
  return std::max(slots, kReduceScratch);
}

// The dW / dB-only launch: column tiles of cv vectors, as many row splits as fill the GPU once
// (at most max_splits, and no more than the row lanes need).
struct ParamLaunch {
  ParamGrid g;
  int grid;
  size_t smem;
};
template <class T, bool LN, bool DW, bool DB>
ParamLaunch param_plan(const Config& c, int64_t rows, int device, int64_t max_splits) {
  ParamLaunch p;
  const size_t elems = c.vb / sizeof(T);
  p.smem = std::max(size_t(kParamBlock) * (int(DW) + int(DB)) * elems * sizeof(float), kReduceScratch);
  int cv = 1;
  while (cv < 32 && cv < c.nv) cv *= 2;
  const int64_t lanes = kParamBlock / cv, tiles = (c.nv + cv - 1) / cv;
  const int64_t resident =
      int64_t(sm_count(device)) * blocks_per_sm(param_kernel<T, LN, DW, DB>(c), kParamBlock, p.smem, device);
  const int64_t splits = std::max<int64_t>(1, std::min({resident / tiles, (rows + lanes - 1) / lanes, max_splits}));
  p.g = {cv, static_cast<int>(tiles), static_cast<int>(splits)};
  p.grid = static_cast<int>(std::min(tiles * splits, resident));
  return p;
}

// Rows of the partial buffer: the persistent grid of the variant (the row splits where the
// tiled kernel sums dW / dB: without dx, or rows too wide for registers), on x's shape and
// alignment.
template <class T, bool LN, bool DX, bool DW, bool DB>
int64_t partial_rows(const Tensor& x) {
  const int64_t dim = x.shape()[1], rows = x.shape()[0];
  const int device = x.device().index;
  const Config c = plan(dim, sizeof(T), {x.data_ptr()}, Pass::backward);
  if (!DX || c.iters == 0) return param_plan<T, LN, DW, DB>(c, rows, device, INT32_MAX).g.splits;
  const Staged st = staged_plan<T, LN, DW, DB, false>(c, dim, device);
  if (st.stages) return staged_grid<T, LN, DW, DB, false>(rows, c, st, device);
  return grid_for(rows, c, bwd_kernel<T, LN, DW, DB, false>(c), bwd_smem<T, DW, DB>(c), device);
}

// Whether a launch that moves `bytes` reads its rows with the L2 evict-first policy (RowRead;
// not the staged kernel's bulk copies): up to `l2_multiple` times the L2's size, where it measured
// faster (dev/NOTES.md).
inline bool read_evict_first(int64_t bytes, double l2_multiple, int device) {
  return static_cast<double>(bytes) <= l2_multiple * static_cast<double>(l2_bytes(device));
}

// ------------------------------------------------------------------ backward launches
// dW / dB alone: the tiled kernel (a cooperative launch: it ends with the partial rows' sum).
template <class T, bool LN, bool DW, bool DB>
void launch_param_backward(const BwdArgs<T>& a, const Config& c, int64_t partial_rows, cudaStream_t s, int device) {
  const ParamLaunch p = param_plan<T, LN, DW, DB>(c, a.rows, device, partial_rows);
  with_shape<T>(c, [&](auto n, auto) {
    launch(true, norm_bwd_param_kernel<T, n(), LN, DW, DB>, p.grid, kParamBlock, p.smem, s, a, p.g);
  });
}

// dx, and dW / dB when asked: the staged kernel where it applies, else the register-resident
// kernel, or for dx alone the looping kernel. With dW / dB the grid is persistent and
// co-resident (a cooperative launch) and at most the partial buffer's rows.
template <class T, bool LN, bool DW, bool DB, bool RES>
void launch_dx_backward(const BwdArgs<T>& a, const Config& c, int64_t partial_rows, cudaStream_t s, int device) {
  TG_CHECK(c.iters != 0 || !(DW || DB), "norm backward", "internal: the looping kernel computes dx alone");
  auto reducing_grid = [&](int resident) { return static_cast<int>(std::min<int64_t>(resident, partial_rows)); };
  const Staged st = staged_plan<T, LN, DW, DB, RES>(c, a.dim, device);
  if (st.stages) {
    allow_smem(staged_kernel<T, LN, DW, DB, RES>(c), st.smem, device);
    const int resident = staged_grid<T, LN, DW, DB, RES>(a.rows, c, st, device);
    const int grid = (DW || DB) ? reducing_grid(resident) : resident;
    with_shape<T>(c, [&](auto n, auto it) {
      if constexpr (staged_fits<T, n(), it()>)
        launch(DW || DB, norm_bwd_staged_kernel<T, n(), it(), LN, DW, DB, RES>, grid, c.block, st.smem, s, a, st.stages);
    });
    return;
  }
  const void* fn = bwd_kernel<T, LN, DW, DB, RES>(c);
  const size_t smem = bwd_smem<T, DW, DB>(c);
  // dx alone over rows of 16-byte vectors: a block per row group (several in flight per
  // multiprocessor, no tail of unequal loops); 8-byte or scalar rows: a persistent grid.
  const int resident = grid_for(a.rows, c, fn, smem, device);
  const int grid = (DW || DB) ? reducing_grid(resident)
                   : c.iters && c.vb == 16 ? static_cast<int>(std::min<int64_t>((a.rows + c.gpb - 1) / c.gpb, INT32_MAX))
                                           : resident;
  allow_smem(fn, smem, device);
  with_shape<T>(c, [&](auto n, auto it) {
    launch(DW || DB, dx_instance<T, n(), it(), LN, DW, DB, RES>(), grid, c.block, smem, s, a);
  });
}

// The backward of variant <DX, DW, DB>: dx, and dw / db through the partial buffer (the op sized
// it with partial_rows) in the same kernel; two launches for rows too wide for registers.
template <class T, bool LN, bool DX, bool DW, bool DB>
void launch_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                     const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dres) {
  KernelTrace::record(norm_backward_event(op, {DX, DW, DB}));
  const int64_t dim = dy.shape()[1], rows = dy.shape()[0];
  if (rows == 0) return;
  BwdArgs<T> a{};
  a.dx = DX ? dx.data_ptr<T>() : nullptr;
  a.dw = DW ? dw.data_ptr<T>() : nullptr;
  a.db = DB ? db.data_ptr<T>() : nullptr;
  a.partial = (DW || DB) ? partial.data_ptr<float>() : nullptr;
  a.dy = dy.data_ptr<T>();
  a.x = (DX || DW) ? x.data_ptr<T>() : nullptr;
  a.w = DX && w.defined() ? w.data_ptr<T>() : nullptr;
  a.mean = LN && (DX || DW) ? mean.data_ptr<float>() : nullptr;
  a.rstd = (DX || DW) ? rstd.data_ptr<float>() : nullptr;
  a.dres = DX && dres.defined() ? dres.data_ptr<T>() : nullptr;
  const Config c = plan(dim, sizeof(T), {a.dx, a.dy, a.x, a.w, a.dres}, Pass::backward);
  set_shape(a, rows, dim, c);
  cudaStream_t s = stream_for(dy);
  const int device = dy.device().index;
  const int64_t prows = (DW || DB) ? partial.shape()[0] : 0;
  const int64_t row_bytes = rows * dim * int64_t(sizeof(T));
  a.evict_first = DX ? read_evict_first(row_bytes * (a.dres ? 4 : 3), 1.5, device)
                     : read_evict_first(row_bytes * (DW ? 2 : 1), 5.0, device);
  if constexpr (!DX) {
    launch_param_backward<T, LN, DW, DB>(a, c, prows, s, device);
  } else if (c.iters == 0 && (DW || DB)) {
    // Rows too wide for registers: dx by the looping kernel, then dW / dB by the tiled kernel
    // (a second read of x and dy, for a partial buffer of a few rows rather than a row-wide one
    // for every block).
    if constexpr (DW || DB) {
      launch_dx_backward<T, LN, false, false, false>(a, c, 0, s, device);
      launch_param_backward<T, LN, DW, DB>(a, c, prows, s, device);
    }
  } else if (!LN && a.dres) {
    // The residual-gradient add (fused_add_rms_norm) is its own instantiation, so plain
    // rms_norm / layer_norm pay no registers for it.
    if constexpr (!LN) launch_dx_backward<T, LN, DW, DB, true>(a, c, prows, s, device);
  } else {
    launch_dx_backward<T, LN, DW, DB, false>(a, c, prows, s, device);
  }
  TG_CUDA_CHECK_LAUNCH("norm backward");
}

}  // namespace tg::cuda::normk
