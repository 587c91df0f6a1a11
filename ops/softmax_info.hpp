#pragma once
// Private: what the kernels of the softmax family (ops/softmax.cpp) read from an op.
#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

/// "softmax", "softmax_grad": whether the op is the log_softmax variant.
bool softmax_is_log(const Op& op);

}  // namespace convgraph::detail
