/*
cuDNN's fused flash attention through the backend graph API (issue #36): the graphs of
ops/cuda/cudnn_sdpa.cuh (the library's), checked against a float64 CPU reference and timed.

Inputs as the models give them: q, k, v the [B, H, T, hd] views of [B, T, H, hd] projections
(grouped kv heads read in place), the output in [B, T, H, hd] memory, dout contiguous, lse float32
[B, H, T]; bf16. Checks (relative and max error, out / lse / dq / dk / dv): head dims 64, 96, 128,
256, causal and not, grouped kv heads, odd lengths, more and fewer keys than queries; the
backward deterministic and not (reruns bitwise equal or not); a CUDA graph capture of forward +
backward replayed bitwise equal to the eager calls. Then times (CUDA events, L2 flushed, median)
forward, backward (both kinds) and forward + backward at the shapes of bench/attention_bench.cu,
and prints each plan's engine, workspace and build time.

Build and run (dev/cuda/05_attention_cudnn.sh does both on the GPU machine and adds the library's
attention_bench and PyTorch's SDPA backends in the same call):
  nvcc -O3 -std=c++20 -arch=sm_90 -Xcompiler -fopenmp -I. -I<cudnn>/include -o attention_cudnn \
       dev/cuda/05_attention_cudnn.cu -L<cudnn>/lib -lcudnn
  ./attention_cudnn [--reps N] [--json rows.json] [--skip-checks]
*/
#include <omp.h>

#include <chrono>
#include <string>

#include "common.cuh"

#include "ops/cuda/cudnn_sdpa.cuh"

namespace sdpa = tg::cuda::cudnn_sdpa;

namespace {

struct Case {
  int64_t B, H, Hkv, L, S, D;
  bool causal;
  std::string name() const {
    std::string s = std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(L) + "x" + std::to_string(D);
    if (S != L) s += "-S" + std::to_string(S);
    if (Hkv != H) s += "-kv" + std::to_string(Hkv);
    return s + (causal ? " causal" : " full");
  }
};

// Device buffers of one case in the model's layouts and the plans' view of them.
struct Buffers {
  Case c;
  std::vector<float> q, k, v, dout;  // bf16-rounded host values
  __nv_bfloat16 *dq_in, *dk_in, *dv_in, *ddout, *dout_o, *ddq, *ddk, *ddv;
  float* lse;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  explicit Buffers(const Case& c_, uint32_t seed) : c(c_) {
    dq_in = to_device<__nv_bfloat16>(random_values(c.B * c.L * c.H * c.D, seed), q);
    dk_in = to_device<__nv_bfloat16>(random_values(c.B * c.S * c.Hkv * c.D, seed + 1), k);
    dv_in = to_device<__nv_bfloat16>(random_values(c.B * c.S * c.Hkv * c.D, seed + 2), v);
    ddout = to_device<__nv_bfloat16>(random_values(c.B * c.H * c.L * c.D, seed + 3), dout);
    dout_o = device_zeros<__nv_bfloat16>(c.B * c.L * c.H * c.D);
    ddq = device_zeros<__nv_bfloat16>(c.B * c.L * c.H * c.D);
    ddk = device_zeros<__nv_bfloat16>(c.B * c.S * c.Hkv * c.D);
    ddv = device_zeros<__nv_bfloat16>(c.B * c.S * c.Hkv * c.D);
    lse = device_zeros<float>(c.B * c.H * c.L);
  }
  ~Buffers() {
    for (void* p : {(void*)dq_in, (void*)dk_in, (void*)dv_in, (void*)ddout, (void*)dout_o, (void*)ddq, (void*)ddk,
                    (void*)ddv, (void*)lse, ws})
      cudaFree(p);
  }
  void* workspace(int64_t bytes) {
    if (size_t(bytes) > ws_bytes) {
      cudaFree(ws);
      CUDA_CHECK(cudaMalloc(&ws, bytes));
      ws_bytes = bytes;
    }
    return ws;
  }
  sdpa::Problem problem(bool backward, bool deterministic) const {
    sdpa::Problem p;
    p.backward = backward, p.causal = c.causal, p.deterministic = deterministic;
    p.b = c.B, p.hq = c.H, p.hkv = c.Hkv, p.sq = c.L, p.skv = c.S, p.d_qk = c.D, p.d_v = c.D;
    p.q = p.o = p.dq = {c.L * c.H * c.D, c.D, c.H * c.D, 1};
    p.k = p.v = p.dk = p.dv = {c.S * c.Hkv * c.D, c.D, c.Hkv * c.D, 1};
    p.dout = {c.H * c.L * c.D, c.L * c.D, c.D, 1};
    return p;
  }
  sdpa::Pointers pointers() const { return {dq_in, dk_in, dv_in, dout_o, lse, ddout, ddq, ddk, ddv}; }
  float scale() const { return 1.f / std::sqrt(float(c.D)); }
};

struct Built {
  std::unique_ptr<sdpa::Plan> plan;
  double ms = 0;
};

Built build(cudnnHandle_t h, const sdpa::Problem& p) {
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  Built b{sdpa::build_plan(h, p, &why)};
  b.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!b.plan) std::printf("    %s plan: not supported: %s\n", p.backward ? "backward" : "forward", why.c_str());
  return b;
}

