// The math of the elementwise ops, shared by the CPU and CUDA kernels so both compute the same
// function: forward y = f(x; p) and backward dx = g * f'(x) (or f' written in terms of y when
// that is cheaper and exact: exp, tanh, sigmoid, sqrt, rsqrt). A is float or double.
//
// M supplies exp: StdMath (std::exp) for CUDA and float64; the CPU float kernels pass their own
// (ops/cpu/unary.cpp: a vectorisable exp), so both backends share the formulas below.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bfloat16.h"  // TG_HOST_DEVICE

// Host compilers inline these formulas unconditionally: a CPU kernel file instantiates every op
// for every dtype, GCC's inline budget runs out, and an out-of-line call per element stops the
// loop from vectorising. nvcc (device and host) keeps its own inlining decisions.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define TG_MATH_INLINE inline __attribute__((always_inline))
#else
#define TG_MATH_INLINE inline
#endif

namespace tg {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Pow, AddScalar, MulScalar
};

// Whether backward reads the output (else the input).
TG_HOST_DEVICE constexpr bool backward_uses_output(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Tanh || op == UnaryOp::Sigmoid || op == UnaryOp::Sqrt ||
         op == UnaryOp::Rsqrt;
}
// Whether backward needs no saved value at all (the derivative is a constant).
TG_HOST_DEVICE constexpr bool backward_is_constant(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::AddScalar || op == UnaryOp::MulScalar;
}

struct StdMath {
  template <class A>
  TG_HOST_DEVICE static TG_MATH_INLINE A exp(A x) {
    return std::exp(x);
  }
};

template <class A, class M = StdMath>
TG_HOST_DEVICE TG_MATH_INLINE A sigmoid_of(A x) {
  return A(1) / (A(1) + M::exp(-x));
}

template <UnaryOp OP, class A, class M = StdMath>
TG_HOST_DEVICE TG_MATH_INLINE A unary_value(A x, A p) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654), kInvSqrt2 = A(0.7071067811865476);
  if constexpr (OP == UnaryOp::Neg) return -x;
  else if constexpr (OP == UnaryOp::Exp) return M::exp(x);
  else if constexpr (OP == UnaryOp::Log) return std::log(x);
  else if constexpr (OP == UnaryOp::Sqrt) return std::sqrt(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return A(1) / std::sqrt(x);
  else if constexpr (OP == UnaryOp::Tanh) return std::tanh(x);
  else if constexpr (OP == UnaryOp::Sigmoid) return sigmoid_of<A, M>(x);
  else if constexpr (OP == UnaryOp::Relu) return x > A(0) ? x : A(0);
  else if constexpr (OP == UnaryOp::Gelu) return A(0.5) * x * (A(1) + std::erf(x * kInvSqrt2));
  else if constexpr (OP == UnaryOp::GeluTanh)
    return A(0.5) * x * (A(1) + std::tanh(kSqrt2OverPi * (x + A(0.044715) * x * x * x)));
  else if constexpr (OP == UnaryOp::Silu) return x * sigmoid_of<A, M>(x);
  else if constexpr (OP == UnaryOp::Pow) return std::pow(x, p);
  else if constexpr (OP == UnaryOp::AddScalar) return x + p;
  else if constexpr (OP == UnaryOp::MulScalar) return x * p;
}

// dL/dx given g = dL/dy; v is y when backward_uses_output(OP), else x.
template <UnaryOp OP, class A, class M = StdMath>
TG_HOST_DEVICE TG_MATH_INLINE A unary_grad(A v, A p, A g) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654), kInvSqrt2 = A(0.7071067811865476),
              kInvSqrt2Pi = A(0.3989422804014327);
  if constexpr (OP == UnaryOp::Neg) return -g;
  else if constexpr (OP == UnaryOp::Exp) return g * v;
  else if constexpr (OP == UnaryOp::Log) return g / v;
  else if constexpr (OP == UnaryOp::Sqrt) return g * A(0.5) / v;
  else if constexpr (OP == UnaryOp::Rsqrt) return g * A(-0.5) * v * v * v;
  else if constexpr (OP == UnaryOp::Tanh) return g * (A(1) - v * v);
  else if constexpr (OP == UnaryOp::Sigmoid) return g * v * (A(1) - v);
  else if constexpr (OP == UnaryOp::Relu) return v > A(0) ? g : A(0);
  else if constexpr (OP == UnaryOp::Gelu)
    return g * (A(0.5) * (A(1) + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * M::exp(A(-0.5) * v * v));
  else if constexpr (OP == UnaryOp::GeluTanh) {
    A t = std::tanh(kSqrt2OverPi * (v + A(0.044715) * v * v * v));
    return g * (A(0.5) * (A(1) + t) +
                A(0.5) * v * (A(1) - t * t) * kSqrt2OverPi * (A(1) + A(3 * 0.044715) * v * v));
  } else if constexpr (OP == UnaryOp::Silu) {
    A s = sigmoid_of<A, M>(v);
    return g * s * (A(1) + v * (A(1) - s));
  } else if constexpr (OP == UnaryOp::Pow) return g * p * std::pow(v, p - A(1));
  else if constexpr (OP == UnaryOp::AddScalar) return g;
  else if constexpr (OP == UnaryOp::MulScalar) return g * p;
}

// Calls f(std::integral_constant<UnaryOp, OP>{}) for the runtime op, so kernels are
// instantiated per op (no per-element switch).
template <class F>
TG_HOST_DEVICE inline void visit_unary(UnaryOp op, F&& f) {
  switch (op) {
#define TG_UNARY_CASE(name) \
  case UnaryOp::name: f(std::integral_constant<UnaryOp, UnaryOp::name>{}); break;
    TG_UNARY_CASE(Neg) TG_UNARY_CASE(Exp) TG_UNARY_CASE(Log) TG_UNARY_CASE(Sqrt) TG_UNARY_CASE(Rsqrt)
    TG_UNARY_CASE(Tanh) TG_UNARY_CASE(Sigmoid) TG_UNARY_CASE(Relu) TG_UNARY_CASE(Gelu)
    TG_UNARY_CASE(GeluTanh) TG_UNARY_CASE(Silu) TG_UNARY_CASE(Pow) TG_UNARY_CASE(AddScalar)
    TG_UNARY_CASE(MulScalar)
#undef TG_UNARY_CASE
  }
}

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

template <BinaryOp OP, class A>
TG_HOST_DEVICE TG_MATH_INLINE A binary_value(A a, A b) {
  if constexpr (OP == BinaryOp::Add) return a + b;
  else if constexpr (OP == BinaryOp::Sub) return a - b;
  else if constexpr (OP == BinaryOp::Mul) return a * b;
  else if constexpr (OP == BinaryOp::Div) return a / b;
}

template <class F>
TG_HOST_DEVICE inline void visit_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: f(std::integral_constant<BinaryOp, BinaryOp::Add>{}); break;
    case BinaryOp::Sub: f(std::integral_constant<BinaryOp, BinaryOp::Sub>{}); break;
    case BinaryOp::Mul: f(std::integral_constant<BinaryOp, BinaryOp::Mul>{}); break;
    case BinaryOp::Div: f(std::integral_constant<BinaryOp, BinaryOp::Div>{}); break;
  }
}

}  // namespace tg
