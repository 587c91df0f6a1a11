#pragma once
// Shared test support for convolution implementations: the parameter sweep every
// algorithm is checked on, fill helpers and comparison helpers.
#include <cstdint>
#include <string>
#include <vector>

#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/dtype.hpp"
#include "convgraph/conv/conv_params.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"

namespace convgraph::testing {

/// One convolution geometry: the forward shapes and parameters. Any direction and dtype
/// of it is a ConvProblem.
struct ConvCase {
  std::string name;  ///< short description, e.g. "2d half s2x2 d1x1 flip g2 k3x3"
  ConvParams params;
  std::vector<std::int64_t> x_shape;  ///< (N, C, spatial...)
  std::vector<std::int64_t> w_shape;  ///< (K, C/G, spatial...)

  /// ConvProblem::make for this case (throws like make() for an invalid geometry).
  ConvProblem problem(ConvDirection dir, DType dtype = DType::float64) const;
};

/// A case from its shapes and parameters; the spatial rank is x's rank - 2.
ConvCase make_conv_case(std::string name, std::vector<std::int64_t> x, std::vector<std::int64_t> w,
                        BorderMode border, std::vector<std::int64_t> stride,
                        std::vector<std::int64_t> dilation = {}, bool flip = false, std::int64_t groups = 1);

/// The full sweep: 1D/2D/3D x border forms (valid, full, half, symmetric int, per-axis ints,
/// asymmetric (pre, post)) x strides (1, 2, 3, mixed per axis) x dilation (1, 2) x flip x
/// groups (1, 2, C) x kernels (odd, even/mixed, 1x1), plus edge cases (kernel larger than the
/// input in full mode, kernel equal to the input, outputs that read only padding, strides
/// larger than the kernel, full channel blocks, wide rows, depthwise with a multiplier).
/// Only geometries with output size >= 1 are kept. Sizes are tiny: the whole sweep over
/// every direction and both dtypes runs in seconds.
std::vector<ConvCase> conv_sweep_cases();

/// A few larger cases (still fast) where chunking the work actually splits images and
/// rows: for workspace-limit tests and other "more than one chunk" paths.
std::vector<ConvCase> conv_chunking_cases();

/// Every CPU kernel level this build has and this CPU runs, lowest first.
std::vector<CpuIsa> runnable_cpu_levels();

/// The three directions, in order.
inline constexpr ConvDirection kAllDirections[] = {
    ConvDirection::forward, ConvDirection::grad_inputs, ConvDirection::grad_weights};

/// Uniform values in [-1, 1), rounded to float32 so float32 and float64 runs see the same
/// numbers. Deterministic in `seed`.
std::vector<double> random_values(std::size_t n, std::uint64_t seed);
/// Integers in [lo, hi] (stored as double): sums of products stay exact in float32 for the
/// sweep's sizes, so every algorithm must agree bit for bit.
std::vector<double> integer_values(std::size_t n, std::uint64_t seed, int lo = -3, int hi = 3);

/// Casts for feeding typed buffers.
std::vector<float> to_float(const std::vector<double>& v);
std::vector<double> to_double(const std::vector<float>& v);

/// max |a - b| over elements (a and b of equal size); NaN anywhere gives +inf.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
/// max |v|
double max_abs(const std::vector<double>& v);
/// sum a[i] * b[i], in long double.
double dot(const std::vector<double>& a, const std::vector<double>& b);

/// Element counts of x, w and y for a problem.
inline std::size_t x_count(const ConvProblem& p) { return static_cast<std::size_t>(p.x_numel()); }
inline std::size_t w_count(const ConvProblem& p) { return static_cast<std::size_t>(p.w_numel()); }
inline std::size_t y_count(const ConvProblem& p) { return static_cast<std::size_t>(p.y_numel()); }

}  // namespace convgraph::testing
