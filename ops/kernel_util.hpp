#pragma once
// Private helpers shared by the CPU kernels of the DSL ops.
#include <cstdint>

#include "convgraph/core/error.hpp"
#include "convgraph/core/graph.hpp"
#include "convgraph/runtime/thread_pool.hpp"

namespace convgraph::detail {

/// Calls f(T{}) with T the C++ type of `t` (float, double, int32, int64, bool).
template <class F>
decltype(auto) dispatch_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(std::int32_t{});
    case DType::int64: return f(std::int64_t{});
    case DType::boolean: return f(bool{});
    default: break;
  }
  throw TypeError(msg(op, ": no CPU kernel for dtype ", dtype_name(t)));
}

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
