// CPU kernels of batch normalization (ops/batch_norm.cpp), KernelRegistry keys
// "batch_norm_stats", "batch_norm", "batch_norm_grad_sums" and "batch_norm_grad_x". The
// data passes are the per-level loops of backends/cpu/kernels/batch_norm.cpp; here the
// per-plane sums become per-channel statistics and coefficients, in double. Planes are
// summed in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels_nn.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/batch_norm_info.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

namespace {

using detail::BnInfo;

cpu::BnGeometry geometry(const Tensor& x) {
  cpu::BnGeometry g{x.shape()[0], x.shape()[1], 1};
  for (int i = 2; i < x.rank(); ++i) g.s *= x.shape()[static_cast<std::size_t>(i)];
  return g;
}

// About 32k elements per task.
std::int64_t plane_grain(const cpu::BnGeometry& g) { return std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(g.s, 1)); }

// where(h > 0, g, 0) for one plane, as the unfused where gives it (g's bits or +0; a NaN
// h is not > 0), with a bit mask instead of a branch that random signs mispredict.
template <class T, class U>
void relu_mask(const T* __restrict h, const U* __restrict g, U* __restrict out, std::int64_t s) {
  for (std::int64_t i = 0; i < s; ++i) out[i] = g[i] & (U(0) - static_cast<U>(h[i] > T(0)));
}

/// relu's gradient fused in (info.relu, the mask h the last input): a plane's masked
/// gradient, made in a per-task buffer that stays in cache and handed to the plane loop as
/// its own one-plane geometry. run(plane, gradient of that plane or nullptr when unmasked).
template <class Run>
void masked_planes(const cpu::BnGeometry& geo, const Tensor& g, const Tensor* h, std::int64_t p0, std::int64_t p1,
                   Run run) {
  if (!h) {
    run(p0, p1, g.raw());
    return;
  }
  const bool f64 = g.dtype() == DType::float64;
  const std::size_t es = f64 ? 8 : 4;
  std::vector<double> buf(static_cast<std::size_t>(geo.s));  // 8 bytes per element fits either dtype
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::size_t off = static_cast<std::size_t>(p * geo.s) * es;
    const auto* hp = static_cast<const unsigned char*>(h->raw()) + off;
    const auto* gp = static_cast<const unsigned char*>(g.raw()) + off;
    if (f64)
      relu_mask(reinterpret_cast<const double*>(hp), reinterpret_cast<const std::uint64_t*>(gp),
                reinterpret_cast<std::uint64_t*>(buf.data()), geo.s);
    else
      relu_mask(reinterpret_cast<const float*>(hp), reinterpret_cast<const std::uint32_t*>(gp),
                reinterpret_cast<std::uint32_t*>(buf.data()), geo.s);
    run(p, p + 1, static_cast<const void*>(buf.data()));
  }
}

/// Per-channel totals of the plane sums of (x, g) shifted by `shift` (see bn_plane_sums);
/// g masked by h > 0 when h is given.
std::vector<double> channel_sums(const cpu::BnGeometry& geo, const Tensor& x, const Tensor* g,
                                 const std::vector<double>& shift, const ExecContext& ctx, const Tensor* h = nullptr) {
  std::vector<double> planes(static_cast<std::size_t>(2 * geo.n * geo.c));
  detail::parallel_range(ctx, geo.n * geo.c, plane_grain(geo), [&](std::int64_t b, std::int64_t e) {
    if (!g) {
      CONVGRAPH_ISA_CALL(bn_plane_sums, geo, x.dtype(), x.raw(), nullptr, shift.data(), planes.data(), b, e);
      return;
    }
    masked_planes(geo, *g, h, b, e, [&](std::int64_t p0, std::int64_t p1, const void* gp) {
      if (gp == g->raw()) {
        CONVGRAPH_ISA_CALL(bn_plane_sums, geo, x.dtype(), x.raw(), gp, shift.data(), planes.data(), p0, p1);
        return;
      }
      // One plane: x and the sums at plane p0, its channel's shift, the masked gradient.
      const cpu::BnGeometry one{1, 1, geo.s};
      const auto* xp = static_cast<const unsigned char*>(x.raw()) + static_cast<std::size_t>(p0 * geo.s) * dtype_size(x.dtype());
      CONVGRAPH_ISA_CALL(bn_plane_sums, one, x.dtype(), xp, gp, shift.data() + p0 % geo.c, planes.data() + 2 * p0, 0, 1);
    });
  });
  std::vector<double> total(static_cast<std::size_t>(2 * geo.c), 0.0);
  for (std::int64_t p = 0; p < geo.n * geo.c; ++p)
    for (int k = 0; k < 2; ++k) total[static_cast<std::size_t>(2 * (p % geo.c) + k)] += planes[static_cast<std::size_t>(2 * p + k)];
  return total;
}

