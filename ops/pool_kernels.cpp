// Pooling parameter checks, output-size rules (Theano's Pool.out_shape) and CPU kernels.
#include <algorithm>
#include <cstring>

#include "ops/kernel_util.hpp"
#include "ops/pool_internal.hpp"

namespace convgraph::detail {

namespace {

std::string pair_text(const std::int64_t v[2]) { return msg("(", v[0], ", ", v[1], ")"); }

template <class F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::float32:
      f(float{});
      return;
    case DType::float64:
      f(double{});
      return;
    case DType::int32:
      f(std::int32_t{});
      return;
    case DType::int64:
      f(std::int64_t{});
      return;
    default:
      throw TypeError(msg(op, ": no kernel for dtype ", dtype_name(t)));
  }
}

/// Concrete geometry of one call: planes of H x W pooled to OH x OW.
struct Geometry {
  std::int64_t planes, h, w, oh, ow;
  Geometry(const PoolParams& p, const Shape& x) {
    const std::size_t r = x.size();
    h = x[r - 2];
    w = x[r - 1];
    oh = p.out_size(0, h);
    ow = p.out_size(1, w);
    planes = h * w != 0 ? numel(x) / (h * w) : 0;
  }
};

/// Input rows/columns [lo, hi) covered by output position o along one axis, and the
/// divisor the average uses there.
struct Span {
  std::int64_t lo, hi, count;
};
Span span(const PoolParams& p, int axis, std::int64_t o, std::int64_t n) {
  const std::int64_t start = o * p.stride[axis] - p.pad[axis];
  const std::int64_t end = start + p.window[axis];
  Span s{std::max<std::int64_t>(start, 0), std::min(end, n), 0};
  // With padding counted, the window is still clipped at the padded border (Theano).
  s.count = p.inc_pad ? std::min(end, n + p.pad[axis]) - start : s.hi - s.lo;
  return s;
}

/// Flat index (within the plane) of the first maximum of the window; NaN wins.
template <class T>
std::int64_t window_argmax(const T* plane, std::int64_t w, const Span& r, const Span& c) {
  std::int64_t best = r.lo * w + c.lo;
  T m = plane[best];
  for (std::int64_t i = r.lo; i < r.hi; ++i)
    for (std::int64_t j = c.lo; j < c.hi; ++j) {
      const T v = plane[i * w + j];
      if (m == m && !(v <= m)) {
        m = v;
        best = i * w + j;
      }
    }
  return best;
}

}  // namespace

PoolParams PoolParams::from(const char* op, const PoolOptions& o, PoolMode mode) {
  auto need_two = [&](const std::vector<std::int64_t>& v, const char* what) {
    if (v.size() != 2)
      throw ValueError(msg(op, ": ", what, " ", ints_to_string(v), " must have 2 entries (rows, columns)"));
  };
  need_two(o.window, "window");
  need_two(o.padding, "padding");
  if (!o.stride.empty()) need_two(o.stride, "stride");
  PoolParams p;
  p.mode = mode;
  p.ignore_border = o.ignore_border;
  p.inc_pad = o.include_padding_in_average;
  for (int a = 0; a < 2; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    p.window[a] = o.window[ua];
    p.stride[a] = o.stride.empty() ? o.window[ua] : o.stride[ua];
    p.pad[a] = o.padding[ua];
    if (p.window[a] < 1) throw ValueError(msg(op, ": window ", ints_to_string(o.window), " must be >= 1"));
    if (p.stride[a] < 1) throw ValueError(msg(op, ": stride ", ints_to_string(o.stride), " must be >= 1"));
    if (p.pad[a] < 0) throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " must be >= 0"));
    if (p.pad[a] >= p.window[a])
      throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " must be smaller than the window ",
                           ints_to_string(o.window), " (a window would see only padding)"));
  }
  if (!p.ignore_border && (p.pad[0] || p.pad[1]))
    throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " requires ignore_border=true"));
  return p;
}

std::string PoolParams::text() const {
  return msg("window=", pair_text(window), ",stride=", pair_text(stride), ",padding=", pair_text(pad),
             ",ignore_border=", ignore_border, ",include_padding_in_average=", inc_pad);
}

std::int64_t PoolParams::out_size(int a, std::int64_t n) const {
  if (n < 0) return kUnknown;
  const std::int64_t w = window[a], s = stride[a];
  if (ignore_border) {
    const std::int64_t span = n + 2 * pad[a] - w;
    return span < 0 ? 0 : span / s + 1;
  }
  // Partial windows at the end are kept (no padding in this mode).
  if (n == 0) return 0;
  if (s >= w) return (n - 1) / s + 1;
  const std::int64_t extra = n - 1 - w + s;
  return (extra < 0 ? 0 : extra / s) + 1;
}

TensorType PoolParams::output_type(const std::string& op, const TensorType& x) const {
  if (x.rank() < 2)
    throw ShapeError(msg(op, ": input must have rank >= 2 (..., rows, columns), got shape ", shape_to_string(x.shape)));
  if (mode == PoolMode::max)
    check_dtype(op, "input", x.dtype, {DType::float32, DType::float64, DType::int32, DType::int64});
  else
    check_dtype(op, "input", x.dtype, {DType::float32, DType::float64});
  TensorType out = x;
  for (int a = 0; a < 2; ++a) {
    const std::size_t i = x.shape.size() - 2 + static_cast<std::size_t>(a);
    const std::int64_t o = out_size(a, x.shape[i]);
    if (o == 0)
      throw ShapeError(msg(op, ": input of shape ", shape_to_string(x.shape), " is too small for window ",
                           pair_text(window), ", stride ", pair_text(stride), ", padding ", pair_text(pad),
                           " (output length 0 along axis ", i, ")"));
    out.shape[i] = o;
  }
  return out;
}

