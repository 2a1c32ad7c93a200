/*
The rotary embedding (ops/apply_rotary.h, Hugging Face's rotate-half convention) of q and k at
the shapes of a training step: q and k are column blocks of one [B*T, W] bf16 projection buffer
(nn::forward_group), seen as [B, H, T, hd] views; outputs (forward) are dense [B, T, H, hd] memory
as the library's empty_like_layout gives them; backward reads dense [B, T, H, hd] gradients and
writes dense ones. [T, hd] bf16 cos / sin tables (rotary_cos_sin cast to bf16). Every version is
checked against a CPU reference (exit 1 on a mismatch) and timed as the median of --reps calls,
each after a 256 MB memset (common.cuh: every call starts from an L2 full of the flush's dirty
lines); TB/s counts q and k read once and written once (the 1 MB of tables, L2-resident, not).

  copy     a plain 16-byte dense copy of the same bytes: the ceiling
  1 lib    the library's kernel (ops/cuda/apply_rotary.cu at the time of writing), one launch for q
           and one for k: 64 rows a block of 256 threads, blockIdx.y a [T, hd] matrix
  2 pair   the same kernel body, one launch: blockIdx.y runs over q's matrices then k's (GQA: k
           has fewer); what the library's apply_rotary_pos_emb launches
  3 rows   one launch, table reuse: a block is --rows rows of T (a thread per 16-byte pack of a
           half-row) and --mats consecutive matrices of q then k; a thread loads its cos / sin
           packs once and applies them to every matrix of the block, two matrices' loads in flight
           (the library's kernels load 4 table packs per 2 data packs, mostly from L2)
           (--inflight 1, 2 or 4), matrix offsets by 32-bit division
  4 persist  3 on a persistent grid (co-resident blocks, a grid-stride loop over 3's blocks)

Registers (-Xptxas -v, CUDA 13.0, sm_90): lib 54, pair 48, rows 48 / 74 / 104 with 1 / 2 / 4
in flight, no spills. The library's
kernel holds 2 x 16 bytes of data a thread in flight at 4 blocks of 256 threads a multiprocessor,
about 32 KB a multiprocessor where dev/NOTES.md finds about 96 KB wanted.

Shapes: llama-1b (B 4, T 2048, 16 q and 16 kv heads of 128, W 3 * 2048) and llama3-8b (B 1,
T 4096, 32 q heads, 8 kv heads of 128, W 6144).

Build and run (sm_90; dev/cuda/07_rotary.sh does both):
  nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -I. -o rotary dev/cuda/07_rotary.cu
  ./rotary                       # every version at both shapes, forward and backward
  ./rotary --rows 32 --mats 4 --inflight 4   # 3 and 4 at another block shape
  ./rotary --sweep               # 3 and 4 over rows {16, 32, 64} x mats {2, 4, 8, 16} x in flight {2, 4}
  ./rotary --shape 8b --reps 500
*/
#include "common.cuh"

#include <string>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"

using tg::bf16;
using tg::cuda::Access;
using tg::cuda::elem;
using tg::cuda::load_pack;
using tg::cuda::Pack;
using tg::cuda::pack_of;
using tg::cuda::store_pack;

// ---------------------------------------------------------------------------- device side
// The leading matrices' offsets: the library's StridedIndex, plus a 32-bit variant.
struct Lead : tg::cuda::StridedIndex {
  // The same for an index below 2^32 (any count of matrices here): 32-bit division, about a
  // fifth of the instructions of the 64-bit one.
  __device__ int64_t offset32(unsigned i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const unsigned n = unsigned(sizes[d]);
      off += int64_t(i % n) * strides[d];
      i /= n;
    }
    return off;
  }
};

// The library's kernel, as ops/cuda/apply_rotary.cu has it.
constexpr int kThreads = 256, kRowsPerBlock = 64;

