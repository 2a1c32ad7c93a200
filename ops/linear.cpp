#include "ops/linear.h"

#include <array>
#include <string>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr size_t kMaxParts = 8;  // of a linear_group
// A group's base weights not adjacent in memory are concatenated for one GEMM up to this many
// bytes; above it each part's GEMM writes its columns of y, as concatenating would read and write
// every weight each call for no FLOP (llama3-8b's gate / up: 224 MiB a layer, 4.2 ms of a 245 ms
// step on an H200).
constexpr int64_t kMaxCatBytes = int64_t{8} << 20;

// The node's input names: x, then weight / bias (/ lora_A / lora_B) of each part: plain for linear
// and lora_linear, numbered for linear_group.
constexpr std::array<const char*, 4> kName = {"weight", "bias", "lora_A", "lora_B"};
#define TG_PART_NAMES(i) {"weight[" #i "]", "bias[" #i "]", "lora_A[" #i "]", "lora_B[" #i "]"}
constexpr std::array<std::array<const char*, 4>, kMaxParts> kNames = {
    {TG_PART_NAMES(0), TG_PART_NAMES(1), TG_PART_NAMES(2), TG_PART_NAMES(3), TG_PART_NAMES(4), TG_PART_NAMES(5),
     TG_PART_NAMES(6), TG_PART_NAMES(7)}};
#undef TG_PART_NAMES

void trace(const char* op, const char* what) {
  if (KernelTrace::active()) KernelTrace::record(std::string(op) + "." + what);
}

// One layer's arguments: linear's, or lora_linear's when lora_A / lora_B are defined.
void check_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                const Tensor& lora_B) {
  check_floating(op, "x", x);
  check_floating(op, "weight", weight);
  check_same(op, {{"x", x}, {"weight", weight}, {"bias", bias}});
  TG_CHECK(weight.dim() == 2, op, "weight must be 2-D [out, in], got ", weight.shape());
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  TG_CHECK(x.dim() >= 1 && x.shape().back() == in, op, "x has ", x.dim() ? x.shape().back() : 0,
           " features (shape ", x.shape(), "), weight ", weight.shape(), " wants ", in);
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out, op, "bias must be [", out, "], got ", bias.shape());
  if (!lora_A.defined() && !lora_B.defined()) return;
  check_floating(op, "lora_A", lora_A);
  check_floating(op, "lora_B", lora_B);
  TG_CHECK(lora_A.device() == x.device() && lora_B.device() == x.device(), op, "lora_A and lora_B must be on ",
           x.device(), " with x, got ", lora_A.device(), " and ", lora_B.device());
  TG_CHECK(lora_A.dim() == 2 && lora_A.shape()[1] == in, op, "lora_A must be [r, ", in, "], got ", lora_A.shape());
  const int64_t r = lora_A.shape()[0];
  TG_CHECK(lora_B.dim() == 2 && lora_B.shape() == Shape({out, r}), op, "lora_B must be [", out, ", ", r, "], got ",
           lora_B.shape());
  TG_CHECK(lora_A.dtype() == lora_B.dtype(), op, "lora_A and lora_B differ in dtype: ", lora_A.dtype(), " and ",
           lora_B.dtype());
  TG_CHECK(lora_A.dtype() == x.dtype() || (lora_A.dtype() == kFloat32 && x.dtype() == kBFloat16), op,
           "adapters of dtype ", lora_A.dtype(), " on a ", x.dtype(), " layer (want the layer's dtype, or float32 "
           "for bfloat16)");
}

// Column block [c0, c0 + cols) of a row-major [rows, ld] matrix, as a 2-D view.
Tensor columns(const Tensor& m, int64_t c0, int64_t cols) {
  return m.as_strided({m.shape()[0], cols}, {m.strides()[0], 1}, m.storage_offset() + c0);
}
// Row block [r0, r0 + rows) of a contiguous 2-D matrix (itself contiguous).
Tensor row_block(const Tensor& m, int64_t r0, int64_t rows) {
  return m.as_strided({rows, m.shape()[1]}, {m.shape()[1], 1}, m.storage_offset() + r0 * m.shape()[1]);
}

// W_0, W_1, ... as one [sum out, in] matrix when they are consecutive row blocks of one
// allocation (nn::place_weights_adjacent), else undefined.
Tensor adjacent_weights(const std::vector<LinearSpec>& specs, int64_t total) {
  const Tensor& w0 = specs[0].weight;
  int64_t next = w0.storage_offset();
  for (const LinearSpec& s : specs) {
    if (!s.weight.is_contiguous() || !s.weight.shares_storage_with(w0) || s.weight.storage_offset() != next) return {};
    next += s.weight.numel();
  }
  return w0.detach().as_strided({total, w0.shape()[1]}, {w0.shape()[1], 1}, w0.storage_offset());
}

