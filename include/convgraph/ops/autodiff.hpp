#pragma once
/// Reverse-mode automatic differentiation over the symbolic graph.
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// What grad() does with a `wrt` variable the cost does not depend on.
enum class Disconnected { raise, zero };

/// d cost / d w for each w in wrt, as new graph nodes (reverse accumulation). The cost
/// must be a scalar (rank 0) of a float dtype; throws TypeError otherwise, and ValueError
/// for a disconnected `wrt` unless `disconnected == Disconnected::zero`.
std::vector<Var> grad(const Var& cost, const std::vector<Var>& wrt,
                      Disconnected disconnected = Disconnected::raise);
Var grad(const Var& cost, const Var& wrt, Disconnected disconnected = Disconnected::raise);

}  // namespace convgraph