void run(cudnnHandle_t h, const sdpa::Plan& plan, Buffers& buf) {
  sdpa::execute(h, plan, buf.pointers(), buf.scale(), buf.workspace(plan.workspace_bytes));
}

// ---------------------------------------------------------------- the float64 reference

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Buffers& b) {
  const Case& c = b.c;
  const int64_t group = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.D));
  Reference r;
  r.out.assign(c.B * c.L * c.H * c.D, 0), r.lse.assign(c.B * c.H * c.L, 0), r.dq.assign(r.out.size(), 0);
  r.dk.assign(c.B * c.S * c.Hkv * c.D, 0), r.dv.assign(r.dk.size(), 0);
  auto qi = [&](int64_t bb, int64_t i, int64_t h) { return ((bb * c.L + i) * c.H + h) * c.D; };
  auto kj = [&](int64_t bb, int64_t j, int64_t h) { return ((bb * c.S + j) * c.Hkv + h) * c.D; };
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t bb = 0; bb < c.B; ++bb)
    for (int64_t hk = 0; hk < c.Hkv; ++hk)
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        std::vector<double> p(c.S), dp(c.S);
        for (int64_t i = 0; i < c.L; ++i) {
          const int64_t keys = c.causal ? std::min(i + 1, c.S) : c.S;
          double m = -1e300;
          for (int64_t j = 0; j < keys; ++j) {
            double s = 0;
            for (int64_t d = 0; d < c.D; ++d) s += double(b.q[qi(bb, i, h) + d]) * b.k[kj(bb, j, hk) + d];
            p[j] = s * scale, m = std::max(m, p[j]);
          }
          double l = 0;
          for (int64_t j = 0; j < keys; ++j) l += (p[j] = std::exp(p[j] - m));
          r.lse[(bb * c.H + h) * c.L + i] = m + std::log(l);
          double* o = &r.out[qi(bb, i, h)];
          for (int64_t j = 0; j < keys; ++j) {
            p[j] /= l;
            for (int64_t d = 0; d < c.D; ++d) o[d] += p[j] * b.v[kj(bb, j, hk) + d];
          }
          const float* g = &b.dout[((bb * c.H + h) * c.L + i) * c.D];
          double delta = 0;
          for (int64_t d = 0; d < c.D; ++d) delta += g[d] * o[d];
          for (int64_t j = 0; j < keys; ++j) {
            double s = 0;
            for (int64_t d = 0; d < c.D; ++d) s += double(g[d]) * b.v[kj(bb, j, hk) + d];
            const double ds = p[j] * (s - delta) * scale;
            for (int64_t d = 0; d < c.D; ++d) {
              r.dq[qi(bb, i, h) + d] += ds * b.k[kj(bb, j, hk) + d];
              r.dk[kj(bb, j, hk) + d] += ds * b.q[qi(bb, i, h) + d];
              r.dv[kj(bb, j, hk) + d] += p[j] * g[d];
            }
          }
        }
      }
  return r;
}

bool close(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
  double norm = 0, diff = 0, wmax = 0, dmax = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    norm += want[i] * want[i], diff += d * d, wmax = std::max(wmax, std::fabs(want[i]));
    dmax = std::isnan(d) ? d : std::max(dmax, d);
  }
  const double rel = std::sqrt(diff / std::max(norm, 1e-300)), mx = dmax / std::max(wmax, 1e-300);
  const bool ok = rel < 1e-2 && mx < 3e-2;  // tests/test_attention_cuda.cpp's bf16 tolerances
  std::printf("    %-4s rel %.2e  max %.2e  %s\n", what, rel, mx, ok ? "ok" : "MISMATCH");
  return ok;
}

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Grads {
  std::vector<float> out, dq, dk, dv;
};

Grads fetch(const Buffers& b) {
  const Case& c = b.c;
  return {to_host(b.dout_o, c.B * c.L * c.H * c.D), to_host(b.ddq, c.B * c.L * c.H * c.D),
          to_host(b.ddk, c.B * c.S * c.Hkv * c.D), to_host(b.ddv, c.B * c.S * c.Hkv * c.D)};
}

