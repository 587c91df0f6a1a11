// CPU kernels of the per-channel ops: KernelRegistry keys "bias_add", "bias_add_grad"
// (ops/bias_add.cpp), "global_avg_pool" and "global_avg_pool_grad" (ops/pool.cpp). Every
// tensor is seen as (N, C, S), S the product of the axes after the channel axis; the loops
// are in backends/cpu/kernels/channel.cpp, compiled once per CPU level.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

namespace {

constexpr std::int64_t kGrain = 16384;  // elements per parallel task

struct Ncs {
  std::int64_t n, c, s;
};
Ncs ncs(const Shape& x) {
  const std::int64_t n = x[0], c = x[1];
  return {n, c, n * c != 0 ? numel(x) / (n * c) : 0};
}

/// Rows of `len` elements per task, about kGrain elements.
std::int64_t rows_grain(std::int64_t len) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(len, 1)); }

void run_global_avg_pool(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Ncs d = ncs(in[0].shape());
  if (d.s == 0) {  // the mean of nothing, as numpy: NaN
    out.fill(NAN);
    return;
  }
  detail::parallel_range(ctx, d.n * d.c, rows_grain(d.s), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(channel_mean_rows, in[0].dtype(), in[0].raw(), out.raw(), d.s, b, e);
  });
}

void run_global_avg_pool_grad(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Ncs d = ncs(in[0].shape());
  detail::parallel_range(ctx, d.s ? d.n * d.c : 0, rows_grain(d.s), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(channel_spread_rows, in[1].dtype(), in[1].raw(), out.raw(), d.s, b, e);
  });
}

void run_bias_add(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Ncs d = ncs(in[0].shape());
  const std::int64_t rows = d.s == 1 ? d.n : d.n * d.c, len = d.s == 1 ? d.c : d.s;
  detail::parallel_range(ctx, d.s ? rows : 0, rows_grain(len), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(bias_add_rows, in[0].dtype(), in[0].raw(), in[1].raw(), out.raw(), d.c, d.s, b, e);
  });
}

void run_bias_add_grad(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Ncs d = ncs(in[0].shape());
  if (d.n * d.s == 0) {
    out.fill(0);
    return;
  }
  detail::parallel_range(ctx, d.c, rows_grain(d.n * d.s), [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(bias_grad_channels, in[0].dtype(), in[0].raw(), out.raw(), d.n, d.c, d.s, b, e);
  });
}

}  // namespace

void register_cpu_channel_kernels(KernelRegistry& r) {
  r.add("bias_add", DeviceKind::cpu, {nullptr, run_bias_add});
  r.add("bias_add_grad", DeviceKind::cpu, {nullptr, run_bias_add_grad});
  r.add("global_avg_pool", DeviceKind::cpu, {nullptr, run_global_avg_pool});
  r.add("global_avg_pool_grad", DeviceKind::cpu, {nullptr, run_global_avg_pool_grad});
}

}  // namespace convgraph
