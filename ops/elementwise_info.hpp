#pragma once
// Private: what kind of elementwise op a node runs, for passes that rebuild elementwise
// computations themselves (elementwise fusion). The kinds are defined here so that
// ops/elementwise.cpp and its readers share one list.
#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

enum class UnaryKind { neg, exp, log, sqrt, abs, sign, relu, sigmoid, tanh };
enum class BinaryKind { add, sub, mul, div, pow, maximum, minimum, lt, le, gt, ge, eq, ne };

struct ElementwiseInfo {
  enum class Class { none, unary, binary, where, cast };
  Class cls = Class::none;
  int arity = 0;
  UnaryKind unary = UnaryKind::neg;    ///< when cls == unary
  BinaryKind binary = BinaryKind::add; ///< when cls == binary
  DType cast_to = DType::float32;      ///< when cls == cast
};

/// The kind of `op` when it is one of ops/elementwise.cpp's ops; cls == none otherwise.
ElementwiseInfo elementwise_info(const Op& op);

}  // namespace convgraph::detail
