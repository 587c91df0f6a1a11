#pragma once
// Private: what the kernels of the reduction family (ops/reduce.cpp) read from an op. Each
// accessor takes an op whose kernel_key() is the one named; the registry only hands such
// ops to those kernels.
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

enum class ReduceKind { sum, mean, max, min };
const char* reduce_name(ReduceKind k);

/// "reduce": kind and the reduced axes (sorted, non-negative).
struct ReduceAttrs {
  ReduceKind kind = ReduceKind::sum;
  std::vector<int> axes;
};
const ReduceAttrs& reduce_attrs(const Op& op);

/// "broadcast_to": copies g (input 0) to the shape of `like` (input 1). `inserted` lists
/// like's axes that g lacks (a reduction without keepdims; empty: numpy broadcasting);
/// with `mean`, divides by the count each g element was averaged over.
struct BroadcastAttrs {
  std::vector<int> inserted;
  bool mean = false;
  /// g's shape with length-1 axes re-inserted at the reduced positions.
  Shape source_shape(const Shape& g, int like_rank) const;
  /// 1, or 1 / count for a mean's gradient, given g's and the output's element counts.
  double scale(const Shape& g, const Shape& out) const;
};
const BroadcastAttrs& broadcast_attrs(const Op& op);

/// "sum_to": the axes of `g` to sum so that it reduces to `target` (ShapeError otherwise).
std::vector<int> sum_to_axes(const Shape& g, const Shape& target);

/// "fill": the value every element gets.
double fill_value(const Op& op);

}  // namespace convgraph::detail
