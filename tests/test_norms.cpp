// rms_norm / fused_add_rms_norm / layer_norm beyond the harness: for every gradient-mask
// combination, the pruned kernel variant runs (KernelTrace), frozen parameters get no gradient,
// no partial buffer and no reduction (allocator statistics), dx is bitwise the unfrozen dx, dW
// is bitwise reproducible, the plan names the variant; errors; and on a GPU, every width class
// the CUDA kernels distinguish against the CPU backend. Each test runs on the CPU and, when a
// GPU is present, again on cuda:0.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/reduce.h"
#include "ops/rms_norm.h"
#include "ops/rms_norm_kernels.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

using test::error_of;

enum class Kind { Rms, Fused, Ln };

const char* op_name(Kind k) {
  return k == Kind::Rms ? "rms_norm" : k == Kind::Fused ? "fused_add_rms_norm" : "layer_norm";
}

// Which inputs require grad.
struct Mode {
  const char* name;
  bool x, res, w, b;
};

struct Problem {
  Kind kind;
  Shape shape;
  bool has_w = true, has_b = false;
  DType dtype = kFloat32;
};

struct NormRun {
  Tensor y, dx, dres, dw, db;
  std::vector<std::string> events;
  std::string plan;
  uint64_t allocations = 0;  // during backward
  size_t peak_extra = 0;     // peak bytes above what was in use when backward started
};

std::string str_of(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

bool has_event(const NormRun& r, const std::string& e) {
  for (const auto& x : r.events)
    if (x == e) return true;
  return false;
}

size_t count_prefix(const NormRun& r, const std::string& prefix) {
  size_t n = 0;
  for (const auto& x : r.events) n += x.rfind(prefix, 0) == 0;
  return n;
}

// Forward + backward of one problem with inputs drawn from `seed` (the same values whatever
// the mode) and a random upstream gradient for every output.
NormRun run(const Problem& p, const Mode& m, Device dev, uint64_t seed = 7) {
  Generator gen(seed);
  const TensorOptions o{p.dtype, dev};
  const int64_t dim = p.shape.back();
  Tensor x = randn(p.shape, gen, o);
  Tensor res = randn(p.shape, gen, o);
  Tensor w = randn({dim}, gen, o);
  Tensor b = randn({dim}, gen, o);
  Tensor gy = randn(p.shape, gen, o);
  Tensor gr = randn(p.shape, gen, o);
  if (!p.has_w) w = Tensor();
  if (!p.has_b || p.kind != Kind::Ln) b = Tensor();
  if (p.kind != Kind::Fused) res = Tensor();
  x.requires_grad_(m.x);
  if (res.defined()) res.requires_grad_(m.res);
  if (w.defined()) w.requires_grad_(m.w);
  if (b.defined()) b.requires_grad_(m.b);

  NormRun out;
  std::vector<Tensor> roots, grads;
  if (p.kind == Kind::Rms) {
    out.y = rms_norm(x, w, 1e-5);
    roots = {out.y}, grads = {gy};
  } else if (p.kind == Kind::Fused) {
    auto [y, r] = fused_add_rms_norm(x, res, w, 1e-5);
    out.y = y;
    roots = {y, r}, grads = {gy, gr};
  } else {
    out.y = layer_norm(x, w, b, 1e-5);
    roots = {out.y}, grads = {gy};
  }
  out.plan = format_plan(backward_plan(roots));
  synchronize(dev);
  reset_peak_memory_stats(dev);
  const MemoryStats before = memory_stats(dev);
  {
    KernelTrace trace;
    backward(roots, grads);
    out.events = trace.events();
  }
  synchronize(dev);
  const MemoryStats after = memory_stats(dev);
  out.allocations = after.allocations;
  out.peak_extra = after.peak_bytes - before.bytes_in_use;
  out.dx = x.grad();
  if (res.defined()) out.dres = res.grad();
  if (w.defined()) out.dw = w.grad();
  if (b.defined()) out.db = b.grad();
  return out;
}

class Norms : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && !testing::cuda_ready())
      GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  }
  Device dev() const { return GetParam(); }
};