struct Part {
  int64_t out = 0, col = 0;  // its columns of y: [col, col + out)
  int64_t r = 0, lcol = 0;   // LoRA rank and its columns of t = x A_cat^T (r 0: plain)
  double scaling = 1.0;
};

struct LinearBackward final : Node {
  enum { kX, kWeights };  // saved: x, each W, each rounded B, the rounded A_cat, t (see forward)
  const char* op = "linear";
  size_t per_part = 4;  // the node's inputs of each part: weight, bias (, lora_A, lora_B)
  std::vector<Part> parts;
  Shape x_shape;
  TensorOptions y_options;  // of the outputs (x's)
  DType adapter_dtype = kFloat32;
  int64_t lora_rank = 0;  // sum of the parts' r
  const char* name() const override { return op; }

  Tensor saved_weight(size_t i) const { return unpack(kWeights + i); }
  Tensor saved_b(size_t i) const { return unpack(kWeights + parts.size() + i); }
  Tensor saved_a_cat() const { return unpack(kWeights + 2 * parts.size()); }
  Tensor saved_t() const { return unpack(kWeights + 2 * parts.size() + 1); }

  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    const size_t P = parts.size();
    // k: 0 W, 1 b, 2 A, 3 B
    auto wants = [&](size_t i, size_t k) { return k < per_part && bool(mask[1 + per_part * i + k]); };
    std::vector<Tensor> dy(P);
    int64_t n = 1;
    for (size_t d = 0; d + 1 < x_shape.size(); ++d) n *= x_shape[d];
    for (size_t i = 0; i < P; ++i) {
      if (g[i].defined()) {
        dy[i] = matrix::rows(g[i]);
      } else {  // an unused output: its gradient is zero
        dy[i] = Tensor::empty({n, parts[i].out}, y_options);
        zero_(dy[i]);
      }
    }
    const TensorOptions opts = y_options;
    std::vector<Tensor> out(1 + per_part * P);
    bool any_da = false, one_scaling = true;  // one scaling: the parts' LoRA products are one GEMM each
    for (size_t i = 0; i < P; ++i) {
      any_da = any_da || (parts[i].r > 0 && wants(i, 2));
      one_scaling = one_scaling && (parts[i].r == 0 || parts[i].scaling == parts[0].scaling);
    }
    // u = [dy_i B_i] (the gradient of t without the scaling) when dx or some dA wants it
    Tensor u;
    if (lora_rank > 0 && (mask[0] || any_da)) {
      u = Tensor::empty({n, lora_rank}, opts);
      for (size_t i = 0; i < P; ++i)
        if (parts[i].r > 0) matrix::gemm(columns(u, parts[i].lcol, parts[i].r), dy[i], saved_b(i), 1.0, 0.0);
    }
    if (mask[0]) {  // dx = sum_i scaling_i u_i A_i + dy_i W_i, accumulated by the GEMMs
      trace(op, "dx");
      Tensor dx = Tensor::empty({n, x_shape.back()}, opts);
      double beta = 0.0;
      if (lora_rank > 0) {
        const Tensor a_cat = saved_a_cat();
        if (one_scaling) {
          matrix::gemm(dx, u, a_cat, parts[0].scaling, 0.0);
          beta = 1.0;
        }
        for (size_t i = 0; i < P && !one_scaling; ++i) {
          if (parts[i].r == 0) continue;
          matrix::gemm(dx, columns(u, parts[i].lcol, parts[i].r), row_block(a_cat, parts[i].lcol, parts[i].r),
                       parts[i].scaling, beta);
          beta = 1.0;
        }
      }
      for (size_t i = 0; i < P; ++i) {
        matrix::gemm(dx, dy[i], saved_weight(i), 1.0, beta);
        beta = 1.0;
      }
      out[0] = reshape(dx, x_shape);
    }
    bool any_dw = false;
    for (size_t i = 0; i < P; ++i) any_dw = any_dw || wants(i, 0);
    const Tensor x = any_dw || any_da ? matrix::rows(unpack(kX)) : Tensor();
    if (any_da) {  // dA_i = scaling_i u_i^T x: row blocks of one [sum r, in] product when the scalings agree
      trace(op, "dA");
      Tensor da = Tensor::empty({lora_rank, x.shape()[1]}, TensorOptions{adapter_dtype, x.device()});
      if (one_scaling) matrix::gemm(da, transpose(u, 0, 1), x, parts[0].scaling, 0.0);
      for (size_t i = 0; i < P; ++i) {
        if (parts[i].r == 0 || !wants(i, 2)) continue;
        Tensor block = row_block(da, parts[i].lcol, parts[i].r);
        if (!one_scaling)
          matrix::gemm(block, transpose(columns(u, parts[i].lcol, parts[i].r), 0, 1), x, parts[i].scaling, 0.0);
        out[1 + per_part * i + 2] = block;
      }
    }
    for (size_t i = 0; i < P; ++i) {
      if (wants(i, 0)) {  // dW_i = dy_i^T x
        trace(op, "dweight_gemm");
        Tensor dw = Tensor::empty({parts[i].out, x.shape()[1]}, opts);
        matrix::gemm(dw, transpose(dy[i], 0, 1), x, 1.0, 0.0);
        out[1 + per_part * i] = dw;
      }
      if (wants(i, 1)) {  // db_i = the sum of dy_i's rows
        trace(op, "dbias_reduce");
        out[1 + per_part * i + 1] = sum(dy[i], {0});
      }
      if (parts[i].r > 0 && wants(i, 3)) {  // dB_i = scaling_i dy_i^T t_i
        trace(op, "dB");
        Tensor db = Tensor::empty({parts[i].out, parts[i].r}, TensorOptions{adapter_dtype, opts.device});
        matrix::gemm(db, transpose(dy[i], 0, 1), columns(saved_t(), parts[i].lcol, parts[i].r), parts[i].scaling,
                     0.0);
        out[1 + per_part * i + 3] = db;
      }
    }
    return out;
  }
};

