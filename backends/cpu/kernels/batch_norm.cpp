// The batch-norm loops (ops/batch_norm.cpp), compiled once per CPU level: per-plane sums
// (statistics, gradient sums) and a per-channel affine map (forward, dx). Both stream
// over memory; backends/cpu/batch_norm_kernels.cpp turns the sums into per-channel
// coefficients and splits the planes over the thread pool.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels_nn.hpp"
#include "convgraph/core/error.hpp"
#include "core/dtype_dispatch.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

namespace {

// Sums over explicit 32-byte vectors (GCC vector extensions, local to this level), two
// accumulators per sum to hide the add latency: each lane is its own sum, so no
// reassociation is needed (no -ffast-math), and the plane streams at memory speed.
template <class T>
void plane_sums(const T* x, const T* g, T shift, std::int64_t s, double* out) {
  typedef T V __attribute__((vector_size(32)));
  constexpr std::int64_t w = 32 / sizeof(T);
  const V k = V{} + shift;
  V a1 = {}, a2 = {}, b1 = {}, b2 = {};
  auto load = [](const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  };
  std::int64_t i = 0;
  if (g) {
    for (; i + 2 * w <= s; i += 2 * w) {
      const V u = load(x + i) - k, v = load(x + i + w) - k, gu = load(g + i), gv = load(g + i + w);
      a1 += gu;
      a2 += gu * u;
      b1 += gv;
      b2 += gv * v;
    }
  } else {
    for (; i + 2 * w <= s; i += 2 * w) {
      const V u = load(x + i) - k, v = load(x + i + w) - k;
      a1 += u;
      a2 += u * u;
      b1 += v;
      b2 += v * v;
    }
  }
  double s1 = 0, s2 = 0;
  for (std::int64_t j = 0; j < w; ++j) {
    s1 += static_cast<double>(a1[j]) + static_cast<double>(b1[j]);
    s2 += static_cast<double>(a2[j]) + static_cast<double>(b2[j]);
  }
  for (; i < s; ++i) {
    const T d = x[i] - shift;
    s1 += static_cast<double>(g ? g[i] : d);
    s2 += static_cast<double>(g ? g[i] * d : d * d);
  }
  out[0] = s1;
  out[1] = s2;
}

template <class T>
void plane_affine(const T* x, const T* g, T shift, T a, T b, T k, bool relu, T* y, std::int64_t s) {
  if (g)
    for (std::int64_t i = 0; i < s; ++i) y[i] = a * (x[i] - shift) + b * g[i] + k;
  else if (relu)  // relu's formula (ops/elementwise_table.hpp): NaN becomes 0 as there
    for (std::int64_t i = 0; i < s; ++i) {
      const T v = a * (x[i] - shift) + k;
      y[i] = v > T(0) ? v : T(0);
    }
  else
    for (std::int64_t i = 0; i < s; ++i) y[i] = a * (x[i] - shift) + k;
}

}  // namespace

void bn_plane_sums(const BnGeometry& geo, DType t, const void* x, const void* g, const double* shift, double* sums,
                   std::int64_t p0, std::int64_t p1) {
  detail::dispatch_float(t, "batch_norm", [&](auto z) {
    using T = decltype(z);
    for (std::int64_t p = p0; p < p1; ++p)
      plane_sums(static_cast<const T*>(x) + p * geo.s, g ? static_cast<const T*>(g) + p * geo.s : nullptr,
                 static_cast<T>(shift[p % geo.c]), geo.s, sums + 2 * p);
  });
}

void bn_plane_affine(const BnGeometry& geo, DType t, const void* x, const void* g, const double* shift, const double* a,
                     const double* b, const double* k, bool relu, void* y, std::int64_t p0, std::int64_t p1) {
  detail::dispatch_float(t, "batch_norm", [&](auto z) {
    using T = decltype(z);
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t c = p % geo.c;
      plane_affine(static_cast<const T*>(x) + p * geo.s, g ? static_cast<const T*>(g) + p * geo.s : nullptr,
                   static_cast<T>(shift[c]), static_cast<T>(a[c]), static_cast<T>(b ? b[c] : 0), static_cast<T>(k[c]), relu,
                   static_cast<T*>(y) + p * geo.s, geo.s);
    }
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