bool describe(const char* what, const Built& b) {
  if (!b.plan) return false;
  std::printf("    %-18s engine %2lld%s, workspace %8.2f MiB (cuDNN's %8.2f), built in %7.1f ms\n", what,
              (long long)b.plan->engine, b.plan->nondeterministic ? " (nondeterministic)" : "",
              b.plan->workspace_bytes / 1048576.0, b.plan->cudnn_workspace / 1048576.0, b.ms);
  return true;
}

bool check_case(cudnnHandle_t h, const Case& c, uint32_t seed) {
  std::printf("%s\n", c.name().c_str());
  Buffers buf(c, seed);
  Built fwd = build(h, buf.problem(false, false));
  if (!describe("forward", fwd)) return true;  // reported above; not a wrong answer
  run(h, *fwd.plan, buf);
  CUDA_CHECK(cudaDeviceSynchronize());
  const Reference want = reference(buf);
  bool ok = close("out", to_host(buf.dout_o, want.out.size()), want.out);
  ok &= close("lse", to_host(buf.lse, want.lse.size()), want.lse);
  for (bool det : {false, true}) {
    Built bwd = build(h, buf.problem(true, det));
    if (!describe(det ? "backward (determ.)" : "backward", bwd)) continue;
    run(h, *bwd.plan, buf);
    const Grads g = fetch(buf);
    ok &= close("dq", g.dq, want.dq) & close("dk", g.dk, want.dk) & close("dv", g.dv, want.dv);
    bool same = true;
    for (int rerun = 0; rerun < 3; ++rerun) {
      run(h, *bwd.plan, buf);
      const Grads again = fetch(buf);
      same &= bitwise(again.dq, g.dq) && bitwise(again.dk, g.dk) && bitwise(again.dv, g.dv);
    }
    std::printf("    reruns bitwise equal: %s\n", same ? "yes" : "no");
    if (det && !same) ok = false;
  }
  return ok;
}

