// CPU kernels of the pooling ops (ops/pool.cpp): KernelRegistry keys "pool", "pool_grad"
// and "max_pool_grad_grad". The loops are in backends/cpu/kernels/pool.cpp, compiled once
// per CPU level; this file splits the work over the thread pool.
#include <algorithm>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"
#include "ops/pool_internal.hpp"

namespace convgraph {

namespace {

/// The pooled axes of x as a 3-D pooling (depth, rows, columns), leading axes as planes.
cpu::PoolGeometry geometry(const detail::PoolParams& p, const Shape& x) {
  cpu::PoolGeometry g;
  const std::size_t r = x.size();
  std::int64_t* in[3] = {&g.d, &g.h, &g.w};
  std::int64_t* out[3] = {&g.od, &g.oh, &g.ow};
  for (int a = 3 - p.dims; a < 3; ++a) {
    const std::int64_t n = x[r - static_cast<std::size_t>(3 - a)];
    *in[a] = n;
    *out[a] = p.out_size(a, n);
  }
  const std::int64_t volume = g.d * g.h * g.w;
  g.planes = volume != 0 ? numel(x) / volume : 0;
  return g;
}

/// Output rows per task: about 16K input elements read (the pool hands out chunks, so a
/// slower core takes fewer).
std::int64_t row_grain(const detail::PoolParams& p, const cpu::PoolGeometry& g) {
  const std::int64_t per_row = std::max<std::int64_t>(1, p.window[0] * p.window[1] * g.w);
  return std::max<std::int64_t>(1, 16384 / per_row);
}

void run_pool(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  detail::parallel_range(ctx, g.planes * g.od * g.oh, row_grain(p, g), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(pool_rows, p, g, in[0].dtype(), in[0].raw(), out.raw(), b, e);
  });
}

void run_pool_grad(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  const void *x = in[0].raw(), *gy = in[1].raw();
  if (p.disjoint_rows()) {
    // Each output row writes only the input rows it owns: rows run in parallel, and gx is
    // written once (no separate zeroing pass).
    detail::parallel_range(ctx, g.planes * g.od * g.oh, row_grain(p, g), [&](std::int64_t b, std::int64_t e) {
      CONVGRAPH_ISA_CALL(pool_grad_rows, p, g, in[1].dtype(), x, gy, out.raw(), b, e);
    });
    return;
  }
  // Overlapping windows accumulate into shared rows: one plane per task.
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, g.d * g.h * g.w));
  detail::parallel_range(ctx, g.planes, grain, [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(pool_grad_planes, p, g, in[1].dtype(), x, gy, out.raw(), b, e);
  });
}

void run_max_pool_grad_grad(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  detail::parallel_range(ctx, g.planes * g.od * g.oh, row_grain(p, g), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(max_pool_gather_rows, p, g, in[0].dtype(), in[0].raw(), in[1].raw(), out.raw(), b, e);
  });
}

}  // namespace

void register_cpu_pool_kernels(KernelRegistry& r) {
  r.add("pool", DeviceKind::cpu, {nullptr, run_pool});
  r.add("pool_grad", DeviceKind::cpu, {nullptr, run_pool_grad});
  r.add("max_pool_grad_grad", DeviceKind::cpu, {nullptr, run_max_pool_grad_grad});
}

}  // namespace convgraph