// The kernel variant a mode selects.
NormGrads grads_of(const Problem& p, const Mode& m) {
  return {m.x || (p.kind == Kind::Fused && m.res), p.has_w && m.w, p.kind == Kind::Ln && p.has_b && m.b};
}

// Checks one mode against the all run of the same problem.
void check_mode(const Problem& p, const Mode& m, const NormRun& all, const NormRun& part) {
  const std::string op = op_name(p.kind);
  const NormGrads f = grads_of(p, m);
  SCOPED_TRACE(op + " mode " + m.name + "\nevents:\n" + str_of(part.events) + "plan:\n" + part.plan);
  // The pruned variant ran, and only it.
  EXPECT_TRUE(has_event(part, op + ".backward<" + norm_variant(f) + ">"));
  EXPECT_EQ(count_prefix(part, op + ".backward<"), 1u);
  EXPECT_EQ(has_event(part, op + ".dw_reduce"), f.dw);
  EXPECT_EQ(has_event(part, op + ".db_reduce"), f.db);
  // The plan names it too.
  EXPECT_NE(part.plan.find(op + "[" + norm_variant(f) + "]"), std::string::npos);
  // Frozen inputs get nothing; the rest match the all run (dx bitwise).
  EXPECT_EQ(part.dx.defined(), m.x);
  EXPECT_EQ(part.dres.defined(), p.kind == Kind::Fused && m.res);
  EXPECT_EQ(part.dw.defined(), f.dw);
  EXPECT_EQ(part.db.defined(), f.db);
  if (m.x) EXPECT_TENSOR_EQ(part.dx, all.dx);
  if (part.dres.defined()) EXPECT_TENSOR_EQ(part.dres, all.dres);
  // Another variant may cut the rows into other partial chunks: equal up to summation order.
  if (f.dw) EXPECT_TENSOR_NEAR(part.dw, all.dw, 1e-5, 1e-5);
  if (f.db) EXPECT_TENSOR_NEAR(part.db, all.db, 1e-5, 1e-5);
  // Pruning shows in the allocator: fewer allocations and a lower peak than the all run.
  EXPECT_LT(part.allocations, all.allocations);
  EXPECT_LT(part.peak_extra, all.peak_extra);
}

// 20000 float32 columns: over the register kernels' width on the GPU (dx by the looping kernel,
// dW / dB by the tiled kernel in a second launch).
const std::vector<Shape> kShapes = {{67, 300}, {3, 41, 1500}, {130, 128}, {5, 20000}};

TEST_P(Norms, RmsNormMasks) {
  for (const Shape& s : kShapes) {
    Problem p{Kind::Rms, s};
    const NormRun all = run(p, {"full", true, false, true, false}, dev());
    EXPECT_TRUE(has_event(all, "rms_norm.backward<dx,dw>")) << str_of(all.events);
    EXPECT_TRUE(has_event(all, "rms_norm.dw_reduce"));
    for (const Mode& m : {Mode{"weight frozen", true, false, false, false}, Mode{"x frozen", false, false, true, false}})
      check_mode(p, m, all, run(p, m, dev()));
  }
}

TEST_P(Norms, FusedAddRmsNormMasks) {
  for (const Shape& s : kShapes) {
    Problem p{Kind::Fused, s};
    const NormRun all = run(p, {"full", true, true, true, false}, dev());
    EXPECT_TRUE(has_event(all, "fused_add_rms_norm.backward<dx,dw>")) << str_of(all.events);
    // dx and dresidual are one tensor's values.
    EXPECT_TENSOR_EQ(all.dx, all.dres);
    for (const Mode& m : {Mode{"weight frozen", true, true, false, false},
                          Mode{"x and residual frozen", false, false, true, false},
                          Mode{"only residual", false, true, false, false}})
      check_mode(p, m, all, run(p, m, dev()));
  }
}

