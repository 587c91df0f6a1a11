#pragma once
// Private: what kind of elementwise op a node runs, for passes that rebuild elementwise
// computations themselves (elementwise fusion). The kinds are the rows of
// ops/elementwise_table.hpp.
#include "convgraph/core/graph.hpp"
#include "ops/elementwise_table.hpp"

namespace convgraph::detail {

struct ElementwiseInfo {
  enum class Class { none, unary, binary, where, cast };
  Class cls = Class::none;
  int arity = 0;
  UnaryKind unary = UnaryKind::neg;    ///< when cls == unary
  BinaryKind binary = BinaryKind::add; ///< when cls == binary
  DType cast_to = DType::float32;      ///< when cls == cast
  double param[2] = {0, 0};            ///< unary: the row's scalar parameters (a, b)
};

/// The kind of `op` when it is one of ops/elementwise.cpp's ops; cls == none otherwise.
ElementwiseInfo elementwise_info(const Op& op);

/// The unary op of kind k with parameters (a, b) (ignored where the row has none) applied
/// to x; validates the parameters (ValueError naming the op, the parameter and its value).
Var unary_op(UnaryKind k, const Var& x, double a = 0, double b = 0);

}  // namespace convgraph::detail
