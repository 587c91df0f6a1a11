#pragma once
// Private to backends/cpu: the per-level loops of the non-convolution kernels
// (backends/cpu/kernels/elementwise.cpp, pool.cpp), declared once for every level, and the
// registration functions of the kernel families (register_cpu_kernels() calls them).
#include <cstdint>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/core/dtype.hpp"
#include "ops/elementwise_table.hpp"

namespace convgraph {

class KernelRegistry;
namespace detail {
struct PoolParams;
}

namespace cpu {
// y[i] = row k's formula at x[i], i in [0, n), elements of dtype t.
CONVGRAPH_ISA_DECLARE(void ew_unary(detail::UnaryKind k, DType t, const void* x, void* y, std::int64_t n, double a,
                                    double b))
// out[j] = row k's formula at (x[x_step ? j : 0], y[y_step ? j : 0]), j in [0, n); out is
// bool for comparisons, dtype t otherwise.
CONVGRAPH_ISA_DECLARE(void ew_binary(detail::BinaryKind k, DType t, const void* x, bool x_step, const void* y,
                                     bool y_step, void* out, std::int64_t n))
// y[i] = c[i] ? a[i] : b[i] over float (or double) runs.
CONVGRAPH_ISA_DECLARE(void ew_select(const bool* c, const void* a, const void* b, void* y, std::int64_t n, bool f64))
// float <-> double conversion of a run.
CONVGRAPH_ISA_DECLARE(void ew_float_convert(const void* x, bool from_f64, void* y, std::int64_t n))

/// One pooling call: `planes` planes of h x w pooled to oh x ow.
struct PoolGeometry {
  std::int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
};
// Output rows [r0, r1) (row = plane * oh + output row) of the pooled x (numeric dtype t).
CONVGRAPH_ISA_DECLARE(void pool_rows(const detail::PoolParams& p, const PoolGeometry& g, DType t, const void* x,
                                     void* y, std::int64_t r0, std::int64_t r1))
// Planes [p0, p1) of gx (zeroed by the caller) from gy: max routes to the argmax of x,
// avg spreads over the window.
CONVGRAPH_ISA_DECLARE(void pool_grad_planes(const detail::PoolParams& p, const PoolGeometry& g, DType t,
                                            const void* x, const void* gy, void* gx, std::int64_t p0,
                                            std::int64_t p1))
// Output rows [r0, r1) of the gather of g (shaped like x) at each window's argmax of x.
CONVGRAPH_ISA_DECLARE(void max_pool_gather_rows(const detail::PoolParams& p, const PoolGeometry& g, DType t,
                                                const void* x, const void* g_src, void* out, std::int64_t r0,
                                                std::int64_t r1))
}  // namespace cpu

void register_cpu_elementwise_kernels(KernelRegistry& r);
void register_cpu_fused_kernels(KernelRegistry& r);
void register_cpu_reduce_kernels(KernelRegistry& r);
void register_cpu_softmax_kernels(KernelRegistry& r);
void register_cpu_matmul_kernel(KernelRegistry& r);
void register_cpu_pool_kernels(KernelRegistry& r);

}  // namespace convgraph