void check_pool_gradient(const std::string& op, const PoolParams& p, const TensorType& x, const TensorType& g,
                         const char* what) {
  const TensorType y = p.output_type(op, x);
  bool ok = g.dtype == x.dtype && g.rank() == y.rank();
  for (std::size_t i = 0; ok && i < y.shape.size(); ++i) ok = dims_compatible(g.shape[i], y.shape[i]);
  if (!ok)
    throw ShapeError(msg(op, ": ", what, " ", g.to_string(), " does not match the pooled output ", y.to_string(),
                         " of the input ", x.to_string()));
}

TensorType MaxPoolGradGradOp::infer(const std::vector<TensorType>& in) const {
  check_arity(*this, in.size(), 2);
  bool ok = in[0].dtype == in[1].dtype && in[0].rank() == in[1].rank();
  for (std::size_t i = 0; ok && i < in[0].shape.size(); ++i) ok = dims_compatible(in[0].shape[i], in[1].shape[i]);
  if (!ok)
    throw ShapeError(msg(name(), ": gradient ", in[1].to_string(), " does not match the input ", in[0].to_string()));
  return p_.output_type(name(), in[0]);
}

void pool_forward(const PoolParams& p, const Tensor& x, Tensor& y, const ExecContext& ctx) {
  const Geometry g(p, x.shape());
  dispatch_numeric(x.dtype(), "pool2d", [&](auto z) {
    using T = decltype(z);
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    parallel_range(ctx, g.planes * g.oh, std::max<std::int64_t>(1, 1024 / std::max<std::int64_t>(g.ow, 1)),
                   [&](std::int64_t b, std::int64_t e) {
                     for (std::int64_t row = b; row < e; ++row) {
                       const std::int64_t pl = row / g.oh, oi = row % g.oh;
                       const T* plane = src + pl * g.h * g.w;
                       const Span r = span(p, 0, oi, g.h);
                       for (std::int64_t oj = 0; oj < g.ow; ++oj) {
                         const Span c = span(p, 1, oj, g.w);
                         T& out = dst[row * g.ow + oj];
                         if (p.mode == PoolMode::max) {
                           out = plane[window_argmax(plane, g.w, r, c)];
                         } else {
                           double s = 0;
                           for (std::int64_t i = r.lo; i < r.hi; ++i)
                             for (std::int64_t j = c.lo; j < c.hi; ++j) s += static_cast<double>(plane[i * g.w + j]);
                           out = static_cast<T>(s / static_cast<double>(r.count * c.count));
                         }
                       }
                     }
                   });
  });
}

void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& gy, Tensor& gx, const ExecContext& ctx) {
  const Geometry g(p, x.shape());
  dispatch_numeric(gy.dtype(), "pool2d_grad", [&](auto z) {
    using T = decltype(z);
    const T* gin = gy.data<T>();
    T* gout = gx.data<T>();
    std::fill(gout, gout + gx.numel(), T(0));
    // One plane per task: overlapping windows accumulate into the same plane serially.
    parallel_range(ctx, g.planes, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t pl = b; pl < e; ++pl) {
        T* plane_g = gout + pl * g.h * g.w;
        const T* gyp = gin + pl * g.oh * g.ow;
        for (std::int64_t oi = 0; oi < g.oh; ++oi) {
          const Span r = span(p, 0, oi, g.h);
          for (std::int64_t oj = 0; oj < g.ow; ++oj) {
            const Span c = span(p, 1, oj, g.w);
            const T v = gyp[oi * g.ow + oj];
            if (p.mode == PoolMode::max) {
              const T* plane_x = x.data<T>() + pl * g.h * g.w;
              plane_g[window_argmax(plane_x, g.w, r, c)] += v;
            } else {
              const T share = static_cast<T>(v / static_cast<T>(r.count * c.count));
              for (std::int64_t i = r.lo; i < r.hi; ++i)
                for (std::int64_t j = c.lo; j < c.hi; ++j) plane_g[i * g.w + j] += share;
            }
          }
        }
      }
    });
  });
}

void max_pool_gather(const PoolParams& p, const Tensor& x, const Tensor& gsrc, Tensor& out, const ExecContext& ctx) {
  const Geometry g(p, x.shape());
  dispatch_numeric(x.dtype(), "max_pool2d_grad_grad", [&](auto z) {
    using T = decltype(z);
    const T* xs = x.data<T>();
    const T* gs = gsrc.data<T>();
    T* dst = out.data<T>();
    parallel_range(ctx, g.planes * g.oh, std::max<std::int64_t>(1, 1024 / std::max<std::int64_t>(g.ow, 1)),
                   [&](std::int64_t b, std::int64_t e) {
                     for (std::int64_t row = b; row < e; ++row) {
                       const std::int64_t pl = row / g.oh, oi = row % g.oh;
                       const Span r = span(p, 0, oi, g.h);
                       for (std::int64_t oj = 0; oj < g.ow; ++oj) {
                         const std::int64_t at = window_argmax(xs + pl * g.h * g.w, g.w, r, span(p, 1, oj, g.w));
                         dst[row * g.ow + oj] = gs[pl * g.h * g.w + at];
                       }
                     }
                   });
  });
}

}  // namespace convgraph::detail