template <class T, int N, bool kBackward>
__global__ void lib_kernel(T* dst, const T* src, const T* cos, const T* sin, Lead dlead, Lead slead, int64_t lead,
                           int64_t group, int64_t drs, int64_t srs, int T_, int h) {
  const int packs = h / N, t0 = blockIdx.x * kRowsPerBlock, rows = min(kRowsPerBlock, T_ - t0);
  for (int64_t m = blockIdx.y; m < lead; m += gridDim.y) {
    const T* xm = src + slead.offset(m);
    T* om = dst + dlead.offset(m);
    const int64_t table = m / group * T_;
    for (int idx = threadIdx.x; idx < rows * packs; idx += kThreads) {
      const int t = t0 + idx / packs, i = idx % packs * N;
      const T *x = xm + t * srs + i, *c = cos + (table + t) * 2 * h + i, *s = sin + (table + t) * 2 * h + i;
      Pack<T, N> a, b, c0, c1, s0, s1;
      load_pack<Access::plain>(a, x);
      load_pack<Access::plain>(b, x + h);
      load_pack<Access::cached>(c0, c);
      load_pack<Access::cached>(c1, c + h);
      load_pack<Access::cached>(s0, s);
      load_pack<Access::cached>(s1, s + h);
      float lo[N], hi[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float ae = elem(a, e), be = elem(b, e);
        lo[e] = kBackward ? ae * elem(c0, e) + be * elem(s1, e) : ae * elem(c0, e) - be * elem(s0, e);
        hi[e] = kBackward ? be * elem(c1, e) - ae * elem(s0, e) : be * elem(c1, e) + ae * elem(s1, e);
      }
      T* o = om + t * drs + i;
      store_pack<Access::plain>(o, pack_of<T, N>(lo));
      store_pack<Access::plain>(o + h, pack_of<T, N>(hi));
    }
  }
}

// One tensor's side of a pair launch: its destination and source rows.
template <class T>
struct Side {
  T* dst;
  const T* src;
  Lead dlead, slead;
  int64_t lead, group, drs, srs;
};

// The rotation of one pack pair (a = x[i..], b = x[i + h..]) by tables c0 = cos[i..], c1 = cos[i + h..], ...
template <class T, int N, bool kBackward>
__device__ __forceinline__ void rotate_pack(T* o, int h, const Pack<T, N>& a, const Pack<T, N>& b,
                                            const Pack<T, N>& c0, const Pack<T, N>& c1, const Pack<T, N>& s0,
                                            const Pack<T, N>& s1) {
  float lo[N], hi[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float ae = elem(a, e), be = elem(b, e);
    lo[e] = kBackward ? ae * elem(c0, e) + be * elem(s1, e) : ae * elem(c0, e) - be * elem(s0, e);
    hi[e] = kBackward ? be * elem(c1, e) - ae * elem(s0, e) : be * elem(c1, e) + ae * elem(s1, e);
  }
  store_pack<Access::plain>(o, pack_of<T, N>(lo));
  store_pack<Access::plain>(o + h, pack_of<T, N>(hi));
}

// 2: the library's apply_rotary_pair_kernel (ops/cuda/apply_rotary.cu): the row loop of 1 over q's
// matrices then k's in one grid, written as two calls (48 registers; one call through a selected
// side took 62).
template <class T, int N, bool kBackward>
__device__ __forceinline__ void rotate_rows(T* om, const T* xm, const T* cos, const T* sin, int64_t table,
                                            int64_t drs, int64_t srs, int t0, int rows, int h) {
  const int packs = h / N;
  for (int idx = threadIdx.x; idx < rows * packs; idx += kThreads) {
    const int t = t0 + idx / packs, i = idx % packs * N;
    const T *x = xm + t * srs + i, *c = cos + (table + t) * 2 * h + i, *s = sin + (table + t) * 2 * h + i;
    Pack<T, N> a, b, c0, c1, s0, s1;
    load_pack<Access::plain>(a, x);
    load_pack<Access::plain>(b, x + h);
    load_pack<Access::cached>(c0, c);
    load_pack<Access::cached>(c1, c + h);
    load_pack<Access::cached>(s0, s);
    load_pack<Access::cached>(s1, s + h);
    rotate_pack<T, N, kBackward>(om + t * drs + i, h, a, b, c0, c1, s0, s1);
  }
}

