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

/// Calls f(T{}) with T float or double for float32/float64; throws TypeError naming `op`
/// for any other dtype (the float-only kernels: softmax, batch norm, per-channel ops).
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::float32) f(float{});
  else if (t == DType::float64) f(double{});
  else throw TypeError(msg(op, ": no kernel for dtype ", dtype_name(t)));
}

}  // namespace convgraph::detail
