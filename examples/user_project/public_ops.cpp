// Every op of the README's API table, called through <tapegrad.h> alone from a project built
// against the installed package, each checked against a composition of others or values worked
// by hand (float64 on the CPU). Prints one line and exits 1 when any check fails.
#include <cmath>
#include <cstdio>
#include <string>

#include "tapegrad.h"
using namespace tg;

namespace {

int checks = 0, failures = 0;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = to(a, kFloat64).to_vector<double>(), vb = to(b, kFloat64).to_vector<double>();
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::fmax(m, std::fabs(va[i] - vb[i]));
  return m;
}

void check(const char* what, const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ++checks;
  const double d = max_abs_diff(got, want);
  if (!(d <= tol)) {
    ++failures;
    std::printf("%s: differs by %g (tolerance %g)\n", what, d, tol);
  }
}

Tensor values(std::vector<double> v, Shape shape) { return from_vector(v, shape); }

}  // namespace

int main() {
  Generator gen(0);
  const TensorOptions f64{.dtype = kFloat64};
  const Tensor x = randn({2, 3, 4}, gen, f64), w = randn({5, 4}, gen, f64), b = randn({5}, gen, f64);

  // matmul, linear, lora_linear, the arithmetic and the shape ops
  const Tensor wt = transpose(w, 0, 1);
  check("linear", linear(x, w, b), matmul(x, wt) + b);
  const Tensor A = randn({2, 4}, gen, f64), B = randn({5, 2}, gen, f64);
  check("lora_linear", lora_linear(x, w, b, A, B, 0.5), linear(x, w, b) + 0.5 * matmul(matmul(x, transpose(A, 0, 1)), transpose(B, 0, 1)));
  check("matmul", matmul(values({1, 2, 3, 4}, {2, 2}), values({5, 6, 7, 8}, {2, 2})), values({19, 22, 43, 50}, {2, 2}));
  const Tensor p = values({1, 2, 3, 4}, {2, 2}), q = values({2, 4, 8, 16}, {2, 2});
  check("+ - * /", (p + q) * (p - q) / q, values({-1.5, -3, -6.875, -15}, {2, 2}));
  check("exp log", log(exp(p)), p);
  check("sqrt rsqrt", sqrt(p) * rsqrt(p), ones_like(p));
  check("tanh sigmoid", 2.0 * sigmoid(2.0 * p) - 1.0, tanh(p), 1e-15);
  check("relu", relu(values({-1, 2}, {2})), values({0, 2}, {2}));
  check("silu", silu(p), p * sigmoid(p));
  check("gelu", gelu(values({0}, {1})), values({0}, {1}));
  check("gelu tanh", gelu(p, "tanh"), 0.5 * p * (1.0 + tanh(std::sqrt(2 / M_PI) * (p + 0.044715 * pow(p, 3.0)))));
  check("silu_mul", silu_mul(p, q), silu(p) * q);
  check("sum mean", sum(x, {2}) / 4.0, mean(x, {2}));
  check("max argmax", max(p, 1), values({2, 4}, {2}));
  check("argmax", to(argmax(q, 0), kFloat64), values({1, 1}, {2}));
  check("reshape view", reshape(view(p, {4}), {2, 2}), p);
  check("transpose permute", permute(x, {0, 2, 1}), transpose(x, 1, 2));
  check("slice expand", expand(slice(p, 0, 0, 1), {2, 2}), values({1, 2, 1, 2}, {2, 2}));
  const auto halves = split(x, 2, 2);
  check("cat split contiguous", contiguous(cat(halves, 2)), x);

  // softmax, losses, embedding, dropout, masked_fill, index_copy_, casts
  check("softmax", softmax(x, -1), exp(x) / sum(exp(x), {-1}, true));
  check("log_softmax", log_softmax(x, -1), log(softmax(x, -1)), 1e-14);
  const Tensor targets = from_vector(std::vector<int64_t>{0, 4, 2, 1, 3, 0}, {6});
  const Tensor x2 = reshape(x, {6, 4}), logits = linear(x2, w);
  const Tensor one_hot = values({1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}, {6, 5});
  check("cross_entropy", cross_entropy(logits, targets), -sum(log_softmax(logits, -1) * one_hot) / 6.0, 1e-14);
  check("linear_cross_entropy", linear_cross_entropy(x2, w, targets), cross_entropy(logits, targets), 1e-14);
  const Tensor ids = from_vector(std::vector<int64_t>{4, 0}, {2});
  check("embedding", embedding(w, ids), cat({slice(w, 0, 4, 5), slice(w, 0, 0, 1)}, 0));
  check("dropout", dropout(x, 0.5, /*training=*/false), x);
  const Tensor mask = from_vector(std::vector<bool>{true, false, false, true}, {2, 2});
  check("masked_fill", masked_fill(p, mask, 0.0), values({0, 2, 3, 0}, {2, 2}));
  Tensor dst = zeros({3, 2}, f64);
  index_copy_(dst, 0, from_vector(std::vector<int64_t>{2, 0}, {2}), p);
  check("index_copy_", dst, values({3, 4, 0, 0, 1, 2}, {3, 2}));
  check("to(dtype)", to(to(p, kBFloat16), kFloat64), p);
  check("to(device)", to(p, default_device()), p);

  // a mixture-of-experts layer's ops: top-k, grouping by expert, one product per expert
  const auto [top, chosen] = topk(values({1, 5, 3, 4, 2, 0}, {2, 3}), 2);
  check("topk", top, values({5, 3, 4, 2}, {2, 2}));
  const ExpertOrder order = sort_by_expert(chosen, 3);
  check("sort_by_expert", to(order.token_of_row, kFloat64), values({1, 0, 1, 0}, {4}));
  const Tensor experts = randn({2, 5, 4}, gen, f64), rows = reshape(x, {6, 4});
  check("grouped_mm", grouped_mm(rows, experts, {2, 4}),
        cat({linear(slice(rows, 0, 0, 2), squeeze(slice(experts, 0, 0, 1), 0)),
             linear(slice(rows, 0, 2, 6), squeeze(slice(experts, 0, 1, 2), 0))}, 0), 1e-14);

  // norms, attention, rotary
  const Tensor g = randn({4}, gen, f64), beta = randn({4}, gen, f64);
  check("rms_norm", rms_norm(x, g, 1e-6), x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * g, 1e-14);
  const Tensor r = randn({2, 3, 4}, gen, f64);
  const auto [normed, sum_xr] = fused_add_rms_norm(x, r, g, 1e-6);
  check("fused_add_rms_norm", normed, rms_norm(x + r, g, 1e-6), 1e-14);
  check("fused_add_rms_norm residual", sum_xr, x + r);
  const Tensor centred = x - mean(x, {-1}, true);
  check("layer_norm", layer_norm(x, g, beta), centred * rsqrt(mean(centred * centred, {-1}, true) + 1e-5) * g + beta, 1e-14);
  const Tensor qh = randn({1, 2, 3, 4}, gen, f64), kh = randn({1, 2, 3, 4}, gen, f64), vh = randn({1, 2, 3, 4}, gen, f64);
  const Tensor scores = matmul(qh, transpose(kh, -2, -1)) / 2.0;
  check("scaled_dot_product_attention", scaled_dot_product_attention(qh, kh, vh, /*is_causal=*/true),
        matmul(softmax(masked_fill(scores, causal_mask(3, 3), -INFINITY), -1), vh), 1e-14);
  const auto [cos, sin] = rotary_cos_sin(3, 4);
  check("apply_rotary", apply_rotary(qh, to(cos, kFloat64), to(sin, kFloat64)),
        qh * to(cos, kFloat64) + rotate_half(qh) * to(sin, kFloat64), 1e-14);
  const auto [q_embed, k_embed] = apply_rotary_pos_emb(qh, kh, to(cos, kFloat64), to(sin, kFloat64));
  check("apply_rotary_pos_emb q", q_embed, qh * to(cos, kFloat64) + rotate_half(qh) * to(sin, kFloat64), 1e-14);
  check("apply_rotary_pos_emb k", k_embed, kh * to(cos, kFloat64) + rotate_half(kh) * to(sin, kFloat64), 1e-14);

  // a gradient through the composition
  Tensor leaf = randn({2, 4}, gen, f64).requires_grad_();
  sum(linear(leaf, w, b)).backward();
  check("linear backward", leaf.grad(), expand(sum(w, {0}, true), {2, 4}));

  std::printf("public_ops: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