template <class T, int N, bool kBackward>
__global__ void pair_kernel(Side<T> q, Side<T> k, const T* cos, const T* sin, int T_, int h) {
  const int t0 = blockIdx.x * kRowsPerBlock, rows = min(kRowsPerBlock, T_ - t0);
  for (int64_t m = blockIdx.y; m < q.lead + k.lead; m += gridDim.y) {
    if (m < q.lead)
      rotate_rows<T, N, kBackward>(q.dst + q.dlead.offset(m), q.src + q.slead.offset(m), cos, sin, m / q.group * T_,
                                   q.drs, q.srs, t0, rows, h);
    else
      rotate_rows<T, N, kBackward>(k.dst + k.dlead.offset(m - q.lead), k.src + k.slead.offset(m - q.lead), cos, sin,
                                   (m - q.lead) / k.group * T_, k.drs, k.srs, t0, rows, h);
  }
}

// 3 / 4: block item (tx, my): rows [tx R, tx R + R) of T, matrices [my M, my M + M) of q's then k's
// (shared [T, hd] tables only). blockDim = R * packs; the grid strides over the items (4) or has
// one block an item (3). kInFlight: matrices whose loads a thread issues before using them.
template <class T, int N, bool kBackward, int kInFlight>
__global__ void rows_kernel(Side<T> q, Side<T> k, const T* cos, const T* sin, int T_, int h, int R, int M,
                            int items_x, int items) {
  const int packs = h / N, r = threadIdx.x / packs, i = threadIdx.x % packs * N;
  const int64_t total = q.lead + k.lead;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int t = item % items_x * R + r;
    if (t >= T_) continue;  // no barrier below
    const int64_t m0 = int64_t(item / items_x) * M, m1 = min(m0 + M, total);
    Pack<T, N> c0, c1, s0, s1;
    load_pack<Access::cached>(c0, cos + int64_t(t) * 2 * h + i);
    load_pack<Access::cached>(c1, cos + int64_t(t) * 2 * h + i + h);
    load_pack<Access::cached>(s0, sin + int64_t(t) * 2 * h + i);
    load_pack<Access::cached>(s1, sin + int64_t(t) * 2 * h + i + h);
    for (int64_t m = m0; m < m1; m += kInFlight) {
      Pack<T, N> a[kInFlight], b[kInFlight];
      T* o[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        o[u] = nullptr;
        if (m + u < m1) {
          const bool isq = m + u < q.lead;
          const unsigned mm = unsigned(isq ? m + u : m + u - q.lead);
          const T* x = isq ? q.src + q.slead.offset32(mm) + t * q.srs + i : k.src + k.slead.offset32(mm) + t * k.srs + i;
          o[u] = isq ? q.dst + q.dlead.offset32(mm) + t * q.drs + i : k.dst + k.dlead.offset32(mm) + t * k.drs + i;
          load_pack<Access::plain>(a[u], x);
          load_pack<Access::plain>(b[u], x + h);
        }
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (o[u]) rotate_pack<T, N, kBackward>(o[u], h, a[u], b[u], c0, c1, s0, s1);
    }
  }
}

