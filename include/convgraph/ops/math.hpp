#pragma once
/// Elementwise arithmetic, comparisons and reductions: the DSL's numpy-like core.
/// Binary ops broadcast numpy-style and promote dtypes; a C++ number operand becomes a
/// constant of the other operand's dtype (so x * 2.0 stays float32).
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

// ---- elementwise ---------------------------------------------------------------
Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator-(const Var& a);
Var operator+(const Var& a, double b);
Var operator-(const Var& a, double b);
Var operator*(const Var& a, double b);
Var operator/(const Var& a, double b);
Var operator+(double a, const Var& b);
Var operator-(double a, const Var& b);
Var operator*(double a, const Var& b);
Var operator/(double a, const Var& b);

Var pow(const Var& a, const Var& b);
Var pow(const Var& a, double b);
Var exp(const Var& x);
Var log(const Var& x);
Var sqrt(const Var& x);
Var abs(const Var& x);
Var sign(const Var& x);
Var relu(const Var& x);
Var sigmoid(const Var& x);
Var tanh(const Var& x);
/// -x (what unary minus builds).
Var neg(const Var& x);
/// log(1 + exp(x)), exact for large |x|.
Var softplus(const Var& x);
/// The tanh form of GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Var gelu(const Var& x);
/// x where x > 0, alpha * x elsewhere (float tensors; alpha finite).
Var leaky_relu(const Var& x, double alpha = 0.01);
/// x where x > 0, alpha * (exp(x) - 1) elsewhere (float tensors; alpha finite).
Var elu(const Var& x, double alpha = 1.0);
/// log(1 + x) and exp(x) - 1, accurate near 0.
Var log1p(const Var& x);
Var expm1(const Var& x);
/// x * x (any numeric dtype).
Var square(const Var& x);
/// x limited to [lo, hi] (lo <= hi, both finite; whole numbers for integer tensors). The
/// gradient flows where lo <= x <= hi.
Var clip(const Var& x, double lo, double hi);
Var maximum(const Var& a, const Var& b);
Var minimum(const Var& a, const Var& b);

// Comparisons give bool tensors and carry no gradient.
Var lt(const Var& a, const Var& b);
Var le(const Var& a, const Var& b);
Var gt(const Var& a, const Var& b);
Var ge(const Var& a, const Var& b);
Var eq(const Var& a, const Var& b);
Var ne(const Var& a, const Var& b);
Var operator<(const Var& a, const Var& b);
Var operator<=(const Var& a, const Var& b);
Var operator>(const Var& a, const Var& b);
Var operator>=(const Var& a, const Var& b);
Var operator<(const Var& a, double b);
Var operator>(const Var& a, double b);
/// cond ? a : b elementwise, with broadcasting; cond must be bool.
Var where(const Var& cond, const Var& a, const Var& b);
/// Converts to another dtype (identity when equal).
Var cast(const Var& x, DType dtype);

// ---- reductions ----------------------------------------------------------------
/// Axes may be negative; an empty list reduces over every axis.
Var sum(const Var& x, std::vector<int> axes = {}, bool keepdims = false);
Var mean(const Var& x, std::vector<int> axes = {}, bool keepdims = false);
Var max(const Var& x, std::vector<int> axes = {}, bool keepdims = false);
Var min(const Var& x, std::vector<int> axes = {}, bool keepdims = false);

/// Sums `g` down to `like`'s (run-time) shape over the axes broadcasting expanded
/// (autodiff helper; `like` only provides its shape).
Var sum_to(const Var& g, const Var& like);
/// Broadcasts `x` to `like`'s (run-time) shape, e.g. for the gradient of a reduction.
Var broadcast_like(const Var& x, const Var& like);
/// A tensor of zeros / ones with x's type and run-time shape.
Var zeros_like(const Var& x);
Var ones_like(const Var& x);

}  // namespace convgraph
