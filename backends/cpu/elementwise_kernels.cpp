// CPU kernels of the elementwise ops (KernelRegistry keys "elementwise.unary", ".binary",
// ".where", ".cast"). The loops of the unary and binary rows are in
// backends/cpu/kernels/elementwise.cpp, compiled once per CPU level; this file splits the
// work into contiguous runs (rows along the last axis for broadcasts) over the thread pool
// and calls the active level's loop on each run.
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/broadcast_iter.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

namespace {

constexpr std::int64_t kGrain = 1 << 14;  // elements per parallel task

using Bytes = const unsigned char*;

void run_unary(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::ElementwiseInfo info = detail::elementwise_info(op);
  const DType t = in[0].dtype();
  const auto es = static_cast<std::int64_t>(dtype_size(t));
  auto x = static_cast<Bytes>(in[0].raw());
  auto* y = static_cast<unsigned char*>(out.raw());
  if (in[0].numel() == 0) return;
  detail::parallel_range(ctx, in[0].numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    CONVGRAPH_ISA_CALL(ew_unary, info.unary, t, x + b * es, y + b * es, e - b, info.param[0], info.param[1]);
  });
}

void run_binary(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::BinaryKind k = detail::elementwise_info(op).binary;
  const DType t = in[0].dtype();
  if (k == detail::BinaryKind::div && (t == DType::int32 || t == DType::int64)) {
    // The row's formula gives 0 (as a GPU must); the CPU can say what went wrong.
    detail::dispatch_dtype(t, "div", [&](auto z) {
      using T = decltype(z);
      const T* d = in[1].data<T>();
      for (std::int64_t i = 0; i < in[1].numel(); ++i)
        if (d[i] == 0) throw ValueError("div: integer division by zero");
      return 0;
    });
  }
  const detail::RowPlan p = detail::plan_rows({&in[0], &in[1]}, out);
  const auto es = static_cast<std::int64_t>(dtype_size(t));
  const auto eo = static_cast<std::int64_t>(dtype_size(out.dtype()));
  auto a = static_cast<Bytes>(in[0].raw());
  auto b = static_cast<Bytes>(in[1].raw());
  auto* o = static_cast<unsigned char*>(out.raw());
  const bool sa = p.inner_stride(0) != 0, sb = p.inner_stride(1) != 0;
  const std::int64_t w = p.width;
  if (out.numel() == 0) return;
  if (p.rows == 1) {  // one row: split it into chunks
    detail::parallel_range(ctx, w, kGrain, [&](std::int64_t s, std::int64_t e) {
      CONVGRAPH_ISA_CALL(ew_binary, k, t, a + (sa ? s * es : 0), sa, b + (sb ? s * es : 0), sb, o + s * eo, e - s);
    });
    return;
  }
  detail::parallel_range(ctx, p.rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(w, 1)),
                         [&](std::int64_t s, std::int64_t e) {
                           for (std::int64_t r = s; r < e; ++r)
                             CONVGRAPH_ISA_CALL(ew_binary, k, t, a + p.offset(0, r) * es, sa, b + p.offset(1, r) * es,
                                                sb, o + r * w * eo, w);
                         });
}

void run_where(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  detail::dispatch_dtype(in[1].dtype(), "where", [&](auto z) {
    using T = decltype(z);
    detail::broadcast_apply3<T>(in[0], in[1], in[2], out, ctx);
    return 0;
  });
}

void run_cast(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext&) { out.copy_from(in[0]); }

}  // namespace

void register_cpu_elementwise_kernels(KernelRegistry& r) {
  r.add("elementwise.unary", DeviceKind::cpu, {nullptr, run_unary});
  r.add("elementwise.binary", DeviceKind::cpu, {nullptr, run_binary});
  r.add("elementwise.where", DeviceKind::cpu, {nullptr, run_where});
  r.add("elementwise.cast", DeviceKind::cpu, {nullptr, run_cast});
}

}  // namespace convgraph
