#pragma once
// Helpers shared by the numeric convolution tests (test_conv_numeric*.cpp): build one
// abstract node for a ConvCase and direction through the public DSL, compile it, run it and
// measure its error against the reference convolution.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/runtime/function.hpp"
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

namespace convgraph::conv_test {

using i64 = std::int64_t;
using Shp = std::vector<i64>;

inline ConvOptions options_of(const ConvParams& p) {
  return ConvOptions{.border_mode = p.border,
                     .subsample = p.stride,
                     .filter_flip = p.filter_flip,
                     .filter_dilation = p.dilation,
                     .num_groups = p.groups,
                     .name = p.name,
                     .allow_fft = p.allow_fft,
                     .compute_dtype = p.compute_dtype};
}

/// The Theano-style builder of `dir` for p.ndim spatial axes. Operands in the op's order:
/// forward (x, w), grad_inputs (w, dy), grad_weights (x, dy).
inline Var build_conv(ConvDirection dir, const ConvParams& p, const Var& a, const Var& b, const Shp& target) {
  using Fwd = Var (*)(const Var&, const Var&, const ConvOptions&);
  using Grad = Var (*)(const Var&, const Var&, Shape, const ConvOptions&);
  static constexpr Fwd fwd[] = {conv1d, conv2d, conv3d};
  static constexpr Grad gi[] = {conv1d_grad_wrt_inputs, conv2d_grad_wrt_inputs, conv3d_grad_wrt_inputs};
  static constexpr Grad gw[] = {conv1d_grad_wrt_weights, conv2d_grad_wrt_weights, conv3d_grad_wrt_weights};
  const auto i = static_cast<std::size_t>(p.ndim - 1);
  const ConvOptions o = options_of(p);
  switch (dir) {
    case ConvDirection::forward: return fwd[i](a, b, o);
    case ConvDirection::grad_inputs: return gi[i](b, a, target, o);  // (output_grad, filters)
    case ConvDirection::grad_weights: return gw[i](a, b, target, o);
  }
  return {};
}

/// Error of one compiled run: max |got - ref| / max(max |ref|, 1).
struct RunError {
  double rel = 0;
  std::string algo;  ///< what the lowering chose (Function::describe of the node)
};

/// Builds the node for (case, direction, dtype) with static shapes, compiles it under
/// `mode`, runs it on random operands and compares with the float64 reference.
inline RunError run_against_reference(const testing::ConvCase& c, ConvDirection dir, DType dtype,
                                      const Mode& mode, std::uint64_t seed) {
  const ConvProblem p = c.problem(dir, dtype);
  const testing::ConvOperands ops = testing::make_operands(p, seed);
  const std::vector<double> want = testing::reference_output(p, ops);
  const Shp xs = p.x_shape(), ws = p.w_shape(), ys = p.y_shape();
  Var a, b;
  Tensor ta, tb;
  Shp target;
  switch (dir) {
    case ConvDirection::forward:
      a = input(dtype, xs, "x"), b = input(dtype, ws, "w");
      ta = Tensor::from(ops.x, xs, dtype), tb = Tensor::from(ops.w, ws, dtype);
      break;
    case ConvDirection::grad_inputs:
      a = input(dtype, ws, "w"), b = input(dtype, ys, "dy");
      ta = Tensor::from(ops.w, ws, dtype), tb = Tensor::from(ops.y, ys, dtype);
      target = xs;
      break;
    case ConvDirection::grad_weights:
      a = input(dtype, xs, "x"), b = input(dtype, ys, "dy");
      ta = Tensor::from(ops.x, xs, dtype), tb = Tensor::from(ops.y, ys, dtype);
      target = ws;
      break;
  }
  const Var out = build_conv(dir, c.params, a, b, target);
  const Function f = compile({a, b}, {out}, mode);
  const Tensor got = f({ta, tb})[0];
  const std::vector<double> g = got.to_vector();
  RunError e;
  e.rel = testing::max_abs_diff(g, want) / std::max(testing::max_abs(want), 1.0);
  e.algo = f.describe();
  return e;
}

/// Per-direction tally for the summary lines the closing note quotes.
struct Tally {
  long combos[3] = {0, 0, 0};
  double worst[3] = {0, 0, 0};
  std::string worst_case[3];
  void add(ConvDirection d, double err, const std::string& name) {
    const auto i = static_cast<std::size_t>(d);
    ++combos[i];
    if (err > worst[i] || std::isnan(err)) {
      worst[i] = err;
      worst_case[i] = name;
    }
  }
  std::string summary(const std::string& what) const {
    std::string s = what + ":";
    for (int i = 0; i < 3; ++i)
      s += " " + std::string(direction_name(static_cast<ConvDirection>(i))) + " " + std::to_string(combos[i]) +
           " combos, max rel error " + to_sci(worst[i]) + (worst_case[i].empty() ? "" : " (" + worst_case[i] + ")") +
           ";";
    return s;
  }
  static std::string to_sci(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", v);
    return buf;
  }
};

/// Random values in [-1, 1) as a tensor of `dtype`.
inline Tensor random_tensor(Shp shape, std::uint64_t seed, DType dtype = DType::float64) {
  const auto n = static_cast<std::size_t>(numel(shape));
  return Tensor::from(testing::random_values(n, seed), std::move(shape), dtype);
}

}  // namespace convgraph::conv_test
