#pragma once
// Private: every elementwise op, written once. Each row of the two X-macro tables below
// holds an op's name, dtype rule, scalar parameters, scalar formula and gradient; the op
// (ops/elementwise.cpp: names, type inference, gradient, DSL functions), the CPU kernels
// (backends/cpu/kernels/elementwise.cpp), the fused-elementwise interpreter and the CUDA
// kernels (backends/cuda/elementwise.cu) are all expanded from these rows, so the three
// copies of a formula cannot drift apart and a new unary op is one row (plus its
// declaration in include/convgraph/ops/math.hpp and its tests).
//
// C++17 and no convgraph type: nvcc, the per-level kernel files and the ops all include it.
// A consumer defines X to pick the columns it needs; the gradient columns are DSL
// expressions and are only expanded in ops/elementwise.cpp.
#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define CONVGRAPH_EW_HD __host__ __device__ inline
#else
#define CONVGRAPH_EW_HD inline
#endif

// ---- unary ops ----------------------------------------------------------------------
//
// X(id, rule, n, p0, p1, check, why, formula, gradient)
//   id       enumerator, op name and DSL function name
//   rule     numeric (any non-bool dtype) or floating (float tensors only)
//   n        number of scalar parameters (0, 1 or 2): the DSL function takes them after x
//   p0, p1   names of the parameters a and b ("" when absent)
//   check    what a and b must satisfy beyond being finite (an expression of a and b)
//   why      the message when `check` fails
//   formula  the value at v, of type T, with a and b already converted to T. It runs on
//            the host and on the GPU (math functions are called unqualified and resolve to
//            std:: or CUDA's overloads), and must be branch-light so the loops vectorise.
//   gradient d/dx times g, as a DSL expression of the input x, the output out, the output
//            gradient g and the parameters a and b (doubles); float inputs only.
//
// The sigmoid formula is the stable one, v >= 0 ? 1/(1+exp(-v)) : exp(v)/(1+exp(v)), with
// both cases exponentiating -|v| so that it needs no branch. softplus is
// max(v, 0) + log1p(exp(-|v|)), exact for large |v|. gelu is the tanh approximation
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))). relu's gradient reads its output
// (out > 0 exactly where x > 0), so nothing but relu reads the pre-activation and a
// convolution's epilogue can absorb the bias, residual and relu (conv_epilogue_fusion).
#define CONVGRAPH_UNARY_OPS(X)                                                                                    \
  X(neg, numeric, 0, "", "", true, "", static_cast<T>(-v), (-g))                                                    \
  X(exp, floating, 0, "", "", true, "", exp(v), (g * out))                                                          \
  X(log, floating, 0, "", "", true, "", log(v), (g / x))                                                            \
  X(sqrt, floating, 0, "", "", true, "", sqrt(v), (g / (out * 2.0)))                                                \
  X(abs, numeric, 0, "", "", true, "", v < T(0) ? static_cast<T>(-v) : v, (g * sign(x)))                             \
  X(sign, numeric, 0, "", "", true, "", static_cast<T>((v > T(0)) - (v < T(0))), (zeros_like(x)))                   \
  X(relu, numeric, 0, "", "", true, "", v > T(0) ? v : T(0), (where(out > 0.0, g, zeros_like(g))))                    \
  X(sigmoid, floating, 0, "", "", true, "", ::convgraph::ew::sigmoid_value(v), (g * out * (1.0 - out)))           \
  X(tanh, floating, 0, "", "", true, "", tanh(v), (g * (1.0 - out * out)))                                          \
  X(softplus, floating, 0, "", "", true, "", (v > T(0) ? v : T(0)) + log1p(exp(v > T(0) ? -v : v)),                  \
    (g * sigmoid(x)))                                                                                            \
  X(gelu, floating, 0, "", "", true, "",                                                                            \
    T(0.5) * v * (T(1) + tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v))),                          \
    (g * [](const Var& x) {                                                                                      \
      const Var t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));                                       \
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x * x);         \
    }(x)))                                                                                       \
  X(leaky_relu, floating, 1, "alpha", "", true, "", v > T(0) ? v : v * a, (where(x > 0.0, g, g * a)))               \
  X(elu, floating, 1, "alpha", "", true, "", v > T(0) ? v : a * expm1(v), (where(x > 0.0, g, g * (out + a))))       \
  X(log1p, floating, 0, "", "", true, "", log1p(v), (g / (x + 1.0)))                                                \
  X(expm1, floating, 0, "", "", true, "", expm1(v), (g * (out + 1.0)))                                              \
  X(square, numeric, 0, "", "", true, "", static_cast<T>(v * v), (g * x * 2.0))                                     \
  X(clip, numeric, 2, "lo", "hi", a <= b, "lo must not exceed hi", v < a ? a : (v > b ? b : v),                     \
    (where(x < a, zeros_like(g), where(x > b, zeros_like(g), g))))