std::vector<double> read_row(const Tensor& t, std::int64_t row, std::int64_t c) {
  std::vector<double> v(static_cast<std::size_t>(c));
  for (std::int64_t i = 0; i < c; ++i) v[static_cast<std::size_t>(i)] = t.get(row * c + i);
  return v;
}

/// Mean and (biased) variance per channel: rows 0 and 1 of the stats table (training) or
/// the two vectors (inference) at inputs[at].
std::pair<std::vector<double>, std::vector<double>> statistics(const BnInfo& info, const std::vector<Tensor>& in,
                                                               std::size_t at, std::int64_t c) {
  if (info.train) return {read_row(in[at], 0, c), read_row(in[at], 1, c)};
  return {read_row(in[at], 0, c), read_row(in[at + 1], 0, c)};
}

void affine(const cpu::BnGeometry& geo, const Tensor& x, const Tensor* g, const std::vector<double>& shift,
            const std::vector<double>& a, const std::vector<double>* b, const std::vector<double>& k, bool relu,
            Tensor& y, const ExecContext& ctx, const Tensor* h = nullptr) {
  detail::parallel_range(ctx, geo.n * geo.c, plane_grain(geo), [&](std::int64_t p0, std::int64_t p1) {
    if (!g) {
      CONVGRAPH_ISA_CALL(bn_plane_affine, geo, x.dtype(), x.raw(), nullptr, shift.data(), a.data(),
                         b ? b->data() : nullptr, k.data(), relu, y.raw(), p0, p1);
      return;
    }
    masked_planes(geo, *g, h, p0, p1, [&](std::int64_t q0, std::int64_t q1, const void* gp) {
      if (gp == g->raw()) {
        CONVGRAPH_ISA_CALL(bn_plane_affine, geo, x.dtype(), x.raw(), gp, shift.data(), a.data(),
                           b ? b->data() : nullptr, k.data(), relu, y.raw(), q0, q1);
        return;
      }
      const cpu::BnGeometry one{1, 1, geo.s};
      const std::size_t off = static_cast<std::size_t>(q0 * geo.s) * dtype_size(x.dtype());
      const std::size_t c = static_cast<std::size_t>(q0 % geo.c);
      CONVGRAPH_ISA_CALL(bn_plane_affine, one, x.dtype(), static_cast<const unsigned char*>(x.raw()) + off, gp,
                         shift.data() + c, a.data() + c, b ? b->data() + c : nullptr, k.data() + c, relu,
                         static_cast<unsigned char*>(y.raw()) + off, 0, 1);
    });
  });
}

double batch_size(const cpu::BnGeometry& geo) { return static_cast<double>(geo.n * geo.s); }