// Forward + deterministic backward captured in a CUDA graph (thread-local mode, a non-blocking
// stream, as core/cuda/runtime.cu captures) and replayed: bitwise the eager results.
bool check_graph_capture(cudnnHandle_t h) {
  const Case c{2, 8, 2, 512, 512, 128, true};
  std::printf("CUDA graph capture, %s\n", c.name().c_str());
  Buffers buf(c, 77);
  Built fwd = build(h, buf.problem(false, false)), bwd = build(h, buf.problem(true, true));
  if (!fwd.plan || !bwd.plan) return false;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TG_CUDNN_CHECK(cudnnSetStream(h, s));
  void* ws = buf.workspace(std::max(fwd.plan->workspace_bytes, bwd.plan->workspace_bytes));
  auto both = [&] {
    sdpa::execute(h, *fwd.plan, buf.pointers(), buf.scale(), ws);
    sdpa::execute(h, *bwd.plan, buf.pointers(), buf.scale(), ws);
  };
  both();
  CUDA_CHECK(cudaStreamSynchronize(s));
  const Grads eager = fetch(buf);
  CUDA_CHECK(cudaMemsetAsync(buf.dout_o, 0, eager.out.size() * 2, s));
  CUDA_CHECK(cudaMemsetAsync(buf.ddq, 0, eager.dq.size() * 2, s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  both();
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  const Grads replay = fetch(buf);
  const bool ok = bitwise(replay.out, eager.out) && bitwise(replay.dq, eager.dq) && bitwise(replay.dk, eager.dk) &&
                  bitwise(replay.dv, eager.dv);
  std::printf("    replay bitwise equal to eager: %s\n", ok ? "yes" : "NO");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  TG_CUDNN_CHECK(cudnnSetStream(h, nullptr));
  CUDA_CHECK(cudaStreamDestroy(s));
  return ok;
}

// ---------------------------------------------------------------- timing

struct Row {
  std::string shape;
  bool causal;
  double fwd, bwd, bwd_det, both, both_det, tflops;
  double ws_mib, ws_det_mib;
};

Row time_case(cudnnHandle_t h, const Case& c, int reps) {
  Buffers buf(c, 5);
  Built fwd = build(h, buf.problem(false, false)), bwd = build(h, buf.problem(true, false)),
        det = build(h, buf.problem(true, true));
  Row r{c.name(), c.causal, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  if (!fwd.plan) return r;
  r.fwd = median_us([&] { run(h, *fwd.plan, buf); }, reps) / 1e3;
  if (bwd.plan) {
    r.bwd = median_us([&] { run(h, *bwd.plan, buf); }, reps) / 1e3;
    r.both = median_us([&] { run(h, *fwd.plan, buf), run(h, *bwd.plan, buf); }, reps) / 1e3;
    r.ws_mib = bwd.plan->workspace_bytes / 1048576.0;
  }
  if (det.plan) {
    r.bwd_det = median_us([&] { run(h, *det.plan, buf); }, reps) / 1e3;
    r.both_det = median_us([&] { run(h, *fwd.plan, buf), run(h, *det.plan, buf); }, reps) / 1e3;
    r.ws_det_mib = det.plan->workspace_bytes / 1048576.0;
  }
  const double fwd_flops = 4.0 * c.B * c.H * double(c.L) * c.S * c.D / (c.causal ? 2 : 1);
  r.tflops = 3.5 * fwd_flops / (r.both * 1e-3) / 1e12;  // bench/attention_bench.cu's convention
  return r;
}

// f(), or false after printing the tg::Error it threw (one failing case does not hide the others).
template <class F>
bool guarded(F&& f) {
  try {
    return f();
  } catch (const tg::Error& e) {
    std::printf("    ERROR: %s\n", e.what());
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  bool checks = true;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--skip-checks")) checks = false;
    else return std::fprintf(stderr, "usage: attention_cudnn [--reps N] [--json rows.json] [--skip-checks]\n"), 2;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, cuDNN runtime %zu (headers %d), %d OpenMP threads for the reference\n", prop.name,
              cudnnGetVersion(), CUDNN_VERSION, omp_get_max_threads());
  cudnnHandle_t h;
  TG_CUDNN_CHECK(cudnnCreate(&h));
  bool ok = true;
  if (checks) {
    uint32_t seed = 10;
    for (bool causal : {true, false}) {
      for (const Case& c : {Case{2, 4, 4, 17, 17, 64, causal}, Case{2, 4, 2, 127, 127, 128, causal},
                            Case{1, 4, 1, 1000, 1000, 128, causal}, Case{1, 4, 4, 1024, 1024, 64, causal},
                            Case{1, 8, 2, 256, 256, 256, causal}, Case{2, 4, 4, 128, 128, 96, causal},
                            Case{1, 2, 2, 70, 130, 64, causal}, Case{1, 2, 2, 130, 70, 64, causal},
                            Case{2, 4, 2, 256, 256, 128, causal}})
        ok &= guarded([&] { return check_case(h, c, seed += 10); });
    }
    ok &= guarded([&] { return check_graph_capture(h); });
    std::printf("checks: %s\n\n", ok ? "all passed" : "FAILED");
  }
  std::printf("%-28s %8s %8s %9s %9s %10s %7s %8s %8s\n", "shape (BxHxTxhd)", "fwd ms", "bwd ms", "bwd det", "fwd+bwd",
              "+bwd det", "TFLOP/s", "ws MiB", "det MiB");
  std::vector<Row> rows;
  for (bool causal : {true, false})
    for (const Case& c : {Case{8, 12, 12, 1024, 1024, 64, causal}, Case{4, 32, 32, 2048, 2048, 128, causal},
                          Case{1, 16, 16, 8192, 8192, 128, causal}, Case{4, 32, 8, 2048, 2048, 128, causal},
                          Case{4, 32, 32, 2048, 2048, 64, causal}, Case{4, 16, 16, 2048, 2048, 256, causal}}) {
      Row r;
      if (!guarded([&] { return r = time_case(h, c, reps), true; })) continue;
      std::printf("%-28s %8.3f %8.3f %9.3f %9.3f %10.3f %7.1f %8.1f %8.1f\n", r.shape.c_str(), r.fwd, r.bwd, r.bwd_det,
                  r.both, r.both_det, r.tflops, r.ws_mib, r.ws_det_mib);
      rows.push_back(r);
    }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) return std::fprintf(stderr, "cannot write %s\n", json.c_str()), 1;
    auto num = [](double x) { return std::isnan(x) ? std::string("null") : std::to_string(x); };
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const std::string shape = r.shape.substr(0, r.shape.find(' '));
      std::fprintf(f,
                   "  {\"shape\": \"%s\", \"causal\": %s, \"impl\": \"cudnn_backend\", \"cudnn\": %zu, \"fwd_ms\": %s, "
                   "\"bwd_ms\": %s, \"bwd_det_ms\": %s, \"fwdbwd_ms\": %s, \"fwdbwd_det_ms\": %s, \"tflops\": %s}%s\n",
                   shape.c_str(), r.causal ? "true" : "false", cudnnGetVersion(), num(r.fwd).c_str(), num(r.bwd).c_str(),
                   num(r.bwd_det).c_str(), num(r.both).c_str(), num(r.both_det).c_str(), num(r.tflops).c_str(),
                   i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  TG_CUDNN_CHECK(cudnnDestroy(h));
  return ok ? 0 : 1;
}
