// Llama models at real size for the benchmarks (issue 36's step, issue 34's loading):
//   the named configs of bench/torch_toy_lora.py with their batch and sequence (bench_llama),
//   a model of any size built in seconds (fast_llama), and the model FLOPs of a training step
//   (step_flops), so ms and TFLOP/s are printed side by side.
//
// fast_llama builds the model under nn::init::SkipInitGuard (parameters made on the device in
// the target dtype, no host init: the constructor's two host draws took about 110 s for a 1.6B
// model on the GPU machine) and fills every weight from one 1M-element N(0, 1) pool drawn once
// (each weight gets the pool repeated, scaled to N(0, initializer_range); norms ones, biases 0).
// bench/fast_llama_check.cpp checks it has the constructor's structure and, given the same
// weights, its loss and gradients (ctest Bench.FastLlamaMatchesTheConstructor).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "nn/init.h"
#include "nn/models/llama.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace tg::bench {

struct BenchLlama {
  nn::LlamaConfig config;
  int64_t batch = 8, seq = 0;  // tokens a step: batch x seq
};

// tiny, small, bench-135m (nn::LlamaConfig::by_name, batch 8 / 16 / 8 at their full length),
// llama-1b and llama3-8b (bench/torch_toy_lora.py's: same shapes, theta 10000, untied head),
// llama3-70b (Llama-3-70B's shape: d 8192, 64 heads, 8 kv heads, ffn 28672, 80 layers; QLoRA's
// memory is extrapolated from a few of its layers).
// llama3.2-1b (Llama-3.2-1B's shape: 32 / 8 heads, tied head; 1.24B parameters).
inline BenchLlama bench_llama(const std::string& name) {
  BenchLlama b;
  if (name == "llama3-70b") {
    nn::LlamaConfig& c = b.config;
    c.vocab_size = 128256;
    c.hidden_size = 8192;
    c.intermediate_size = 28672;
    c.num_hidden_layers = 80;
    c.num_attention_heads = 64;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 8192;
    b.batch = 1;
  } else if (name == "llama3.2-1b") {
    nn::LlamaConfig& c = b.config;
    c.vocab_size = 128256;
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 16;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 2048;
    c.tie_word_embeddings = true;
    b.batch = 4;
  } else if (name == "llama-1b" || name == "llama3-8b") {
    nn::LlamaConfig& c = b.config;
    const bool big = name == "llama3-8b";
    c.vocab_size = 128256;
    c.hidden_size = big ? 4096 : 2048;
    c.intermediate_size = big ? 14336 : 8192;
    c.num_hidden_layers = big ? 32 : 16;
    c.num_attention_heads = big ? 32 : 16;
    c.num_key_value_heads = big ? 8 : 0;
    c.max_position_embeddings = big ? 4096 : 2048;
    b.batch = big ? 1 : 4;
  } else if (name == "tiny" || name == "small" || name == "bench-135m") {
    b.config = nn::LlamaConfig::by_name(name);
    b.batch = name == "small" ? 16 : 8;
  } else {
    fail("bench_llama", "unknown config '", name, "' (tiny, small, bench-135m, llama-1b, llama3.2-1b, llama3-8b, llama3-70b)");
  }
  b.seq = b.config.max_position_embeddings;
  return b;
}

namespace detail {

// t (contiguous) = std * the pool, repeated over t's elements.
inline void fill_from_pool(const Tensor& t, const Tensor& pool, double std) {
  NoGradGuard g;
  const Tensor flat = view(t, {t.numel()});
  const int64_t n = t.numel(), p = pool.numel();
  for (int64_t at = 0; at < n; at += p) {
    const int64_t len = std::min(p, n - at);
    copy_(slice(flat, 0, at, at + len), mul(slice(pool, 0, 0, len), std));
  }
}

}  // namespace detail

// Every parameter of `model` (on `device`) filled as described at the top: norms 1, biases 0, the
// rest from the pool at `std`.
inline void fill_fast(nn::Module& model, Device device, double std, Generator& gen) {
  const Tensor pool = randn({1 << 20}, gen, {.dtype = kFloat32, .device = device});
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    if (name.ends_with("norm.weight")) fill_(p, 1.0);
    else if (name.ends_with("bias")) fill_(p, 0.0);
    else detail::fill_from_pool(p, pool, std);
  }
}

// LlamaForCausalLM(c) with its parameters in `dtype` on `device`, filled as described at the top
// (values are not the constructor's; the structure and the computation are).
inline std::shared_ptr<nn::LlamaForCausalLM> fast_llama(const nn::LlamaConfig& c, DType dtype, Device device,
                                                        uint64_t seed = 0) {
  Generator gen(seed);
  std::shared_ptr<nn::LlamaForCausalLM> model;
  {
    nn::init::SkipInitGuard no_init({.dtype = dtype, .device = device});
    model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
  }
  model->to(dtype, device);  // the rotary tables, as model.to(dtype) casts them
  fill_fast(*model, device, c.initializer_range, gen);
  return model;
}

// Model FLOPs of one training step (forward, backward, no optimizer, no recomputation):
// every linear's forward GEMM, its dx GEMM where its input needs a gradient (in LoRA all but the
// first layer's q / k / v, whose input comes from the frozen embedding), its dW GEMM where the
// weight is trained; LoRA's A and B products likewise (r = lora_r); attention causal (half of
// the B·H·T²·hd products), backward counted as 2.5x the forward (FlashAttention-2's convention,
// bench/RESULTS.md's attention section).
struct StepFlops {
  double linear = 0, attention = 0;
  double total() const { return linear + attention; }
};

inline StepFlops step_flops(const nn::LlamaConfig& c, int64_t batch, int64_t seq, bool lora, int64_t lora_r = 8) {
  const double N = static_cast<double>(batch * seq);
  StepFlops f;
  // A GEMM over N tokens: forward, dx when wanted, dW when trained.
  auto gemm = [&](double in, double out, bool dx, bool dw) { f.linear += 2 * N * in * out * (1 + dx + dw); };
  auto projection = [&](double in, double out, bool dx, bool adapted) {
    gemm(in, out, dx, !lora);
    if (lora && adapted) {
      gemm(in, static_cast<double>(lora_r), dx, true);  // h = x A^T
      gemm(static_cast<double>(lora_r), out, true, true);  // y += s h B^T: dh is needed for dA
    }
  };
  const double d = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim());
  const double q = static_cast<double>(c.num_attention_heads) * hd, kv = static_cast<double>(c.kv_heads()) * hd;
  const double ffn = static_cast<double>(c.intermediate_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool qkv_dx = !lora || l > 0;
    projection(d, q, qkv_dx, true);
    projection(d, kv, qkv_dx, true);
    projection(d, kv, qkv_dx, true);
    projection(q, d, true, true);
    for (int i = 0; i < 2; ++i) projection(d, ffn, true, false);  // gate, up
    projection(ffn, d, true, false);
    const double fwd = 2.0 * static_cast<double>(batch) * static_cast<double>(c.num_attention_heads) *
                       static_cast<double>(seq) * static_cast<double>(seq) * hd;  // 2 products, halved
    f.attention += 3.5 * fwd;
  }
  projection(d, static_cast<double>(c.vocab_size), true, false);  // the head
  return f;
}

}  // namespace tg::bench
