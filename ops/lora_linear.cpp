// LoRA as one op, peft's `result + lora_B(lora_A(dropout(x))) * scaling` with the dropout off
// (peft/lora.cpp composes the layer from ops while it is on); W [out, in], A [r, in], B [out, r]:
//   y  = x W^T + b + scaling * (x A^T) B^T
//   dx = dy W + scaling * (dy B) A,   dW = dy^T x,   db = the sum of dy's rows,
//   dA = scaling * (dy B)^T x,        dB = scaling * dy^T (x A^T).
// Backward computes only what its mask asks for and forward keeps only what that needs (x for dW
// or dA, W for dx, x A^T for dB): a frozen base weight costs no dW GEMM and keeps no x for it.
// linear_group is several such layers on one x as one op: one GEMM for all the base weights, one
// for all the LoRA-A products, each part's output a column block of one [..., sum out] buffer.
// A frozen base (FrozenWeight: FP8, NF4) takes W's place in x W^T and dy W, a product of its own.
#include "ops/lora_linear.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/detail/linear_parts.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

using linear_parts::column_block;
using linear_parts::Part;
using linear_parts::row_block;

constexpr size_t kMaxParts = 8;  // of a linear_group
// A group's weights not adjacent in memory are concatenated for its one GEMM up to this many
// bytes; above, each part's GEMM writes its own columns of y, since the copy would read and write
// every weight each call for no FLOP (dev/NOTES.md, the step at real size).
constexpr int64_t kMaxConcatenatedBytes = int64_t{8} << 20;

// A part's inputs to the node, after x: its weight, bias, lora_A and lora_B.
enum PartInput : size_t { kWeight, kBias, kLoraA, kLoraB, kInputsPerPart };
constexpr std::array<const char*, kInputsPerPart> kPartInputNames = {"weight", "bias", "lora_A", "lora_B"};

// linear_group's names number them by part: "weight[0]", "bias[0]", ...
const char* group_input_name(size_t part, size_t input) {
  static const auto names = [] {
    std::array<std::array<std::string, kInputsPerPart>, kMaxParts> numbered;
    for (size_t p = 0; p < kMaxParts; ++p)
      for (size_t k = 0; k < kInputsPerPart; ++k)
        numbered[p][k] = std::string(kPartInputNames[k]) + "[" + std::to_string(p) + "]";
    return numbered;
  }();
  return names[part][input].c_str();
}

void trace(const char* op, const char* what) {
  if (KernelTrace::active()) KernelTrace::record(std::string(op) + "." + what);
}

struct LoraLinearBackward final : Node {
  // saved: x, each part's W, each part's B in x's dtype, A_stacked in x's dtype, the LoRA hidden state
  enum { kX, kWeights };
  const char* op = "lora_linear";
  std::vector<Part> parts;
  std::vector<std::shared_ptr<const FrozenWeight>> frozen;  // each part's, when the bases are frozen
  Shape x_shape;
  TensorOptions y_options;  // of the outputs (x's)
  DType adapter_dtype = kFloat32;
  int64_t lora_rank = 0;  // the sum of the parts' ranks
  const char* name() const override { return op; }