TEST_P(Norms, LayerNormMasks) {
  for (const Shape& s : kShapes) {
    Problem p{Kind::Ln, s, true, true};
    const NormRun all = run(p, {"full", true, false, true, true}, dev());
    EXPECT_TRUE(has_event(all, "layer_norm.backward<dx,dw,db>")) << str_of(all.events);
    for (const Mode& m : {Mode{"weight frozen", true, false, false, true}, Mode{"bias frozen", true, false, true, false},
                          Mode{"weight and bias frozen", true, false, false, false},
                          Mode{"x frozen", false, false, true, true}, Mode{"x and weight frozen", false, false, false, true},
                          Mode{"x and bias frozen", false, false, true, false}})
      check_mode(p, m, all, run(p, m, dev()));
  }
}

TEST_P(Norms, WeightGradientIsBitwiseReproducible) {
  for (Kind k : {Kind::Rms, Kind::Fused, Kind::Ln})
    for (const Shape& s : {Shape{2000, 384}, Shape{300, 1500}, Shape{5000, 128}, Shape{40, 20000}}) {
      Problem p{k, s, true, true};
      const Mode all{"full", true, true, true, true}, dw_only{"x frozen", false, false, true, true};
      for (const Mode& m : {all, dw_only}) {
        SCOPED_TRACE(std::string(op_name(k)) + " " + m.name);
        const NormRun a = run(p, m, dev()), b = run(p, m, dev());
        EXPECT_TENSOR_EQ(a.dw, b.dw);
        if (k == Kind::Ln) EXPECT_TENSOR_EQ(a.db, b.db);
      }
    }
}

// Against the same function composed of basic differentiable ops, in float64 on the CPU.
TEST(NormVariant, NamesEachMaskAndInstantiatesItOnce) {
  EXPECT_EQ(norm_variant({true, false, false}), "dx");
  EXPECT_EQ(norm_variant({true, true, true}), "dx,dw,db");
  EXPECT_EQ(norm_variant({false, false, true}), "db");
  EXPECT_EQ(norm_variant({}), "none");
  EXPECT_EQ(norm_backward_event("layer_norm", {false, true, true}), "layer_norm.backward<dw,db>");
  // with_norm_variant calls f once with the mask as compile-time flags, and not at all for none.
  for (int m = 0; m < 8; ++m) {
    const NormGrads g{bool(m & 1), bool(m & 2), bool(m & 4)};
    int calls = 0;
    NormGrads seen;
    with_norm_variant(g, [&](auto dx, auto dw, auto db) {
      ++calls;
      seen = {dx(), dw(), db()};
    });
    EXPECT_EQ(calls, m ? 1 : 0) << norm_variant(g);
    if (m) EXPECT_EQ(norm_variant(seen), norm_variant(g));
  }
}

TEST(NormsReference, MatchesComposedOpsInFloat64) {
  Generator gen(11);
  const TensorOptions o{kFloat64, Device::cpu()};
  for (int64_t dim : {1, 7, 128, 1500}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Tensor x = randn({9, dim}, gen, o).requires_grad_(), w = randn({dim}, gen, o).requires_grad_();
    Tensor b = randn({dim}, gen, o).requires_grad_(), gy = randn({9, dim}, gen, o);
    auto grads = [&](const Tensor& y, std::vector<Tensor> wrt) {
      for (auto& t : wrt) t.set_grad(Tensor());
      y.backward(gy);
      std::vector<Tensor> g;
      for (auto& t : wrt) g.push_back(clone_data(t.grad()));
      return g;
    };
    // RMSNorm (each graph built inside its own call, so no two graphs share a leaf's accumulator)
    auto g1 = grads(rms_norm(x, w, 1e-5), {x, w});
    auto g2 = grads(x * rsqrt(mean(x * x, {-1}, true) + 1e-5) * w, {x, w});
    EXPECT_TENSOR_NEAR(g1[0], g2[0], 1e-10, 1e-10);
    EXPECT_TENSOR_NEAR(g1[1], g2[1], 1e-10, 1e-10);
    // LayerNorm
    auto l1 = grads(layer_norm(x, w, b, 1e-5), {x, w, b});
    auto l2 = grads([&] {
      Tensor mu = mean(x, {-1}, true);
      Tensor var = mean((x - mu) * (x - mu), {-1}, true);
      return (x - mu) * rsqrt(var + 1e-5) * w + b;
    }(), {x, w, b});
    for (int i = 0; i < 3; ++i) EXPECT_TENSOR_NEAR(l1[i], l2[i], 1e-10, 1e-10);
  }
}