void run_stats(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const Tensor& x = in[0];
  const cpu::BnGeometry geo = geometry(x);
  const double m = batch_size(geo);
  if (m < 2) throw ValueError(msg("batch_norm_stats: x of shape ", shape_to_string(x.shape()), " has fewer than 2 values per channel"));
  // Shifting by a sample of the channel keeps sum((x - K)^2) - sum(x - K)^2 / M accurate
  // when |mean| >> std.
  std::vector<double> shift(static_cast<std::size_t>(geo.c));
  for (std::int64_t c = 0; c < geo.c; ++c) shift[static_cast<std::size_t>(c)] = x.get(c * geo.s);
  const std::vector<double> sums = channel_sums(geo, x, nullptr, shift, ctx);
  for (std::int64_t c = 0; c < geo.c; ++c) {
    const auto uc = static_cast<std::size_t>(c);
    const double d = sums[2 * uc] / m;
    const double var = std::max(0.0, sums[2 * uc + 1] / m - d * d);
    out.set(c, shift[uc] + d);
    out.set(geo.c + c, var);
    out.set(2 * geo.c + c, var * m / (m - 1));
  }
}

void run_forward(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const BnInfo info = detail::bn_info(op);
  const cpu::BnGeometry geo = geometry(in[0]);
  const auto [mean, var] = statistics(info, in, 3, geo.c);
  std::vector<double> a(static_cast<std::size_t>(geo.c)), k(a.size());
  for (std::size_t c = 0; c < a.size(); ++c) {
    a[c] = in[1].get(static_cast<std::int64_t>(c)) / std::sqrt(var[c] + info.eps);
    k[c] = in[2].get(static_cast<std::int64_t>(c));
  }
  affine(geo, in[0], nullptr, mean, a, nullptr, k, info.relu, out, ctx);
}

void run_grad_sums(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const BnInfo info = detail::bn_info(op);
  const cpu::BnGeometry geo = geometry(in[0]);
  const auto [mean, var] = statistics(info, in, 2, geo.c);
  const std::vector<double> sums = channel_sums(geo, in[0], &in[1], mean, ctx, info.relu ? &in.back() : nullptr);
  for (std::int64_t c = 0; c < geo.c; ++c) {
    const auto uc = static_cast<std::size_t>(c);
    out.set(c, sums[2 * uc]);                                            // dbeta = sum(gy)
    out.set(geo.c + c, sums[2 * uc + 1] / std::sqrt(var[uc] + info.eps));  // dgamma = sum(gy xhat)
  }
}

// dx = A gy + B (x - mean) + K per channel: A = gamma / sigma, B = -A dgamma / (sigma M),
// K = -A dbeta / M (the training formula written out per element).
void run_grad_x(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const BnInfo info = detail::bn_info(op);
  const cpu::BnGeometry geo = geometry(in[0]);
  const auto [mean, var] = statistics(info, in, 3, geo.c);
  const double m = batch_size(geo);
  std::vector<double> a(static_cast<std::size_t>(geo.c)), bx(a.size()), k(a.size());
  for (std::size_t c = 0; c < a.size(); ++c) {
    const auto ic = static_cast<std::int64_t>(c);
    const double rstd = 1 / std::sqrt(var[c] + info.eps);
    a[c] = in[2].get(ic) * rstd;
    bx[c] = -a[c] * in[4].get(geo.c + ic) * rstd / m;
    k[c] = -a[c] * in[4].get(ic) / m;
  }
  // bn_plane_affine's a is the coefficient of (x - mean), its b that of gy.
  affine(geo, in[0], &in[1], mean, bx, &a, k, false, out, ctx, info.relu ? &in.back() : nullptr);
}

}  // namespace

void register_cpu_batch_norm_kernels(KernelRegistry& r) {
  r.add("batch_norm_stats", DeviceKind::cpu, {nullptr, run_stats});
  r.add("batch_norm", DeviceKind::cpu, {nullptr, run_forward});
  r.add("batch_norm_grad_sums", DeviceKind::cpu, {nullptr, run_grad_sums});
  r.add("batch_norm_grad_x", DeviceKind::cpu, {nullptr, run_grad_x});
}

}  // namespace convgraph
