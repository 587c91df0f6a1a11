// CPU kernels of the blocked layout (ops/blocked_info.hpp): "to_blocked" and
// "from_blocked" (any block, float32 and float64; memory-bound copies, so plain loops),
// "blocked_conv" and "blocked_pool" (float32, block 16; the loops are in
// backends/cpu/kernels/blocked.cpp, compiled once per CPU level).
#include <algorithm>
#include <cstring>

#include "backends/cpu/blocked.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "core/dtype_dispatch.hpp"
#include "ops/blocked_info.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

namespace {

/// (N, C, S) <-> (N, Cb, S, B) for S the product of the spatial axes. Each task owns whole
/// (image, channel block) planes; within one, the S x B block is a transpose of B rows of S.
struct Blocking {
  std::int64_t n, c, s, b, cb;
};

template <class T>
void block_planes(const Blocking& d, const T* x, T* y, std::int64_t p0, std::int64_t p1) {
  for (std::int64_t pl = p0; pl < p1; ++pl) {
    const std::int64_t n = pl / d.cb, cb = pl % d.cb, live = std::min(d.b, d.c - cb * d.b);
    const T* src = x + (n * d.c + cb * d.b) * d.s;
    T* dst = y + pl * d.s * d.b;
    for (std::int64_t i = 0; i < d.s; ++i) {
      T* out = dst + i * d.b;
      for (std::int64_t j = 0; j < live; ++j) out[j] = src[j * d.s + i];
      for (std::int64_t j = live; j < d.b; ++j) out[j] = T(0);
    }
  }
}

template <class T>
void unblock_planes(const Blocking& d, const T* y, T* x, std::int64_t p0, std::int64_t p1) {
  for (std::int64_t pl = p0; pl < p1; ++pl) {
    const std::int64_t n = pl / d.cb, cb = pl % d.cb, live = std::min(d.b, d.c - cb * d.b);
    const T* src = y + pl * d.s * d.b;
    T* dst = x + (n * d.c + cb * d.b) * d.s;
    for (std::int64_t j = 0; j < live; ++j)
      for (std::int64_t i = 0; i < d.s; ++i) dst[j * d.s + i] = src[i * d.b + j];
  }
}

/// The geometry from the NCHW-side shape and the block.
Blocking blocking(const Shape& nchw, std::int64_t b) {
  Blocking d{nchw[0], nchw[1], 1, b, (nchw[1] + b - 1) / b};
  for (std::size_t i = 2; i < nchw.size(); ++i) d.s *= nchw[i];
  return d;
}

void run_to_blocked(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Blocking d = blocking(in[0].shape(), detail::to_blocked_block(op));
  detail::dispatch_float(in[0].dtype(), "to_blocked", [&](auto z) {
    using T = decltype(z);
    detail::parallel_range(ctx, d.n * d.cb, 1, [&](std::int64_t b, std::int64_t e) {
      block_planes<T>(d, static_cast<const T*>(in[0].raw()), static_cast<T*>(out.raw()), b, e);
    });
  });
}

void run_from_blocked(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Blocking d = blocking(out.shape(), in[0].shape().back());
  detail::dispatch_float(in[0].dtype(), "from_blocked", [&](auto z) {
    using T = decltype(z);
    detail::parallel_range(ctx, d.n * d.cb, 1, [&](std::int64_t b, std::int64_t e) {
      unblock_planes<T>(d, static_cast<const T*>(in[0].raw()), static_cast<T*>(out.raw()), b, e);
    });
  });
}

void run_blocked_conv(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const auto& conv = dynamic_cast<const detail::BlockedConvOp&>(op);
  std::vector<TensorType> types;
  for (const auto& t : in) types.push_back(TensorType{t.dtype(), t.shape(), t.device()});
  const ConvProblem p = conv.problem(types);
  if (out.numel() == 0) return;
  const auto& e = conv.epilogue();
  const auto* bias = e.bias ? static_cast<const float*>(in[2].raw()) : nullptr;
  const auto* residual = e.residual ? static_cast<const float*>(in.back().raw()) : nullptr;
  CONVGRAPH_ISA_CALL(blocked_conv_run, p, static_cast<const float*>(in[0].raw()),
                     static_cast<const float*>(in[1].raw()), bias, residual, e.relu, static_cast<float*>(out.raw()),
                     static_cast<float*>(ctx.workspace), ctx);
}

void run_blocked_pool(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const detail::PoolParams& p = dynamic_cast<const detail::BlockedPoolOp&>(op).pool_params();
  // Internal axes right-aligned on the spatial ones; the unpooled leading spatial axes
  // (a 2-D pooling of a 3-D tensor) count as planes.
  const Shape &xs = in[0].shape(), &ys = out.shape();
  const int spatial = static_cast<int>(xs.size()) - 3;
  std::int64_t ins[3] = {1, 1, 1}, outs[3] = {1, 1, 1}, planes = xs[0] * xs[1];
  for (int a = 0; a < spatial; ++a) {
    const int internal = 3 - spatial + a;
    const auto i = static_cast<std::size_t>(2 + a);
    if (internal < 3 - p.dims) {
      planes *= xs[i];  // not pooled: the PoolParams have window 1 there
      continue;
    }
    ins[internal] = xs[i];
    outs[internal] = ys[i];
  }
  if (out.numel() == 0) return;
  CONVGRAPH_ISA_CALL(blocked_pool_run, p, planes, ins, outs, static_cast<const float*>(in[0].raw()),
                     static_cast<float*>(out.raw()), ctx);
}

}  // namespace

void register_cpu_blocked_kernels(KernelRegistry& r) {
  r.add("to_blocked", DeviceKind::cpu, {nullptr, run_to_blocked});
  r.add("from_blocked", DeviceKind::cpu, {nullptr, run_from_blocked});
  r.add("blocked_conv", DeviceKind::cpu, {nullptr, run_blocked_conv});
  r.add("blocked_pool", DeviceKind::cpu, {nullptr, run_blocked_pool});
}

}  // namespace convgraph