__global__ void copy_kernel(uint4* dst, const uint4* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// ---------------------------------------------------------------------------- host side
struct Shape {
  const char* name;
  int B, T, Hq, Hk, hd, W;  // W: the projection buffer's width (q, k, v columns)
};

// A [B, H, T, hd] tensor in memory: element offset of (b, h, t, j) = b sb + h sh + t st + j.
struct View {
  int B, H;
  int64_t sb, sh, st;
  Lead lead() const {
    Lead l;
    l.ndim = 2;
    l.sizes[0] = B, l.sizes[1] = H, l.strides[0] = sb, l.strides[1] = sh;
    return l;
  }
};

constexpr int kN = 8;  // bf16 elements in a 16-byte pack

struct Problem {
  Shape s;
  View qin, kin, qout, kout;  // forward: q, k views of the buffer -> dense; backward: dense -> dense
  bf16 *buf, *gq, *gk, *oq, *ok, *cos, *sin;
  std::vector<float> hbuf, hgq, hgk, hcos, hsin;
  size_t nq, nk;  // elements of q and of k
};

std::vector<float> rope_table(int T, int hd, bool is_cos) {
  std::vector<float> v(size_t(T) * hd);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < hd; ++j) {
      const float inv = 1.0f / std::pow(10000.0f, float(2 * (j % (hd / 2))) / float(hd));
      const float a = float(t) * inv;
      v[size_t(t) * hd + j] = is_cos ? std::cos(a) : std::sin(a);
    }
  return v;
}

Problem make_problem(const Shape& s) {
  Problem p;
  p.s = s;
  const int64_t rows = int64_t(s.B) * s.T;
  p.nq = size_t(rows) * s.Hq * s.hd, p.nk = size_t(rows) * s.Hk * s.hd;
  p.buf = to_device<bf16>(random_values(size_t(rows) * s.W, 1), p.hbuf);
  p.gq = to_device<bf16>(random_values(p.nq, 2), p.hgq);
  p.gk = to_device<bf16>(random_values(p.nk, 3), p.hgk);
  p.cos = to_device<bf16>(rope_table(s.T, s.hd, true), p.hcos);
  p.sin = to_device<bf16>(rope_table(s.T, s.hd, false), p.hsin);
  p.oq = device_zeros<bf16>(p.nq);
  p.ok = device_zeros<bf16>(p.nk);
  // q: columns [0, Hq hd), k: [Hq hd, (Hq + Hk) hd) of the buffer, [B, H, T, hd] views of its rows
  p.qin = {s.B, s.Hq, int64_t(s.T) * s.W, s.hd, s.W};
  p.kin = {s.B, s.Hk, int64_t(s.T) * s.W, s.hd, s.W};
  p.qout = {s.B, s.Hq, int64_t(s.T) * s.Hq * s.hd, s.hd, int64_t(s.Hq) * s.hd};
  p.kout = {s.B, s.Hk, int64_t(s.T) * s.Hk * s.hd, s.hd, int64_t(s.Hk) * s.hd};
  return p;
}

// What one direction reads and writes.
struct Io {
  const bf16 *q, *k;
  View qi, ki;
};
Io io_of(const Problem& p, bool backward) {
  if (backward) return {p.gq, p.gk, p.qout, p.kout};
  return {p.buf, p.buf + int64_t(p.s.Hq) * p.s.hd, p.qin, p.kin};
}

// The CPU reference of one tensor (float32 arithmetic from the device's bf16 values, rounded to bf16).
void reference(std::vector<float>& out, const std::vector<float>& in, int64_t in_off, const View& vi, const View& vo,
               const Problem& p, bool backward) {
  const int T = p.s.T, hd = p.s.hd, h = hd / 2;
  out.assign(size_t(vo.B) * vo.H * T * hd, 0.f);
  for (int b = 0; b < vi.B; ++b)
    for (int hh = 0; hh < vi.H; ++hh)
      for (int t = 0; t < T; ++t) {
        const float* x = in.data() + in_off + b * vi.sb + hh * vi.sh + t * vi.st;
        const float *c = p.hcos.data() + size_t(t) * hd, *s = p.hsin.data() + size_t(t) * hd;
        float* o = out.data() + b * vo.sb + hh * vo.sh + t * vo.st;
        for (int i = 0; i < h; ++i) {
          const float a = x[i], bb = x[i + h];
          const float lo = backward ? a * c[i] + bb * s[i + h] : a * c[i] - bb * s[i];
          const float hi = backward ? bb * c[i + h] - a * s[i] : bb * c[i + h] + a * s[i + h];
          o[i] = bf16_value(bf16_bits(lo));
          o[i + h] = bf16_value(bf16_bits(hi));
        }
      }
}