// The family's forward: `op` names the node, its traces and its errors; a plain linear's node has
// two inputs a part (weight, bias), the others four.
std::vector<Tensor> forward(const char* op, const Tensor& x, const std::vector<LinearSpec>& specs) {
  const bool plain = op == std::string_view("linear"), group = op == std::string_view("linear_group");
  std::vector<Part> parts(specs.size());
  int64_t total = 0, rank = 0;
  DType adapter_dtype = kFloat32;
  bool any_bias = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    const LinearSpec& s = specs[i];
    check_args(op, x, s.weight, s.bias, s.lora_A, s.lora_B);
    TG_CHECK(s.weight.shape()[1] == specs[0].weight.shape()[1], op, "layer ", i, "'s weight ", s.weight.shape(),
             " takes another input width than layer 0's ", specs[0].weight.shape());
    Part& p = parts[i];
    p.out = s.weight.shape()[0], p.col = total, p.scaling = s.scaling;
    total += p.out;
    if (s.lora_A.defined()) {
      TG_CHECK(rank == 0 || s.lora_A.dtype() == adapter_dtype, op, "layer ", i, "'s adapters are ",
               s.lora_A.dtype(), ", an earlier layer's ", adapter_dtype, " (one adapter dtype for the group)");
      adapter_dtype = s.lora_A.dtype();
      p.r = s.lora_A.shape()[0], p.lcol = rank;
      rank += p.r;
    }
    any_bias = any_bias || s.bias.defined();
  }
  KernelTrace::record(op);
  Tensor y, a_cat, t;
  std::vector<Tensor> b_rounded(specs.size());
  {
    NoGradGuard no_grad;  // the internal views and copies: the op's node covers them
    const Tensor x2 = matrix::rows(x);
    y = Tensor::empty({x2.shape()[0], total}, x.options());
    Tensor w_cat = specs.size() == 1 ? specs[0].weight.detach() : adjacent_weights(specs, total);  // [sum out, in]
    const bool split =
        !w_cat.defined() && total * x.shape().back() * specs[0].weight.element_size() > kMaxCatBytes;
    // Each part's columns start as its bias and / or its LoRA-B product (the thin GEMM first, the
    // base GEMM accumulating onto it, as lora_linear); bias-free plain ones as zeros when one
    // base GEMM over every part accumulates.
    const bool accumulate = any_bias || rank > 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      Tensor yi = columns(y, parts[i].col, parts[i].out);
      if (specs[i].bias.defined()) copy_(yi, expand(specs[i].bias.detach(), yi.shape()));
      else if (!specs[i].lora_A.defined() && accumulate && !split) zero_(yi);
    }
    if (rank > 0) {
      // The adapters in x's dtype: every A then every B rounded into one buffer by one launch, so
      // the A's rows are A_cat; in x's dtype already, A_cat is a copy and the B's are themselves.
      std::vector<Tensor> adapters;
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].r > 0) adapters.push_back(specs[i].lora_A.detach());
      const size_t loras = adapters.size();
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].r > 0) adapters.push_back(specs[i].lora_B.detach());
      if (adapter_dtype != x.dtype()) {
        const std::vector<Tensor> rounded = to_packed(adapters, x.dtype());
        a_cat = rounded[0].as_strided({rank, x.shape().back()}, {x.shape().back(), 1}, rounded[0].storage_offset());
        for (size_t i = 0, k = loras; i < specs.size(); ++i)
          if (parts[i].r > 0) b_rounded[i] = rounded[k++];
      } else {
        a_cat = loras == 1 ? adapters[0] : cat({adapters.begin(), adapters.begin() + loras}, 0);
        for (size_t i = 0, k = loras; i < specs.size(); ++i)
          if (parts[i].r > 0) b_rounded[i] = adapters[k++];
      }
      t = Tensor::empty({x2.shape()[0], rank}, x.options());        // x A_cat^T
      matrix::gemm(t, x2, transpose(a_cat, 0, 1), 1.0, 0.0);
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].r > 0)
          matrix::gemm(columns(y, parts[i].col, parts[i].out), columns(t, parts[i].lcol, parts[i].r),
                       transpose(b_rounded[i], 0, 1), parts[i].scaling, specs[i].bias.defined() ? 1.0 : 0.0);
    }
    if (split) {
      trace(op, "gemm_a_part");
      for (size_t i = 0; i < specs.size(); ++i) {
        const bool onto = specs[i].bias.defined() || specs[i].lora_A.defined();
        matrix::gemm(columns(y, parts[i].col, parts[i].out), x2, transpose(specs[i].weight.detach(), 0, 1), 1.0,
                     onto ? 1.0 : 0.0);
      }
    } else {
      if (!w_cat.defined()) {
        trace(op, "weights_concatenated");
        std::vector<Tensor> weights;
        for (const LinearSpec& s : specs) weights.push_back(s.weight.detach());
        w_cat = cat(weights, 0);
      }
      matrix::gemm(y, x2, transpose(w_cat, 0, 1), 1.0, accumulate ? 1.0 : 0.0);
    }
  }

  // The outputs: column blocks of y under x's leading dims.
  Shape lead(x.shape().begin(), x.shape().end() - 1), strides(lead.size() + 1, 1);
  int64_t stride = total;
  for (size_t d = lead.size(); d-- > 0;) strides[d] = stride, stride *= lead[d];
  std::vector<Tensor> outs;
  for (const Part& p : parts) {
    Shape shape = lead;
    shape.push_back(p.out);
    outs.push_back(y.as_strided(shape, strides, p.col));
  }

  const size_t per_part = plain ? 2 : 4;
  std::vector<NamedInput> inputs = {{"x", x}};
  for (size_t i = 0; i < specs.size(); ++i) {
    const Tensor* part[4] = {&specs[i].weight, &specs[i].bias, &specs[i].lora_A, &specs[i].lora_B};
    for (size_t k = 0; k < per_part; ++k) inputs.push_back({group ? kNames[i][k] : kName[k], *part[k]});
  }
  if (auto node = record<LinearBackward>(inputs, outs)) {
    node->op = op;
    node->per_part = per_part;
    node->parts = parts;
    node->x_shape = x.shape();
    node->y_options = x.options();
    node->adapter_dtype = adapter_dtype;
    node->lora_rank = rank;
    const bool dx = x.requires_grad();
    bool dw = false, da = false, dbb = false;
    for (const LinearSpec& s : specs) {
      dw = dw || s.weight.requires_grad();
      da = da || (s.lora_A.defined() && s.lora_A.requires_grad());
      dbb = dbb || (s.lora_B.defined() && s.lora_B.requires_grad());
    }
    node->saved.push_back(SavedTensor(dw || da ? x : Tensor(), "x"));
    for (const LinearSpec& s : specs) node->saved.push_back(SavedTensor(dx ? s.weight : Tensor(), "weight"));
    for (size_t i = 0; i < specs.size(); ++i)
      node->saved.push_back(SavedTensor(dx || da ? b_rounded[i] : Tensor(), "lora_B"));
    node->saved.push_back(SavedTensor(dx && rank > 0 ? a_cat : Tensor(), "lora_A"));
    node->saved.push_back(SavedTensor(dbb ? t : Tensor(), "t"));
  }
  return outs;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return forward("linear", x, {{weight, bias, Tensor(), Tensor()}})[0];
}

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling) {
  TG_CHECK(lora_A.defined() && lora_B.defined(), "lora_linear", "lora_A and lora_B must be defined");
  return forward("lora_linear", x, {{weight, bias, lora_A, lora_B, scaling}})[0];
}

std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& specs) {
  TG_CHECK(!specs.empty() && specs.size() <= kMaxParts, "linear_group", "wants 1 to ", kMaxParts, " layers, got ",
           specs.size());
  return forward("linear_group", x, specs);
}

}  // namespace tg
