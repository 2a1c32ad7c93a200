#include "ops/grouped_mm.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/layout.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/nf4.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "grouped_mm";

void trace(const char* op, const char* what) {
  if (KernelTrace::active()) KernelTrace::record(std::string(op) + "." + what);
}

// Rows [r0, r0 + n) of a [rows, cols] matrix with a unit inner stride, as a 2-D view.
Tensor rows_of(const Tensor& m, int64_t r0, int64_t n) {
  return m.as_strided({n, m.shape()[1]}, {m.strides()[0], 1}, m.storage_offset() + r0 * m.strides()[0]);
}
// Expert e of a 3-D tensor, as a 2-D view with its strides.
Tensor expert(const Tensor& t, int64_t e) {
  return t.as_strided({t.shape()[1], t.shape()[2]}, {t.strides()[1], t.strides()[2]},
                      t.storage_offset() + e * t.strides()[0]);
}
// f(e, r0, n) for every expert e with rows: n of them from row r0.
template <class F>
void for_each_expert(const std::vector<int64_t>& sizes, F&& f) {
  for (int64_t e = 0, r0 = 0; e < static_cast<int64_t>(sizes.size()); r0 += sizes[e++])
    if (sizes[e] > 0) f(e, r0, sizes[e]);
}
// Every expert's product f(e, r0, n) -> {c, a, b} as one grouped GEMM: c = alpha a b + beta c.
template <class F>
void expert_products(const std::vector<int64_t>& sizes, double alpha, double beta, F&& f) {
  std::vector<matrix::Product> products;
  for_each_expert(sizes, [&](int64_t e, int64_t r0, int64_t n) { products.push_back(f(e, r0, n)); });
  matrix::gemm_many(products, alpha, beta);
}

// dst [E, rows, cols] with expert e's block alpha a_e^T b_e (a_e, b_e: its rows of a and b), and
// zeros for an expert without rows: the weight-shaped gradients.
Tensor per_expert_products(const Tensor& dst, const Tensor& a, const Tensor& b, const std::vector<int64_t>& sizes,
                           double alpha) {
  zero_(dst);
  expert_products(sizes, alpha, 0.0, [&](int64_t e, int64_t r0, int64_t n) {
    return matrix::Product{expert(dst, e), transpose(rows_of(a, r0, n), 0, 1), rows_of(b, r0, n)};
  });
  return dst;
}

// The arguments against w's shape [E, N, K] (w itself checked by the caller).
void check_args(const char* op, const Tensor& x, const Shape& w_shape, const std::vector<int64_t>& sizes,
                const Tensor& bias, const Tensor& lora_A, const Tensor& lora_B) {
  check_floating(op, "x", x);
  check_same(op, {{"x", x}, {"bias", bias}, {"lora_A", lora_A}, {"lora_B", lora_B}});
  TG_CHECK(x.dim() == 2, op, "x must be 2-D [M, K] (rows grouped by expert), got ", x.shape());
  const int64_t E = w_shape[0], N = w_shape[1], K = w_shape[2];
  TG_CHECK(x.shape()[1] == K, op, "x has ", x.shape()[1], " features (shape ", x.shape(), "), w ", w_shape,
           " wants ", K);
  TG_CHECK(static_cast<int64_t>(sizes.size()) == E, op, "group_sizes has ", sizes.size(), " entries for ", E,
           " experts (w ", w_shape, ")");
  int64_t total = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    TG_CHECK(sizes[e] >= 0 && sizes[e] <= x.shape()[0], op, "group_sizes[", e, "] is ", sizes[e], ", wants 0 to ",
             x.shape()[0]);
    total += sizes[e];
  }
  TG_CHECK(total == x.shape()[0], op, "group_sizes sum to ", total, ", but x has ", x.shape()[0], " rows");
  if (bias.defined())
    TG_CHECK(bias.shape() == Shape({E, N}), op, "bias must be [", E, ", ", N, "], got ", bias.shape());
  TG_CHECK(lora_A.defined() == lora_B.defined(), op, "lora_A and lora_B come together, got only ",
           lora_A.defined() ? "lora_A" : "lora_B");
  if (!lora_A.defined()) return;
  TG_CHECK(lora_A.dim() == 3 && lora_A.shape()[0] == E && lora_A.shape()[2] == K, op, "lora_A must be [", E, ", r, ",
           K, "], got ", lora_A.shape());
  const int64_t r = lora_A.shape()[1];
  TG_CHECK(lora_B.shape() == Shape({E, N, r}), op, "lora_B must be [", E, ", ", N, ", ", r, "], got ", lora_B.shape());
}

