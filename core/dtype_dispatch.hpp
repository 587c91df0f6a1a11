#pragma once
// Private: calls a generic lambda with a value of the C++ type behind a DType, so one
// kernel template serves every host dtype. Shared by Tensor and the op kernels.
#include <cstdint>

#include "convgraph/core/dtype.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph::detail {

/// Calls f(T{}) with T the C++ type of `t` (float, double, int32, int64, bool); throws
/// TypeError naming `who` for dtypes with no host kernel (float16, bfloat16).
template <class F>
decltype(auto) dispatch_dtype(DType t, const char* who, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(std::int32_t{});
    case DType::int64: return f(std::int64_t{});
    case DType::boolean: return f(bool{});
    default: break;
  }
  throw TypeError(msg(who, ": no CPU kernel for dtype ", dtype_name(t), "; cast to float32 first"));
}

}  // namespace convgraph::detail
