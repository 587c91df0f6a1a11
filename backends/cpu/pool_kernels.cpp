// CPU kernels of the pooling ops (ops/pool.cpp): KernelRegistry keys "pool", "pool_grad"
// and "max_pool_grad_grad". The loops are in backends/cpu/kernels/pool.cpp, compiled once
// per CPU level; this file splits the work over the thread pool.
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"
#include "ops/pool_internal.hpp"

namespace convgraph {

namespace {

cpu::PoolGeometry geometry(const detail::PoolParams& p, const Shape& x) {
  cpu::PoolGeometry g;
  const std::size_t r = x.size();
  g.h = x[r - 2];
  g.w = x[r - 1];
  g.oh = p.out_size(0, g.h);
  g.ow = p.out_size(1, g.w);
  g.planes = g.h * g.w != 0 ? numel(x) / (g.h * g.w) : 0;
  return g;
}

// Output rows per task: about 1024 output elements.
std::int64_t row_grain(const cpu::PoolGeometry& g) { return std::max<std::int64_t>(1, 1024 / std::max<std::int64_t>(g.ow, 1)); }

void run_pool(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  detail::parallel_range(ctx, g.planes * g.oh, row_grain(g), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(pool_rows, p, g, in[0].dtype(), in[0].raw(), out.raw(), b, e);
  });
}

void run_pool_grad(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  if (out.numel() > 0) std::memset(out.raw(), 0, static_cast<std::size_t>(out.numel()) * dtype_size(out.dtype()));
  // One plane per task: overlapping windows accumulate into the same plane serially.
  detail::parallel_range(ctx, g.planes, 1, [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(pool_grad_planes, p, g, in[1].dtype(), in[0].raw(), in[1].raw(), out.raw(), b, e);
  });
}

void run_max_pool_grad_grad(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = detail::pool_params(op);
  const cpu::PoolGeometry g = geometry(p, in[0].shape());
  detail::parallel_range(ctx, g.planes * g.oh, row_grain(g), [&](std::int64_t b, std::int64_t e) {
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