template <class T>
Side<T> side(T* dst, const View& vo, const T* src, const View& vi, int T_) {
  // group: matrices per table (shared [T, hd] tables: all of them)
  return {dst, src, vo.lead(), vi.lead(), int64_t(vi.B) * vi.H, int64_t(vi.B) * vi.H, vo.st, vi.st};
}

struct Config {
  int rows = 32, mats = 4, inflight = 2;
};

int persistent_blocks(const void* kernel, int threads) {
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return sms * std::max(per_sm, 1);
}

// Launches version v in direction `backward`; returns its description.
template <bool kBackward>
std::string launch(int v, const Problem& p, const Config& cfg) {
  const Io io = io_of(p, kBackward);
  const int T_ = p.s.T, h = p.s.hd / 2;
  const Side<bf16> q = side<bf16>(p.oq, p.qout, io.q, io.qi, T_), k = side<bf16>(p.ok, p.kout, io.k, io.ki, T_);
  const unsigned tb = unsigned((T_ + kRowsPerBlock - 1) / kRowsPerBlock);
  switch (v) {
    case 0: {  // copy of the same bytes (dense q then dense k regions)
      const int64_t n = int64_t(p.nq) * 2 / 16;
      copy_kernel<<<132 * 8, 256>>>(reinterpret_cast<uint4*>(p.oq), reinterpret_cast<const uint4*>(p.gq), n);
      copy_kernel<<<132 * 8, 256>>>(reinterpret_cast<uint4*>(p.ok), reinterpret_cast<const uint4*>(p.gk),
                                    int64_t(p.nk) * 2 / 16);
      return "dense 16-byte copy, 2 launches";
    }
    case 1: {
      for (const Side<bf16>* s : {&q, &k})
        lib_kernel<bf16, kN, kBackward><<<dim3(tb, unsigned(std::min<int64_t>(s->lead, 65535))), kThreads>>>(
            s->dst, s->src, p.cos, p.sin, s->dlead, s->slead, s->lead, s->group, s->drs, s->srs, T_, h);
      return "64 rows x 256 threads, 2 launches";
    }
    case 2:
      pair_kernel<bf16, kN, kBackward><<<dim3(tb, unsigned(std::min<int64_t>(q.lead + k.lead, 65535))), kThreads>>>(
          q, k, p.cos, p.sin, T_, h);
      return "64 rows x 256 threads, 1 launch";
    case 3:
    case 4: {
      const int packs = h / kN, threads = cfg.rows * packs, items_x = (T_ + cfg.rows - 1) / cfg.rows;
      const int64_t total = q.lead + k.lead;
      const int items = int(items_x * ((total + cfg.mats - 1) / cfg.mats));
      auto kernel = cfg.inflight == 1   ? rows_kernel<bf16, kN, kBackward, 1>
                    : cfg.inflight == 4 ? rows_kernel<bf16, kN, kBackward, 4>
                                        : rows_kernel<bf16, kN, kBackward, 2>;
      const int grid = v == 3 ? items : std::min(items, persistent_blocks((const void*)kernel, threads));
      kernel<<<grid, threads>>>(q, k, p.cos, p.sin, T_, h, cfg.rows, cfg.mats, items_x, items);
      return std::to_string(cfg.rows) + " rows x " + std::to_string(cfg.mats) + " mats, " +
             std::to_string(cfg.inflight) + " in flight (" + std::to_string(threads) + " threads), " +
             std::to_string(grid) + " blocks";
    }
  }
  return "?";
}

struct Refs {
  std::vector<float> q[2], k[2];  // [backward]
};