TEST_P(Norms, SavesOnlyWhatABackwardCanUse) {
  Generator gen(3);
  const TensorOptions o{kFloat32, dev()};
  const int64_t rows = 6, dim = 40;
  Tensor x = randn({rows, dim}, gen, o), w = randn({dim}, gen, o), b = randn({dim}, gen, o);
  const size_t xb = rows * dim * 4, wb = dim * 4, sb = rows * 4;
  // Frozen x, trainable weight: x and rstd kept, the weight not (only dx reads it).
  w.requires_grad_(true);
  EXPECT_EQ(backward_plan({rms_norm(x, w)})[0].saved_bytes, xb + sb);
  EXPECT_EQ(backward_plan({layer_norm(x, w, Tensor())})[0].saved_bytes, xb + 2 * sb);
  // Only the bias trains: dB = sum(dy) needs nothing saved.
  w.requires_grad_(false);
  b.requires_grad_(true);
  EXPECT_EQ(backward_plan({layer_norm(x, w, b)})[0].saved_bytes, 0u);
  // Trainable x: the weight too.
  x.requires_grad_(true);
  EXPECT_EQ(backward_plan({rms_norm(x, w)})[0].saved_bytes, xb + wb + sb);
  // No grad: no statistics are even allocated (y alone).
  {
    NoGradGuard g;
    reset_peak_memory_stats(dev());
    Tensor y = rms_norm(x, w);
    EXPECT_EQ(memory_stats(dev()).allocations, 1u);
    reset_peak_memory_stats(dev());
    Tensor z = layer_norm(x, w, b);
    EXPECT_EQ(memory_stats(dev()).allocations, 1u);
  }
}

TEST_P(Norms, PlanNamesTheVariant) {
  Generator gen(5);
  const TensorOptions o{kFloat32, dev()};
  Tensor x = randn({4, 16}, gen, o).requires_grad_(), w = randn({16}, gen, o), b = randn({16}, gen, o);
  EXPECT_NE(format_plan(backward_plan({rms_norm(x, w)})).find("rms_norm[dx]"), std::string::npos);
  w.requires_grad_(true);
  EXPECT_NE(format_plan(backward_plan({rms_norm(x, w)})).find("rms_norm[dx,dw]"), std::string::npos);
  EXPECT_NE(format_plan(backward_plan({rms_norm(x, w)}, {w})).find("rms_norm[dw]"), std::string::npos);
  EXPECT_NE(format_plan(backward_plan({layer_norm(x, w, b)})).find("layer_norm[dx,dw]"), std::string::npos);
  b.requires_grad_(true);
  EXPECT_NE(format_plan(backward_plan({layer_norm(x, w, b)}, {b})).find("layer_norm[db]"), std::string::npos);
  auto [y, r] = fused_add_rms_norm(x, randn({4, 16}, gen, o), w);
  EXPECT_NE(format_plan(backward_plan({y}, {w})).find("fused_add_rms_norm[dw]"), std::string::npos);
}

// backward(inputs=...) narrows the mask at backward time: the same graph runs the dW-only variant.
TEST_P(Norms, InputsArgumentSelectsVariantAtBackwardTime) {
  Generator gen(9);
  const TensorOptions o{kFloat32, dev()};
  Tensor x = randn({8, 24}, gen, o).requires_grad_(), w = randn({24}, gen, o).requires_grad_();
  Tensor y = rms_norm(x, w);
  KernelTrace t;
  backward({y}, {randn({8, 24}, gen, o)}, false, {w});
  EXPECT_TRUE(t.contains("rms_norm.backward<dw>")) << t.str();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
}

