#pragma once
// Private: the shape rule of matmul (ops/dot.cpp), which its kernels ("matmul") reuse.
#include <cstdint>

#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

/// Shapes of a matmul split into broadcast batch axes and the matrix dimensions.
struct MatmulShape {
  Shape batch;  ///< broadcast batch shape
  std::int64_t m = 1, k = 1, n = 1;
  Shape a_batch, b_batch;  ///< each operand's batch axes, right-aligned to `batch`
};

/// numpy matmul's shape rule; ShapeError naming both operands when they do not fit.
MatmulShape matmul_shape(const TensorType& a, const TensorType& b);

}  // namespace convgraph::detail
