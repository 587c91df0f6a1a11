#pragma once
/// CUDA kernels for the DSL ops a training step needs: elementwise (unary, binary with
/// numpy broadcasting, where, cast, fill), reductions (sum/mean/max/min over axes,
/// sum_to, broadcast_to), softmax / log_softmax and their gradients, the class-index
/// take/scatter pair of categorical cross-entropy, and matmul through cuBLAS.
///
/// Every function takes contiguous tensors that live on the GPU (output preallocated, the
/// shapes the op's infer() gave) and enqueues on `stream` (nullptr: the calling thread's
/// current_stream()); nothing waits for the GPU. register_cuda_kernels() (op_kernels.cpp)
/// registers them in the KernelRegistry under the ops' kernel keys; builds without CUDA
/// have none (backends/no_cuda.cpp).
///
/// Semantics follow the CPU kernels, with two documented differences that a GPU cannot
/// report per element: integer division by zero gives 0, and an out-of-range class index
/// gives NaN (take_class) or is skipped (scatter_class) instead of throwing.
#include <string>
#include <vector>

#include "convgraph/core/device.hpp"
#include "convgraph/core/tensor.hpp"
#include "ops/elementwise_table.hpp"

namespace convgraph::gpu {

/// out = f(x) for a row of CONVGRAPH_UNARY_OPS with parameters (pa, pb). Dtypes: float32,
/// float64, int32, int64 (float-only rows need a float).
void unary(detail::UnaryKind op, double pa, double pb, const Tensor& x, Tensor& out, void* stream);
/// out = a (op) b with broadcasting for a row of CONVGRAPH_BINARY_OPS: arithmetic (out has
/// the operands' dtype) or comparison (out is bool). Operands share one dtype.
void binary(detail::BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out, void* stream);
/// out = cond ? a : b with broadcasting (cond bool).
void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out, void* stream);
/// out = x converted to out's dtype (any of the 7 dtypes each way).
void cast(const Tensor& x, Tensor& out, void* stream);
/// Fills out with `value` (converted to out's dtype).
void fill(Tensor& out, double value, void* stream);

enum class Reduce { sum, mean, max, min };
/// out = reduce(x) over `axes` (sorted, non-negative); out has the kept axes in order.
void reduce(Reduce kind, const Tensor& x, const std::vector<int>& axes, Tensor& out, void* stream);
/// out[i] = scale * x[broadcast offset of i] (x's shape must broadcast to out's; a
/// broadcast_to that re-inserts reduced axes passes x reshaped first).
void broadcast_copy(const Tensor& x, Tensor& out, double scale, void* stream);

/// Row-wise over the last axis (float32/float64).
void softmax(bool log, const Tensor& x, Tensor& out, void* stream);
/// softmax_grad(gy, y) = y * (gy - sum(gy * y)); log_softmax_grad(gy, y) = gy - exp(y) * sum(gy).
void softmax_grad(bool log, const Tensor& gy, const Tensor& y, Tensor& out, void* stream);
/// out[r] = p[r, idx[r]] (idx int32/int64 with p's shape minus the last axis).
void take_class(const Tensor& p, const Tensor& idx, Tensor& out, void* stream);
/// out = zeros; out[r, idx[r]] = g[r].
void scatter_class(const Tensor& g, const Tensor& idx, Tensor& out, void* stream);

/// numpy matmul (leading batch axes broadcast) for float32/float64 through cuBLAS, with
/// `m`, `k`, `n` the matrix dimensions and the per-operand batch shapes right-aligned to
/// `batch` (1 where an operand is broadcast), as ops/dot.cpp computes them.
void matmul(const Tensor& a, const Tensor& b, Tensor& out, const Shape& batch, const Shape& a_batch,
            const Shape& b_batch, std::int64_t m, std::int64_t k, std::int64_t n, void* stream);

/// Whether these kernels cover dtype `t` for elementwise / reduction ops (all 7 for cast
/// and fill; float32/float64/int32/int64/bool otherwise). GPU-free.
bool elementwise_dtype_supported(DType t);

}  // namespace convgraph::gpu
