#pragma once
// Private helpers shared by the CPU kernels of the DSL ops.
#include <cstdint>

#include "convgraph/core/error.hpp"
#include "core/dtype_dispatch.hpp"
#include "convgraph/core/graph.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::detail {

/// Runs fn(begin, end) over [0, n), in parallel when the work is large enough.
template <class F>
void parallel_range(const ExecContext& ctx, std::int64_t n, std::int64_t min_per_task, F&& fn) {
  if (ctx.pool && n >= 2 * min_per_task)
    ctx.pool->parallel_for(n, fn, min_per_task);
  else if (n > 0)
    fn(0, n);
}

/// Normalizes possibly negative axes against `rank`, sorted and unique; throws ValueError.
std::vector<int> normalize_axes(std::vector<int> axes, int rank, const char* op);

/// numpy broadcasting of static shapes (kUnknown allowed); throws ShapeError naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op);

}  // namespace convgraph::detail
