#pragma once
/// A fully concrete convolution problem: what every ConvAlgorithm is asked to solve
/// (convolution-descriptor layer, beside conv_params.hpp).
/// Built from an abstract node once all shapes are known. Arrays hold 3 axes; only the
/// first `ndim` are meaningful (the rest are 1 / 0) so one code path serves 1D/2D/3D.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "convgraph/core/dtype.hpp"
#include "convgraph/conv/conv_params.hpp"

namespace convgraph {

using Axes3 = std::array<std::int64_t, 3>;

struct ConvProblem {
  ConvDirection direction = ConvDirection::forward;
  int ndim = 2;
  std::int64_t N = 1, C = 1, K = 1, G = 1;  ///< batch, in channels, out channels, groups
  Axes3 in{1, 1, 1};        ///< input spatial sizes
  Axes3 kernel{1, 1, 1};    ///< filter spatial sizes (undilated)
  Axes3 out{1, 1, 1};       ///< output spatial sizes
  Axes3 stride{1, 1, 1};
  Axes3 dilation{1, 1, 1};
  Axes3 pad_pre{0, 0, 0};
  Axes3 pad_post{0, 0, 0};
  bool flip = false;        ///< true: true convolution (filter flipped on every axis)
  DType dtype = DType::float32;    ///< storage type of x, w and y
  DType compute = DType::float32;  ///< accumulation type
  std::size_t workspace_limit = std::numeric_limits<std::size_t>::max();

  /// Builds and validates a problem from the forward geometry: x (N, C, spatial...) and
  /// w (K, C/G, spatial...), all dims known. Throws ShapeError/ValueError naming `op`.
  static ConvProblem make(ConvDirection dir, const ConvParams& params,
                          const std::vector<std::int64_t>& x_shape,
                          const std::vector<std::int64_t>& w_shape, DType dtype,
                          std::string_view op = "conv");

  std::vector<std::int64_t> x_shape() const;  ///< (N, C, in...)
  std::vector<std::int64_t> w_shape() const;  ///< (K, C/G, kernel...)
  std::vector<std::int64_t> y_shape() const;  ///< (N, K, out...)
  std::int64_t x_numel() const;
  std::int64_t w_numel() const;
  std::int64_t y_numel() const;
  std::int64_t Cg() const { return C / G; }
  std::int64_t Kg() const { return K / G; }
  std::int64_t kernel_numel() const;  ///< prod(kernel) over ndim axes
  std::int64_t in_numel() const;      ///< prod(in)
  std::int64_t out_numel() const;     ///< prod(out)
  std::int64_t dilated_kernel(int axis) const { return (kernel[axis] - 1) * dilation[axis] + 1; }
  /// 2 * N * K * (C/G) * prod(kernel) * prod(out): the same for every direction.
  double flops() const;
  /// One canonical line, e.g. "fwd nd2 g1 mb8 ic64 oc64 i56x56 k3x3 s1x1 d1x1 p1x1-1x1 xcorr f32/f32":
  /// test-case id, benchmark label and tuning-cache key (with the workspace limit).
  std::string key() const;
  bool operator==(const ConvProblem&) const = default;
};

}  // namespace convgraph