TEST_P(Norms, Errors) {
  const TensorOptions o{kFloat32, dev()};
  Tensor x = zeros({4, 8}, o);
  auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  std::string e = error_of([&] { rms_norm(x, zeros({7}, o)); });
  EXPECT_TRUE(has(e, "rms_norm") && has(e, "weight must be [8]") && has(e, "[7]")) << e;
  e = error_of([&] { rms_norm(x, zeros({8, 1}, o)); });
  EXPECT_TRUE(has(e, "weight must be [8]") && has(e, "[8, 1]")) << e;
  e = error_of([&] { rms_norm(x, zeros({8}, {kBFloat16, dev()})); });
  EXPECT_TRUE(has(e, "rms_norm") && has(e, "dtype") && has(e, "bfloat16") && has(e, "float32")) << e;
  e = error_of([&] { rms_norm(zeros({4, 8}, {kInt64, dev()}), Tensor()); });
  EXPECT_TRUE(has(e, "rms_norm") && has(e, "floating point")) << e;
  e = error_of([&] { rms_norm(x, Tensor(), -1.0); });
  EXPECT_TRUE(has(e, "eps")) << e;
  e = error_of([&] { fused_add_rms_norm(x, zeros({4, 9}, o), Tensor()); });
  EXPECT_TRUE(has(e, "fused_add_rms_norm") && has(e, "residual") && has(e, "[4, 9]")) << e;
  e = error_of([&] { layer_norm(x, zeros({8}, o), zeros({6}, o)); });
  EXPECT_TRUE(has(e, "layer_norm") && has(e, "bias must be [8]") && has(e, "[6]")) << e;
  e = error_of([&] { layer_norm(zeros({4, 0}, o), Tensor(), Tensor()); });
  EXPECT_TRUE(has(e, "layer_norm") && has(e, "last dim")) << e;
  if (dev().is_cuda()) {
    e = error_of([&] { rms_norm(x, zeros({8})); });
    EXPECT_TRUE(has(e, "rms_norm") && has(e, "cuda:0") && has(e, "cpu")) << e;
    e = error_of([&] { layer_norm(x, Tensor(), zeros({8})); });
    EXPECT_TRUE(has(e, "layer_norm") && has(e, "cuda:0") && has(e, "cpu")) << e;
    e = error_of([&] { rms_norm(zeros({4, 8}, {kFloat64, dev()}), Tensor()); });
    EXPECT_TRUE(has(e, "float64") && has(e, "CPU")) << e;
  }
}

TEST_P(Norms, EmptyBatch) {
  const TensorOptions o{kFloat32, dev()};
  Tensor x = zeros({0, 8}, o).requires_grad_(), w = ones({8}, o).requires_grad_();
  Tensor y = rms_norm(x, w);
  EXPECT_EQ(y.shape(), (Shape{0, 8}));
  y.backward(zeros({0, 8}, o));
  EXPECT_TENSOR_EQ(w.grad(), zeros({8}, o));
}

INSTANTIATE_TEST_SUITE_P(Device, Norms, ::testing::Values(Device::cpu(), Device::cuda(0)),
                         [](const auto& info) { return info.param.is_cpu() ? "cpu" : "cuda"; });