// A 3-D operand as the GEMMs read it (detached): in place with a unit stride along one of its
// last two dims, else copied. Undefined stays undefined.
Tensor gemm_readable(const Tensor& t) {
  if (!t.defined()) return t;
  if (t.strides()[2] == 1 || t.strides()[1] == 1) return t.detach();
  NoGradGuard g;
  return contiguous(t.detach());
}

// The products with the experts' weights w_e [N, K], c_e = a_e op(w_e) + beta c_e (op: transposed
// or not): one grouped GEMM over the dense w, or for 4-bit experts one GEMM an expert, each weight
// dequantised into one expert-sized buffer reused expert after expert (the GEMM reading it comes
// before the next dequantisation in stream order).
class ExpertWeights {
 public:
  explicit ExpertWeights(const Tensor& dense) : dense_(dense) {}
  ExpertWeights(std::shared_ptr<const std::vector<QuantState4bit>> quantised, TensorOptions options)
      : quantised_(std::move(quantised)), options_(options) {}
  // f(e, r0, n) -> {c_e, a_e}.
  template <class F>
  void products(const std::vector<int64_t>& sizes, bool transposed, double beta, F&& f) {
    auto op = [&](const Tensor& w) { return transposed ? transpose(w, 0, 1) : w; };
    if (dense_.defined()) {
      expert_products(sizes, 1.0, beta, [&](int64_t e, int64_t r0, int64_t n) {
        auto [c, a] = f(e, r0, n);
        return matrix::Product{c, a, op(expert(dense_, e))};
      });
      return;
    }
    for_each_expert(sizes, [&](int64_t e, int64_t r0, int64_t n) {
      const QuantState4bit& q = (*quantised_)[static_cast<size_t>(e)];
      if (!buffer_.defined()) buffer_ = Tensor::empty(q.shape, {options_.dtype, options_.device});
      dequantize_4bit_(buffer_, q);
      auto [c, a] = f(e, r0, n);
      matrix::gemm(c, a, op(buffer_), 1.0, beta);
    });
  }

 private:
  Tensor dense_, buffer_;
  std::shared_ptr<const std::vector<QuantState4bit>> quantised_;
  TensorOptions options_;
};

