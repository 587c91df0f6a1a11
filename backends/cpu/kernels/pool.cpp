// The pooling loops (ops/pool.cpp: max_pool2d, avg_pool2d, their gradients and
// max_pool2d_grad_grad), compiled once per CPU level. backends/cpu/pool_kernels.cpp splits
// the work over the thread pool and calls the active level's loop on each range.
#include <cstdint>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/core/error.hpp"
#include "ops/pool_internal.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

namespace {

using detail::PoolMode;
using detail::PoolParams;

template <class F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(std::int32_t{});
    case DType::int64: return f(std::int64_t{});
    default: throw TypeError(msg(op, ": no kernel for dtype ", dtype_name(t)));
  }
}

/// Input rows/columns [lo, hi) covered by output position o along one axis, and the
/// divisor the average uses there.
struct Span {
  std::int64_t lo, hi, count;
};
Span span(const PoolParams& p, int axis, std::int64_t o, std::int64_t n) {
  const std::int64_t start = o * p.stride[axis] - p.pad[axis];
  const std::int64_t end = start + p.window[axis];
  Span s{start > 0 ? start : 0, end < n ? end : n, 0};
  // With padding counted, the window is still clipped at the padded border (Theano).
  s.count = p.inc_pad ? (end < n + p.pad[axis] ? end : n + p.pad[axis]) - start : s.hi - s.lo;
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

void pool_rows(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, void* y, std::int64_t r0,
               std::int64_t r1) {
  dispatch_numeric(t, "pool2d", [&](auto z) {
    using T = decltype(z);
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    for (std::int64_t row = r0; row < r1; ++row) {
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
}

void pool_grad_planes(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, const void* gy, void* gx,
                      std::int64_t p0, std::int64_t p1) {
  dispatch_numeric(t, "pool2d_grad", [&](auto z) {
    using T = decltype(z);
    for (std::int64_t pl = p0; pl < p1; ++pl) {
      T* plane_g = static_cast<T*>(gx) + pl * g.h * g.w;
      const T* plane_x = static_cast<const T*>(x) + pl * g.h * g.w;
      const T* gyp = static_cast<const T*>(gy) + pl * g.oh * g.ow;
      for (std::int64_t oi = 0; oi < g.oh; ++oi) {
        const Span r = span(p, 0, oi, g.h);
        for (std::int64_t oj = 0; oj < g.ow; ++oj) {
          const Span c = span(p, 1, oj, g.w);
          const T v = gyp[oi * g.ow + oj];
          if (p.mode == PoolMode::max) {
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
}

void max_pool_gather_rows(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, const void* gsrc,
                          void* out, std::int64_t r0, std::int64_t r1) {
  dispatch_numeric(t, "max_pool2d_grad_grad", [&](auto z) {
    using T = decltype(z);
    const T* xs = static_cast<const T*>(x);
    const T* gs = static_cast<const T*>(gsrc);
    T* dst = static_cast<T*>(out);
    for (std::int64_t row = r0; row < r1; ++row) {
      const std::int64_t pl = row / g.oh, oi = row % g.oh;
      const Span r = span(p, 0, oi, g.h);
      for (std::int64_t oj = 0; oj < g.ow; ++oj) {
        const std::int64_t at = window_argmax(xs + pl * g.h * g.w, g.w, r, span(p, 1, oj, g.w));
        dst[row * g.ow + oj] = gs[pl * g.h * g.w + at];
      }
    }
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
