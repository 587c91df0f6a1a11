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

/// One pooling call: `planes` volumes of d x h x w pooled to od x oh x ow (a 2-D pooling has
/// d = od = 1, a 1-D one also h = oh = 1; see detail::PoolParams).
struct PoolGeometry {
  std::int64_t planes = 0, d = 1, h = 1, w = 0, od = 1, oh = 1, ow = 0;
};
// Output rows [r0, r1) (row = (plane * od + output depth) * oh + output row) of the pooled
// x (numeric dtype t).
CONVGRAPH_ISA_DECLARE(void pool_rows(const detail::PoolParams& p, const PoolGeometry& g, DType t, const void* x,
                                     void* y, std::int64_t r0, std::int64_t r1))
// gx for output rows [r0, r1) when windows share no input row (p.disjoint_rows()): zeroes
// the input rows each output row owns, then max routes gy to the argmax of x, avg spreads.
CONVGRAPH_ISA_DECLARE(void pool_grad_rows(const detail::PoolParams& p, const PoolGeometry& g, DType t,
                                          const void* x, const void* gy, void* gx, std::int64_t r0,
                                          std::int64_t r1))
// The same for whole planes [p0, p1) (any windows: overlapping ones accumulate serially).
CONVGRAPH_ISA_DECLARE(void pool_grad_planes(const detail::PoolParams& p, const PoolGeometry& g, DType t,
                                            const void* x, const void* gy, void* gx, std::int64_t p0,
                                            std::int64_t p1))
// Output rows [r0, r1) of the gather of g (shaped like x) at each window's argmax of x.
CONVGRAPH_ISA_DECLARE(void max_pool_gather_rows(const detail::PoolParams& p, const PoolGeometry& g, DType t,
                                                const void* x, const void* g_src, void* out, std::int64_t r0,
                                                std::int64_t r1))

// Per-channel loops over (N, C, S) float/double tensors (backends/cpu/kernels/channel.cpp):
// y[r] = mean of row r (S elements), rows [r0, r1) of N * C.
CONVGRAPH_ISA_DECLARE(void channel_mean_rows(DType t, const void* x, void* y, std::int64_t s, std::int64_t r0,
                                             std::int64_t r1))
// gx[r, :] = gy[r] / S for rows [r0, r1).
CONVGRAPH_ISA_DECLARE(void channel_spread_rows(DType t, const void* gy, void* gx, std::int64_t s, std::int64_t r0,
                                               std::int64_t r1))
// y = x + b[c] over rows [r0, r1): rows of S elements (n, c) when s > 1, of C elements (n)
// when s == 1.
CONVGRAPH_ISA_DECLARE(void bias_add_rows(DType t, const void* x, const void* b, void* y, std::int64_t c,
                                         std::int64_t s, std::int64_t r0, std::int64_t r1))
// gb[c] = sum of gy[n, c, :] over n, for channels [c0, c1).
CONVGRAPH_ISA_DECLARE(void bias_grad_channels(DType t, const void* gy, void* gb, std::int64_t n, std::int64_t c,
                                              std::int64_t s, std::int64_t c0, std::int64_t c1))
}  // namespace cpu

void register_cpu_elementwise_kernels(KernelRegistry& r);
void register_cpu_fused_kernels(KernelRegistry& r);
void register_cpu_reduce_kernels(KernelRegistry& r);
void register_cpu_softmax_kernels(KernelRegistry& r);
void register_cpu_matmul_kernel(KernelRegistry& r);
void register_cpu_pool_kernels(KernelRegistry& r);
void register_cpu_channel_kernels(KernelRegistry& r);

}  // namespace convgraph