struct GroupedMmBackward final : Node {
  enum { kX, kW, kA, kB, kT };
  const char* op = kOp;
  std::vector<int64_t> sizes;
  Shape w_shape, w_strides;
  std::shared_ptr<const std::vector<QuantState4bit>> quantised;  // 4-bit experts: dequantised again for dx
  int64_t rank = 0;
  double scaling = 1.0;
  TensorOptions options;
  const char* name() const override { return op; }

  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    const Tensor dy = matrix::rows(g[0]);
    const int64_t E = w_shape[0], N = w_shape[1], K = w_shape[2], M = dy.shape()[0];
    std::vector<Tensor> out(5);
    const Tensor A = rank > 0 && mask[0] ? unpack(kA) : Tensor();
    const Tensor B = rank > 0 && (mask[0] || mask[3]) ? unpack(kB) : Tensor();
    Tensor u;  // dy_e B_e, the gradient of x_e A_e^T without the scaling
    if (B.defined()) {
      u = Tensor::empty({M, rank}, options);
      expert_products(sizes, 1.0, 0.0, [&](int64_t e, int64_t r0, int64_t n) {
        return matrix::Product{rows_of(u, r0, n), rows_of(dy, r0, n), expert(B, e)};
      });
    }
    if (mask[0]) {  // dx_e = s u_e A_e + dy_e w_e
      trace(op, "dx");
      ExpertWeights w = quantised ? ExpertWeights(quantised, options) : ExpertWeights(unpack(kW));
      Tensor dx = Tensor::empty({M, K}, options);
      if (u.defined())
        expert_products(sizes, scaling, 0.0, [&](int64_t e, int64_t r0, int64_t n) {
          return matrix::Product{rows_of(dx, r0, n), rows_of(u, r0, n), expert(A, e)};
        });
      w.products(sizes, false, u.defined() ? 1.0 : 0.0, [&](int64_t, int64_t r0, int64_t n) {
        return std::pair{rows_of(dx, r0, n), rows_of(dy, r0, n)};
      });
      out[0] = dx;
    }
    const Tensor x = mask[1] || mask[3] ? unpack(kX) : Tensor();
    if (mask[1]) {  // dw_e = dy_e^T x_e, in w's layout
      trace(op, "dweight_gemm");
      out[1] = per_expert_products(empty_with_layout(w_shape, w_strides, options), dy, x, sizes, 1.0);
    }
    if (mask[2]) {  // db_e = the sum of dy_e's rows
      trace(op, "dbias_reduce");
      Tensor db = Tensor::empty({E, N}, options);
      zero_(db);
      for_each_expert(sizes, [&](int64_t e, int64_t r0, int64_t n) {
        copy_(slice(db, 0, e, e + 1), sum(rows_of(dy, r0, n), {0}, true));
      });
      out[2] = db;
    }
    if (mask[3]) {  // dA_e = s u_e^T x_e
      trace(op, "dA");
      out[3] = per_expert_products(Tensor::empty({E, rank, K}, options), u, x, sizes, scaling);
    }
    if (mask[4]) {  // dB_e = s dy_e^T t_e
      trace(op, "dB");
      out[4] = per_expert_products(Tensor::empty({E, N, rank}, options), dy, unpack(kT), sizes, scaling);
    }
    return out;
  }
};

