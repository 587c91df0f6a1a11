#pragma once
/// Launchers of the DSL-op kernels (elementwise.cu, reduce.cu, softmax.cu): the seam
/// between nvcc (C++17) and backends/cuda/op_kernels.cpp, which maps Tensors and op names
/// onto these codes. Every launcher enqueues on `stream` and throws DeviceError when the
/// launch fails; empty problems launch nothing.
#include <cuda_runtime.h>

#include "backends/cuda/strided_plan.hpp"
#include "ops/elementwise_table.hpp"

namespace convgraph::gpu::launch {

/// Element types, in DType's order (float16, bfloat16, float32, float64, int32, int64, bool).
enum class Elem : int { f16, bf16, f32, f64, i32, i64, b8 };

// The elementwise op kinds are the rows of ops/elementwise_table.hpp.
using UnaryCode = detail::UnaryKind;
using BinaryCode = detail::BinaryKind;
enum class ReduceCode : int { sum, mean, max, min };

/// t in {f32, f64, i32, i64} (float-only rows: f32, f64); y may alias x; a and b are the
/// row's parameters (ignored where it has none).
void unary(UnaryCode op, Elem t, const void* x, void* y, long long n, double a, double b, cudaStream_t stream);
/// p has 2 operands; t in {f32, f64, i32, i64, b8}; out is bool (1 byte) for comparisons.
void binary(BinaryCode op, Elem t, const void* a, const void* b, void* out, const BroadcastPlan& p,
            cudaStream_t stream);
/// p has 3 operands (cond, a, b); cond is bool; t is the branches' type (any of 7).
void where(Elem t, const void* cond, const void* a, const void* b, void* out, const BroadcastPlan& p,
           cudaStream_t stream);
/// Any of the 7 element types each way.
void cast(Elem from, const void* x, Elem to, void* y, long long n, cudaStream_t stream);
void fill(Elem t, void* y, long long n, double value, cudaStream_t stream);
/// y[i] = scale * x[offset of i] (p has 1 operand); scale must be 1 for integer/bool types.
void broadcast_copy(Elem t, const void* x, void* y, const BroadcastPlan& p, double scale, cudaStream_t stream);

/// t in {f32, f64, i32, i64} (and b8 for max/min); y has p.out_count elements.
void reduce(ReduceCode op, Elem t, const void* x, void* y, const ReducePlan& p, cudaStream_t stream);

/// Row-wise over rows x n, contiguous; is_double picks double over float.
void softmax(bool log, bool is_double, const void* x, void* y, long long rows, long long n, cudaStream_t stream);
void softmax_grad(bool log, bool is_double, const void* gy, const void* y, void* out, long long rows, long long n,
                  cudaStream_t stream);
void take_class(bool is_double, bool idx64, const void* p, const void* idx, void* out, long long rows, long long n,
                cudaStream_t stream);
/// out must be zeroed first (rows x n).
void scatter_class(bool is_double, bool idx64, const void* g, const void* idx, void* out, long long rows, long long n,
                   cudaStream_t stream);

}  // namespace convgraph::gpu::launch