// ---- binary ops ---------------------------------------------------------------------
//
// X(id, rule, formula, grad_x, grad_y)
//   rule     arith (numeric, not bool), minmax (bool too), compare (bool result)
//   formula  the value at x, y (both of type T); integer division by zero is the caller's
//            to reject (the CPU throws; a GPU cannot, and gives 0)
//   grad_x, grad_y  DSL expressions of x, y, out and g, before summing to each operand's
//            broadcast shape (comparisons have none)
#define CONVGRAPH_BINARY_OPS(X)                                                                                   \
  X(add, arith, x + y, (g), (g))                                                                                \
  X(sub, arith, x - y, (g), (-g))                                                                               \
  X(mul, arith, x * y, (g * y), (g * x))                                                                        \
  X(div, arith, ::convgraph::ew::div_value(x, y), (g / y), (-(g * out) / y))                                    \
  X(pow, arith, ::convgraph::ew::pow_value(x, y), (g * y * pow(x, y - 1.0)), (g * out * log(x)))                \
  X(maximum, minmax, x > y || x != x ? x : y, (where(ge(x, y), g, zeros_like(g))),                             \
    (where(ge(x, y), zeros_like(g), g)))                                                                         \
  X(minimum, minmax, x < y || x != x ? x : y, (where(le(x, y), g, zeros_like(g))),                             \
    (where(le(x, y), zeros_like(g), g)))                                                                         \
  X(lt, compare, x < y, (), ())                                                                                 \
  X(le, compare, x <= y, (), ())                                                                                \
  X(gt, compare, x > y, (), ())                                                                                 \
  X(ge, compare, x >= y, (), ())                                                                                \
  X(eq, compare, x == y, (), ())                                                                                \
  X(ne, compare, x != y, (), ())

namespace convgraph::detail {

#define CONVGRAPH_EW_ID(id, ...) id,
enum class UnaryKind { CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_ID) };
enum class BinaryKind { CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_ID) };
#undef CONVGRAPH_EW_ID

#define CONVGRAPH_EW_ONE(...) +1
inline constexpr int kUnaryKinds = 0 CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_ONE);
inline constexpr int kBinaryKinds = 0 CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_ONE);
#undef CONVGRAPH_EW_ONE
// Adding a row is meant to be deliberate: update the counts (and the tests that list every op).
static_assert(kUnaryKinds == 17, "CONVGRAPH_UNARY_OPS changed: update kUnaryKinds' check and the op tests");
static_assert(kBinaryKinds == 13, "CONVGRAPH_BINARY_OPS changed: update kBinaryKinds' check and the op tests");

enum class UnaryRule { numeric, floating };
enum class BinaryRule { arith, minmax, compare };

/// Static facts about each op, one entry per row, in row order.
struct UnaryTraits {
  const char* name;
  UnaryRule rule;
  const char* param[2];  ///< "" when absent
  int params;
};
struct BinaryTraits {
  const char* name;
  BinaryRule rule;
};

#define CONVGRAPH_EW_UNARY_TRAITS(id, rule, n, p0, p1, ...) UnaryTraits{#id, UnaryRule::rule, {p0, p1}, n},
inline constexpr UnaryTraits kUnaryTraits[] = {CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_UNARY_TRAITS)};
#undef CONVGRAPH_EW_UNARY_TRAITS
#define CONVGRAPH_EW_BINARY_TRAITS(id, rule, ...) BinaryTraits{#id, BinaryRule::rule},
inline constexpr BinaryTraits kBinaryTraits[] = {CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_BINARY_TRAITS)};
#undef CONVGRAPH_EW_BINARY_TRAITS