  Tensor saved_weight(size_t part) const { return unpack(kWeights + part); }
  Tensor saved_lora_B(size_t part) const { return unpack(kWeights + parts.size() + part); }
  Tensor saved_lora_A_stacked() const { return unpack(kWeights + 2 * parts.size()); }
  Tensor saved_lora_hidden() const { return unpack(kWeights + 2 * parts.size() + 1); }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const GradMask& mask) override {
    const size_t count = parts.size();
    auto wants = [&](size_t part, PartInput input) { return bool(mask[1 + kInputsPerPart * part + input]); };
    auto output_of = [](size_t part, PartInput input) { return 1 + kInputsPerPart * part + input; };
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < x_shape.size(); ++d) rows *= x_shape[d];
    std::vector<Tensor> dy(count);
    for (size_t i = 0; i < count; ++i) {
      if (grads[i].defined()) {
        dy[i] = matrix::rows(grads[i]);
      } else {  // an unused output: its gradient is zero
        dy[i] = Tensor::empty({rows, parts[i].out}, y_options);
        zero_(dy[i]);
      }
    }
    std::vector<Tensor> out(1 + kInputsPerPart * count);
    bool any_dA = false, one_scaling = true;  // one scaling: the parts' LoRA products are one GEMM each
    for (size_t i = 0; i < count; ++i) {
      any_dA = any_dA || (parts[i].rank > 0 && wants(i, kLoraA));
      one_scaling = one_scaling && (parts[i].rank == 0 || parts[i].scaling == parts[0].scaling);
    }
    // [dy_i B_i]: the LoRA hidden state's gradient without the scaling, for dx and dA
    Tensor dy_B;
    if (lora_rank > 0 && (mask[0] || any_dA)) {
      dy_B = Tensor::empty({rows, lora_rank}, y_options);
      for (size_t i = 0; i < count; ++i)
        if (parts[i].rank > 0)
          matrix::gemm(column_block(dy_B, parts[i].lora_column, parts[i].rank), dy[i], saved_lora_B(i), 1.0, 0.0);
    }
    if (mask[0]) {  // dx = sum_i scaling_i (dy_i B_i) A_i + dy_i W_i, accumulated by the GEMMs
      trace(op, "dx");
      Tensor dx = Tensor::empty({rows, x_shape.back()}, y_options);
      double beta = 0.0;
      if (lora_rank > 0) {
        const Tensor lora_A_stacked = saved_lora_A_stacked();
        if (one_scaling) {
          matrix::gemm(dx, dy_B, lora_A_stacked, parts[0].scaling, 0.0);
          beta = 1.0;
        }
        for (size_t i = 0; i < count && !one_scaling; ++i) {
          if (parts[i].rank == 0) continue;
          matrix::gemm(dx, column_block(dy_B, parts[i].lora_column, parts[i].rank),
                       row_block(lora_A_stacked, parts[i].lora_column, parts[i].rank), parts[i].scaling, beta);
          beta = 1.0;
        }
      }
      for (size_t i = 0; i < count; ++i) {
        if (frozen.empty()) matrix::gemm(dx, dy[i], saved_weight(i), 1.0, beta);
        else frozen[i]->dx(dx, dy[i], beta);
        beta = 1.0;
      }
      out[0] = reshape(dx, x_shape);
    }
    bool any_dW = false;
    for (size_t i = 0; i < count; ++i) any_dW = any_dW || wants(i, kWeight);
    const Tensor x = any_dW || any_dA ? matrix::rows(unpack(kX)) : Tensor();
    if (any_dA) {  // dA_i = scaling_i (dy_i B_i)^T x: row blocks of one product when the scalings agree
      trace(op, "dA");
      Tensor dA = Tensor::empty({lora_rank, x.shape()[1]}, TensorOptions{adapter_dtype, x.device()});
      if (one_scaling) matrix::gemm(dA, transpose(dy_B, 0, 1), x, parts[0].scaling, 0.0);
      for (size_t i = 0; i < count; ++i) {
        if (parts[i].rank == 0 || !wants(i, kLoraA)) continue;
        Tensor block = row_block(dA, parts[i].lora_column, parts[i].rank);
        if (!one_scaling)
          matrix::gemm(block, transpose(column_block(dy_B, parts[i].lora_column, parts[i].rank), 0, 1), x,
                       parts[i].scaling, 0.0);
        out[output_of(i, kLoraA)] = block;
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (wants(i, kWeight)) {  // dW_i = dy_i^T x
        trace(op, "dweight_gemm");
        Tensor dW = Tensor::empty({parts[i].out, x.shape()[1]}, y_options);
        matrix::gemm(dW, transpose(dy[i], 0, 1), x, 1.0, 0.0);
        out[output_of(i, kWeight)] = dW;
      }
      if (wants(i, kBias)) {  // db_i = the sum of dy_i's rows
        trace(op, "dbias_reduce");
        out[output_of(i, kBias)] = sum(dy[i], {0});
      }
      if (parts[i].rank > 0 && wants(i, kLoraB)) {  // dB_i = scaling_i dy_i^T (x A_i^T)
        trace(op, "dB");
        Tensor dB = Tensor::empty({parts[i].out, parts[i].rank}, TensorOptions{adapter_dtype, y_options.device});
        matrix::gemm(dB, transpose(dy[i], 0, 1),
                     column_block(saved_lora_hidden(), parts[i].lora_column, parts[i].rank), parts[i].scaling, 0.0);
        out[output_of(i, kLoraB)] = dB;
      }
    }
    return out;
  }
};