// Both ops once their arguments are checked: w the dense weight and w_read it as the GEMMs read it
// (both undefined for 4-bit experts, which `quantised` holds), w_shape [E, N, K].
Tensor grouped(const char* op, const Tensor& x, const Tensor& w, const Tensor& w_read, const Shape& w_shape,
               std::shared_ptr<const std::vector<QuantState4bit>> quantised, const std::vector<int64_t>& group_sizes,
               const Tensor& bias, const Tensor& lora_A, const Tensor& lora_B, double scaling) {
  KernelTrace::record(op);
  ExpertWeights weights = quantised ? ExpertWeights(quantised, x.options()) : ExpertWeights(w_read);
  const int64_t N = w_shape[1], M = x.shape()[0];
  const int64_t rank = lora_A.defined() ? lora_A.shape()[1] : 0;
  Tensor x2, A, B, t;
  Tensor y = Tensor::empty({M, N}, x.options());
  {
    NoGradGuard no_grad;  // the op's node covers its internal views and copies
    x2 = matrix::rows(x), A = gemm_readable(lora_A), B = gemm_readable(lora_B);
    if (bias.defined())
      for_each_expert(group_sizes, [&](int64_t e, int64_t r0, int64_t n) {
        copy_(rows_of(y, r0, n), expand(slice(bias.detach(), 0, e, e + 1), {n, N}));
      });
    if (rank > 0) {  // the thin LoRA products first, the base GEMMs accumulating onto them
      t = Tensor::empty({M, rank}, x.options());  // x_e A_e^T, rows as x's
      expert_products(group_sizes, 1.0, 0.0, [&](int64_t e, int64_t r0, int64_t n) {
        return matrix::Product{rows_of(t, r0, n), rows_of(x2, r0, n), transpose(expert(A, e), 0, 1)};
      });
      expert_products(group_sizes, scaling, bias.defined() ? 1.0 : 0.0, [&](int64_t e, int64_t r0, int64_t n) {
        return matrix::Product{rows_of(y, r0, n), rows_of(t, r0, n), transpose(expert(B, e), 0, 1)};
      });
    }
    weights.products(group_sizes, true, bias.defined() || rank > 0 ? 1.0 : 0.0, [&](int64_t, int64_t r0, int64_t n) {
      return std::pair{rows_of(y, r0, n), rows_of(x2, r0, n)};
    });
  }
  if (auto node = record<GroupedMmBackward>(
          {{"x", x}, {"w", w}, {"bias", bias}, {"lora_A", lora_A}, {"lora_B", lora_B}}, {y})) {
    node->op = op;
    node->sizes = group_sizes;
    node->w_shape = w_shape;
    node->w_strides = w.defined() ? w.strides() : contiguous_strides(w_shape);
    node->quantised = std::move(quantised);
    node->rank = rank;
    node->scaling = scaling;
    node->options = x.options();
    const bool dx = x.requires_grad(), dw = w.defined() && w.requires_grad();
    const bool da = lora_A.defined() && lora_A.requires_grad(), db = lora_B.defined() && lora_B.requires_grad();
    node->saved = {SavedTensor(dw || da ? x2 : Tensor(), "x"), SavedTensor(dx ? w_read : Tensor(), "w"),
                   SavedTensor(dx ? A : Tensor(), "lora_A"), SavedTensor(dx || da ? B : Tensor(), "lora_B"),
                   SavedTensor(db ? t : Tensor(), "t")};
  }
  return y;
}

}  // namespace

Tensor grouped_mm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& group_sizes, const Tensor& bias,
                  const Tensor& lora_A, const Tensor& lora_B, double scaling) {
  check_floating(kOp, "w", w);
  check_same(kOp, {{"x", x}, {"w", w}});
  TG_CHECK(w.dim() == 3, kOp, "w must be 3-D [E, N, K], got ", w.shape());
  check_args(kOp, x, w.shape(), group_sizes, bias, lora_A, lora_B);
  Tensor w_read;
  {
    NoGradGuard no_grad;
    w_read = gemm_readable(w);
  }
  return grouped(kOp, x, w, w_read, w.shape(), nullptr, group_sizes, bias, lora_A, lora_B, scaling);
}

Tensor grouped_mm_4bit(const Tensor& x, const std::vector<QuantState4bit>& w, const std::vector<int64_t>& group_sizes,
                       const Tensor& bias, const Tensor& lora_A, const Tensor& lora_B, double scaling) {
  const char* op = "grouped_mm_4bit";
  TG_CHECK(!w.empty(), op, "wants a 4-bit weight per expert, got none");
  const Shape& expert_shape = w[0].shape;
  for (size_t e = 0; e < w.size(); ++e) {
    TG_CHECK(w[e].shape.size() == 2 && w[e].shape == expert_shape, op, "expert ", e, "'s weight is ", w[e].shape,
             ", wants 2-D and the shape of expert 0's, ", expert_shape);
    TG_CHECK(w[e].packed.defined() && w[e].device() == x.device(), op, "expert ", e, "'s weight is ",
             w[e].packed.defined() ? "on " + w[e].device().str() : std::string("missing"), ", x on ", x.device());
  }  // the rest of each state is checked where it is dequantised (dequantize_4bit_)
  const Shape w_shape = {static_cast<int64_t>(w.size()), expert_shape[0], expert_shape[1]};
  check_args(op, x, w_shape, group_sizes, bias, lora_A, lora_B);
  return grouped(op, x, Tensor(), Tensor(), w_shape, std::make_shared<const std::vector<QuantState4bit>>(w),
                 group_sizes, bias, lora_A, lora_B, scaling);
}

}  // namespace tg