constexpr const UnaryTraits& unary_traits(UnaryKind k) { return kUnaryTraits[static_cast<int>(k)]; }
constexpr const BinaryTraits& binary_traits(BinaryKind k) { return kBinaryTraits[static_cast<int>(k)]; }
constexpr bool is_comparison(BinaryKind k) { return binary_traits(k).rule == BinaryRule::compare; }

}  // namespace convgraph::detail

namespace convgraph::ew {

// Helpers of the formulas that need a type switch.
template <class T>
CONVGRAPH_EW_HD T div_value(T x, T y) {
  if constexpr (std::is_integral_v<T>) return y == T(0) ? T(0) : static_cast<T>(x / y);
  else return x / y;
}
template <class T>
CONVGRAPH_EW_HD T sigmoid_value(T v) {
  using std::exp;
  const T e = exp(v >= T(0) ? -v : v);  // exp(-|v|): never overflows
  return (v >= T(0) ? T(1) : e) / (T(1) + e);
}
template <class T>
CONVGRAPH_EW_HD T pow_value(T x, T y) {
  using std::pow;
  if constexpr (std::is_floating_point_v<T>) return pow(x, y);
  else return static_cast<T>(pow(static_cast<double>(x), static_cast<double>(y)));
}

/// Whether unary op k has a kernel for element type T (float-only formulas are never
/// instantiated for integers).
template <class T>
constexpr bool unary_applies(detail::UnaryKind k) {
  return !std::is_same_v<T, bool> &&
         (std::is_floating_point_v<T> || detail::unary_traits(k).rule == detail::UnaryRule::numeric);
}

// One function object per row: Unary<K>::apply(v, a, b) is the row's formula. `a` and `b`
// are the op's parameters, converted to T by the caller once per kernel.
template <detail::UnaryKind K>
struct Unary;
#define CONVGRAPH_EW_UNARY_FN(id, rule, n, p0, p1, check, why, formula, ...)            \
  template <>                                                                         \
  struct Unary<detail::UnaryKind::id> {                                               \
    static constexpr detail::UnaryKind kind = detail::UnaryKind::id;                  \
    template <class T>                                                                \
    static CONVGRAPH_EW_HD T apply(T v, T a, T b) {                                   \
      using std::exp, std::log, std::sqrt, std::tanh, std::log1p, std::expm1;         \
      (void)a;                                                                        \
      (void)b;                                                                        \
      return formula;                                                                 \
    }                                                                                 \
  };
CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_UNARY_FN)
#undef CONVGRAPH_EW_UNARY_FN

template <detail::BinaryKind K>
struct Binary;
#define CONVGRAPH_EW_BINARY_FN(id, rule, formula, ...) \
  template <>                                          \
  struct Binary<detail::BinaryKind::id> {              \
    static constexpr detail::BinaryKind kind = detail::BinaryKind::id; \
    template <class T>                                 \
    static CONVGRAPH_EW_HD auto apply(T x, T y) {      \
      return formula;                                  \
    }                                                  \
  };
CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_BINARY_FN)
#undef CONVGRAPH_EW_BINARY_FN

/// Calls f(Unary<k>{}) for the runtime kind k: a kernel writes one loop per kind, so each
/// loop is specialised on its formula and vectorises (host code: a CUDA launcher uses it to
/// pick the kernel instance).
template <class F>
inline void visit_unary(detail::UnaryKind k, F&& f) {
  switch (k) {
#define CONVGRAPH_EW_CASE(id, ...) \
  case detail::UnaryKind::id: f(Unary<detail::UnaryKind::id>{}); return;
    CONVGRAPH_UNARY_OPS(CONVGRAPH_EW_CASE)
#undef CONVGRAPH_EW_CASE
  }
}
template <class F>
inline void visit_binary(detail::BinaryKind k, F&& f) {
  switch (k) {
#define CONVGRAPH_EW_CASE(id, ...) \
  case detail::BinaryKind::id: f(Binary<detail::BinaryKind::id>{}); return;
    CONVGRAPH_BINARY_OPS(CONVGRAPH_EW_CASE)
#undef CONVGRAPH_EW_CASE
  }
}

}  // namespace convgraph::ew
