// Elementwise unary ops and tensor-scalar arithmetic.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace tg {

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf, PyTorch's default) or "tanh" (GPT-2's).
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor add(const Tensor& x, double s);
Tensor sub(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor div(const Tensor& x, double s);

inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return sub(x, s); }
inline Tensor operator-(double s, const Tensor& x) { return add(neg(x), s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return div(x, s); }
inline Tensor operator/(double s, const Tensor& x) { return mul(pow(x, -1.0), s); }

}  // namespace tg