// lora_linear's and linear_group's forward; `op` names the node, its traces and its errors.
std::vector<Tensor> forward(const char* op, const Tensor& x, const std::vector<LinearSpec>& specs) {
  const linear_parts::Plan plan = linear_parts::plan(op, x, specs);
  const std::vector<Part>& parts = plan.parts;
  KernelTrace::record(op);
  Tensor y, lora_A_stacked, lora_hidden;  // lora_hidden = x A_stacked^T
  std::vector<Tensor> lora_B_rounded(specs.size());
  {
    NoGradGuard no_grad;  // the internal views and copies: the op's node covers them
    const Tensor x_rows = matrix::rows(x);
    y = Tensor::empty({x_rows.shape()[0], plan.out}, x.options());
    Tensor weights = plan.frozen           ? Tensor()
                     : specs.size() == 1 ? specs[0].weight.detach()
                                         : linear_parts::adjacent_weights(specs, plan.out);
    const bool gemm_a_part = !plan.frozen && !weights.defined() &&
                             plan.out * x.shape().back() * specs[0].weight.element_size() > kMaxConcatenatedBytes;
    // Each part's columns start as its bias and / or its LoRA-B product (the thin GEMM first, the
    // base GEMM accumulating onto it: no separate add); bias-free plain ones as zeros when one
    // base GEMM over every part accumulates. Frozen bases go first instead (onto the bias), their
    // products being the ones that may not accumulate cheaply (FP8's write a buffer of their own).
    const bool accumulate = plan.any_bias || plan.rank > 0;
    std::any x_derived;  // the frozen bases' own form of x, shared by the parts
    for (size_t i = 0; i < specs.size(); ++i) {
      Tensor y_part = column_block(y, parts[i].column, parts[i].out);
      if (specs[i].bias.defined()) copy_(y_part, expand(specs[i].bias.detach(), y_part.shape()));
      else if (!specs[i].lora_A.defined() && accumulate && !gemm_a_part && !plan.frozen) zero_(y_part);
      if (plan.frozen) specs[i].frozen->forward(y_part, x_rows, specs[i].bias.defined() ? 1.0 : 0.0, x_derived);
    }
    if (plan.rank > 0) {
      // The products run in x's dtype, as autocast's (a bf16 layer's float32 adapters take tensor
      // cores and x is never widened); their gradients come back in the adapters' dtype. Every A
      // then every B is rounded into one buffer by one launch, so the A's rows are A_stacked; in
      // x's dtype already, A_stacked is a copy and the B's are themselves.
      std::vector<Tensor> adapters;
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].rank > 0) adapters.push_back(specs[i].lora_A.detach());
      const size_t adapter_count = adapters.size();
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].rank > 0) adapters.push_back(specs[i].lora_B.detach());
      const int64_t in = x.shape().back();
      if (plan.adapter_dtype != x.dtype()) {
        const std::vector<Tensor> rounded = to_packed(adapters, x.dtype());
        lora_A_stacked = rounded[0].as_strided({plan.rank, in}, {in, 1}, rounded[0].storage_offset());
        for (size_t i = 0, k = adapter_count; i < specs.size(); ++i)
          if (parts[i].rank > 0) lora_B_rounded[i] = rounded[k++];
      } else {
        lora_A_stacked =
            adapter_count == 1 ? adapters[0] : cat({adapters.begin(), adapters.begin() + adapter_count}, 0);
        for (size_t i = 0, k = adapter_count; i < specs.size(); ++i)
          if (parts[i].rank > 0) lora_B_rounded[i] = adapters[k++];
      }
      lora_hidden = Tensor::empty({x_rows.shape()[0], plan.rank}, x.options());
      matrix::gemm(lora_hidden, x_rows, transpose(lora_A_stacked, 0, 1), 1.0, 0.0);
      for (size_t i = 0; i < specs.size(); ++i)
        if (parts[i].rank > 0)
          matrix::gemm(column_block(y, parts[i].column, parts[i].out),
                       column_block(lora_hidden, parts[i].lora_column, parts[i].rank),
                       transpose(lora_B_rounded[i], 0, 1), parts[i].scaling,
                       specs[i].bias.defined() || plan.frozen ? 1.0 : 0.0);
    }
    if (plan.frozen) {
      trace(op, "frozen_base");
    } else if (gemm_a_part) {
      trace(op, "gemm_a_part");
      for (size_t i = 0; i < specs.size(); ++i) {
        const bool onto = specs[i].bias.defined() || specs[i].lora_A.defined();
        matrix::gemm(column_block(y, parts[i].column, parts[i].out), x_rows,
                     transpose(specs[i].weight.detach(), 0, 1), 1.0, onto ? 1.0 : 0.0);
      }
    } else {
      if (!weights.defined()) {
        trace(op, "weights_concatenated");
        std::vector<Tensor> each;
        for (const LinearSpec& spec : specs) each.push_back(spec.weight.detach());
        weights = cat(each, 0);
      }
      matrix::gemm(y, x_rows, transpose(weights, 0, 1), 1.0, accumulate ? 1.0 : 0.0);
    }
  }

  // The outputs: column blocks of y under x's leading dims.
  Shape lead(x.shape().begin(), x.shape().end() - 1), strides(lead.size() + 1, 1);
  int64_t stride = plan.out;
  for (size_t d = lead.size(); d-- > 0;) strides[d] = stride, stride *= lead[d];
  std::vector<Tensor> outputs;
  for (const Part& part : parts) {
    Shape shape = lead;
    shape.push_back(part.out);
    outputs.push_back(y.as_strided(shape, strides, part.column));
  }

  const bool group = op == std::string_view("linear_group");
  std::vector<NamedInput> inputs = {{"x", x}};
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::array<const Tensor*, kInputsPerPart> tensors = {&specs[i].weight, &specs[i].bias, &specs[i].lora_A,
                                                               &specs[i].lora_B};
    for (size_t k = 0; k < kInputsPerPart; ++k)
      inputs.push_back({group ? group_input_name(i, k) : kPartInputNames[k], *tensors[k]});
  }
  if (auto node = record<LoraLinearBackward>(inputs, outputs)) {
    node->op = op;
    node->parts = parts;
    if (plan.frozen)
      for (const LinearSpec& spec : specs) node->frozen.push_back(spec.frozen);
    node->x_shape = x.shape();
    node->y_options = x.options();
    node->adapter_dtype = plan.adapter_dtype;
    node->lora_rank = plan.rank;
    const bool dx = x.requires_grad();
    bool dW = false, dA = false, dB = false;
    for (const LinearSpec& spec : specs) {
      dW = dW || (spec.weight.defined() && spec.weight.requires_grad());
      dA = dA || (spec.lora_A.defined() && spec.lora_A.requires_grad());
      dB = dB || (spec.lora_B.defined() && spec.lora_B.requires_grad());
    }
    node->saved.push_back(SavedTensor(dW || dA ? x : Tensor(), "x"));
    for (const LinearSpec& spec : specs) node->saved.push_back(SavedTensor(dx ? spec.weight : Tensor(), "weight"));
    for (size_t i = 0; i < specs.size(); ++i)
      node->saved.push_back(SavedTensor(dx || dA ? lora_B_rounded[i] : Tensor(), "lora_B"));
    node->saved.push_back(SavedTensor(dx && plan.rank > 0 ? lora_A_stacked : Tensor(), "lora_A"));
    node->saved.push_back(SavedTensor(dB ? lora_hidden : Tensor(), "t"));
  }
  return outputs;
}

}  // namespace

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling) {
  TG_CHECK(lora_A.defined() && lora_B.defined(), "lora_linear", "lora_A and lora_B must be defined");
  return forward("lora_linear", x, {{weight, bias, lora_A, lora_B, scaling}})[0];
}

std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& specs) {
  return linear_group(x, specs, "linear_group");
}

std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& specs, const char* op) {
  TG_CHECK(!specs.empty() && specs.size() <= kMaxParts, op, "wants 1 to ", kMaxParts, " layers, got ", specs.size());
  return forward(op, x, specs);
}

}  // namespace tg
