#pragma once
// Private to backends/cpu: the per-level loops of the random draws and of batch
// normalization (backends/cpu/kernels/random.cpp, batch_norm.cpp), declared once for
// every level, and the registration functions of their kernel families.
#include <cstdint>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/core/dtype.hpp"

namespace convgraph {

class KernelRegistry;
namespace detail {
struct RandomDraw;
}

namespace cpu {
// Philox blocks [b0, b1) of one draw call into out (n elements of float dtype t in all;
// block b fills elements [b * per_block, (b + 1) * per_block) that are < n).
CONVGRAPH_ISA_DECLARE(void random_blocks(const detail::RandomDraw& d, DType t, void* out, std::int64_t n,
                                         std::int64_t b0, std::int64_t b1))

/// Batch-norm data as (N, C, S) planes: plane p = n * C + c holds S contiguous elements
/// of channel c.
struct BnGeometry {
  std::int64_t n = 0, c = 0, s = 0;
};
// Per plane p in [p0, p1), with K = shift[p % C]: without g, sums[2p] = sum(x - K) and
// sums[2p+1] = sum((x - K)^2); with g, sums[2p] = sum(g) and sums[2p+1] = sum(g (x - K)).
CONVGRAPH_ISA_DECLARE(void bn_plane_sums(const BnGeometry& geo, DType t, const void* x, const void* g,
                                         const double* shift, double* sums, std::int64_t p0, std::int64_t p1))
// Per plane p in [p0, p1), channel c = p % C: y = a[c] (x - shift[c]) + b[c] g + k[c]
// (without g: a[c] (x - shift[c]) + k[c]), then relu(y) with `relu`. Centring first keeps y
// accurate when |mean| >> std.
CONVGRAPH_ISA_DECLARE(void bn_plane_affine(const BnGeometry& geo, DType t, const void* x, const void* g,
                                           const double* shift, const double* a, const double* b,
                                           const double* k, bool relu, void* y, std::int64_t p0, std::int64_t p1))
}  // namespace cpu

void register_cpu_random_kernels(KernelRegistry& r);
void register_cpu_batch_norm_kernels(KernelRegistry& r);

}  // namespace convgraph