bool run(int v, const Problem& p, const Refs& refs, const Config& cfg, bool backward, int reps) {
  static const char* names[] = {"copy", "1 lib", "2 pair", "3 rows", "4 persist"};
  CUDA_CHECK(cudaMemset(p.oq, 0xff, p.nq * 2));
  CUDA_CHECK(cudaMemset(p.ok, 0xff, p.nk * 2));
  std::string what = backward ? launch<true>(v, p, cfg) : launch<false>(v, p, cfg);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = true;
  if (v > 0) {
    const std::string tag = std::string(p.s.name) + (backward ? " bwd " : " fwd ") + names[v];
    ok = check((tag + " q").c_str(), to_host(p.oq, p.nq), refs.q[backward], 1e-2f, 1e-3f) &&
         check((tag + " k").c_str(), to_host(p.ok, p.nk), refs.k[backward], 1e-2f, 1e-3f);
  }
  const double us = median_us([&] { backward ? launch<true>(v, p, cfg) : launch<false>(v, p, cfg); }, reps);
  const double bytes = double(p.nq + p.nk) * 2 * 2;
  std::printf("%-9s %-4s %-10s %8.4f ms %6.2f TB/s  %s\n", p.s.name, backward ? "bwd" : "fwd", names[v], us / 1000,
              bytes / (us * 1e-6) / 1e12, what.c_str());
  return ok;
}

int main(int argc, char** argv) {
  int reps = 200;
  bool sweep = false;
  std::string which = "all";
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) std::fprintf(stderr, "%s wants a value\n", a.c_str()), std::exit(2);
      return std::string(argv[++i]);
    };
    if (a == "--reps") reps = std::stoi(next());
    else if (a == "--rows") cfg.rows = std::stoi(next());
    else if (a == "--mats") cfg.mats = std::stoi(next());
    else if (a == "--inflight") cfg.inflight = std::stoi(next());
    else if (a == "--sweep") sweep = true;
    else if (a == "--shape") which = next();
    else std::fprintf(stderr, "unknown argument %s\n", a.c_str()), std::exit(2);
  }
  if (cfg.rows * 8 > 1024 || cfg.rows < 1 || cfg.mats < 1 || (cfg.inflight != 1 && cfg.inflight != 2 && cfg.inflight != 4))
    std::fprintf(stderr, "bad --rows / --mats / --inflight\n"), std::exit(2);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; median of %d, each after a 256 MB memset\n", prop.name, prop.multiProcessorCount, reps);
  const Shape shapes[] = {{"llama-1b", 4, 2048, 16, 16, 128, 3 * 2048}, {"llama3-8b", 1, 4096, 32, 8, 128, 6144}};
  bool ok = true;
  for (const Shape& s : shapes) {
    if (which != "all" && !((which == "1b" && s.name == std::string("llama-1b")) ||
                            (which == "8b" && s.name == std::string("llama3-8b"))))
      continue;
    Problem p = make_problem(s);
    Refs refs;
    for (int bw = 0; bw < 2; ++bw) {
      const Io io = io_of(p, bw);
      const bool fwd = bw == 0;
      reference(refs.q[bw], fwd ? p.hbuf : p.hgq, 0, io.qi, p.qout, p, bw);
      reference(refs.k[bw], fwd ? p.hbuf : p.hgk, fwd ? int64_t(s.Hq) * s.hd : 0, io.ki, p.kout, p, bw);
    }
    for (int bw = 0; bw < 2; ++bw) {
      if (!sweep) {
        for (int v = 0; v <= 4; ++v) ok = run(v, p, refs, cfg, bw, reps) && ok;
      } else {
        ok = run(1, p, refs, cfg, bw, reps) && ok;
        for (int rows : {16, 32, 64})
          for (int mats : {2, 4, 8, 16})
            for (int inflight : {2, 4})
              for (int v : {3, 4}) ok = run(v, p, refs, Config{rows, mats, inflight}, bw, reps) && ok;
      }
    }
    for (void* d : {(void*)p.buf, (void*)p.gq, (void*)p.gk, (void*)p.oq, (void*)p.ok, (void*)p.cos, (void*)p.sin})
      CUDA_CHECK(cudaFree(d));
  }
  std::printf("%s\n", ok ? "all versions match the CPU reference" : "MISMATCH");
  return ok ? 0 : 1;
}