// ---- GPU against the CPU backend over every width class of the CUDA kernels ----
// Widths: a sub-warp row (128), odd widths (1500: 8-byte vectors; 3584; 1501: scalar loads; 27:
// scalar loads, two a thread, 16 rows a block), the register-resident sizes up to 8192, and
// 70000 (over the register limit: the looping kernel); 2048 rows give the dW / dB reduction
// hundreds of partial rows. float32 and bfloat16 on the GPU against float32 on the CPU on the
// same values. dW / dB are checked from the full variant and from the dW / dB-only kernel (x
// frozen), whose tiling differs by width (70000: more column tiles than resident blocks; 300 x
// 16384: several unrolled row steps a thread). The frozen-parameter variant (dx alone: another
// kernel or launch shape than the full one at most widths) gives bitwise the full one's dx.
TEST(NormsCuda, MatchesCpuOverWidthClasses) {
  TG_REQUIRE_CUDA();
  struct Case {
    int64_t rows, dim;
  };
  const std::vector<Case> cases = {{300, 128}, {64, 1500}, {33, 1501}, {40, 3584}, {16, 4096},
                                   {12, 8192}, {3, 70000}, {1000, 64}, {7, 1}, {5, 33}, {2048, 1024},
                                   {300, 16384}, {50, 27}};
  for (DType dt : {kFloat32, kBFloat16})
    for (const Case& c : cases)
      for (Kind k : {Kind::Rms, Kind::Fused, Kind::Ln}) {
        SCOPED_TRACE(std::string(op_name(k)) + " " + dtype_name(dt) + " [" + std::to_string(c.rows) + ", " +
                     std::to_string(c.dim) + "]");
        Problem p{k, {c.rows, c.dim}, true, true, dt};
        const Mode all{"full", true, true, true, true};
        const NormRun gpu = run(p, all, Device::cuda(0), 21);
        // The CPU reference on the same (already rounded) values in float32.
        const NormRun cpu = [&] {
          // run() draws in the problem's dtype; draw on the GPU in dt, then copy to the CPU.
          Generator g(21);
          const TensorOptions og{dt, Device::cuda(0)};
          const int64_t dim = c.dim;
          auto host = [](const Tensor& t) { return to(t, kFloat32, Device::cpu()); };
          Tensor x = host(randn(p.shape, g, og)), res = host(randn(p.shape, g, og));
          Tensor w = host(randn({dim}, g, og)), b = host(randn({dim}, g, og));
          Tensor gy = host(randn(p.shape, g, og)), gr = host(randn(p.shape, g, og));
          if (k != Kind::Ln) b = Tensor();
          if (k != Kind::Fused) res = Tensor();
          for (Tensor* t : {&x, &res, &w, &b})
            if (t->defined()) t->requires_grad_(true);
          NormRun r;
          if (k == Kind::Rms) {
            r.y = rms_norm(x, w, 1e-5);
            r.y.backward(gy);
          } else if (k == Kind::Fused) {
            auto [y, rr] = fused_add_rms_norm(x, res, w, 1e-5);
            r.y = y;
            backward({y, rr}, {gy, gr});
            r.dres = res.grad();
          } else {
            r.y = layer_norm(x, w, b, 1e-5);
            r.y.backward(gy);
            r.db = b.grad();
          }
          r.dx = x.grad();
          r.dw = w.grad();
          return r;
        }();
        const double tol = dt == kFloat32 ? 2e-4 : 4e-2;
        // Parameter gradients sum over rows: their tolerance grows with sqrt(rows).
        const double ptol = tol * std::sqrt(double(c.rows));
        auto f32 = [](const Tensor& t) { return to(t, kFloat32, Device::cpu()); };
        EXPECT_TENSOR_NEAR(f32(gpu.y), cpu.y, tol, tol);
        EXPECT_TENSOR_NEAR(f32(gpu.dx), cpu.dx, tol, tol);
        EXPECT_TENSOR_NEAR(f32(gpu.dw), cpu.dw, tol, ptol);
        if (k == Kind::Fused) EXPECT_TENSOR_NEAR(f32(gpu.dres), cpu.dres, tol, tol);
        if (k == Kind::Ln) EXPECT_TENSOR_NEAR(f32(gpu.db), cpu.db, tol, ptol);
        {
          SCOPED_TRACE("parameters frozen");
          const NormRun frozen = run(p, {"parameters frozen", true, true, false, false}, Device::cuda(0), 21);
          ASSERT_FALSE(frozen.dw.defined());
          EXPECT_TENSOR_EQ(frozen.dx, gpu.dx);
          if (k == Kind::Fused) EXPECT_TENSOR_EQ(frozen.dres, gpu.dres);
        }
        // x frozen: dW (and dB) alone; for LayerNorm also dB alone.
        std::vector<Mode> param_modes = {{"x frozen", false, false, true, true}};
        if (k == Kind::Ln) param_modes.push_back({"x and weight frozen", false, false, false, true});
        for (const Mode& m : param_modes) {
          SCOPED_TRACE(m.name);
          const NormRun only = run(p, m, Device::cuda(0), 21);
          ASSERT_FALSE(only.dx.defined());
          if (m.w) EXPECT_TENSOR_NEAR(f32(only.dw), cpu.dw, tol, ptol);
          if (k == Kind::Ln) EXPECT_TENSOR_NEAR(f32(only.db), cpu.db, tol, ptol);
        }
      }
}

}  // namespace
}  // namespace tg
