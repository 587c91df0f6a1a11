// The per-channel loops of bias_add, its gradient and global average pooling (ops/
// bias_add.cpp, ops/pool.cpp) over (N, C, S) float tensors, compiled once per CPU level.
// backends/cpu/channel_kernels.cpp splits the work over the thread pool.
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/core/error.hpp"
#include "core/dtype_dispatch.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

namespace {

/// Sum of a run in double, over 16 independent partial sums (a single running sum would be
/// latency-bound and could not be vectorised without reordering).
template <class T>
double run_sum(const T* x, std::int64_t n) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(x[i + k]);
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  for (double a : acc) s += a;
  return s;
}

}  // namespace

void channel_mean_rows(DType t, const void* x, void* y, std::int64_t s, std::int64_t r0, std::int64_t r1) {
  detail::dispatch_float(t, "global_avg_pool", [&](auto z) {
    using T = decltype(z);
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    for (std::int64_t r = r0; r < r1; ++r) dst[r] = static_cast<T>(run_sum(src + r * s, s) / static_cast<double>(s));
  });
}

void channel_spread_rows(DType t, const void* gy, void* gx, std::int64_t s, std::int64_t r0, std::int64_t r1) {
  detail::dispatch_float(t, "global_avg_pool_grad", [&](auto z) {
    using T = decltype(z);
    const T* src = static_cast<const T*>(gy);
    T* dst = static_cast<T*>(gx);
    for (std::int64_t r = r0; r < r1; ++r) {
      const T v = static_cast<T>(src[r] / static_cast<T>(s));
      T* row = dst + r * s;
      for (std::int64_t i = 0; i < s; ++i) row[i] = v;
    }
  });
}

void bias_add_rows(DType t, const void* x, const void* b, void* y, std::int64_t c, std::int64_t s, std::int64_t r0,
                   std::int64_t r1) {
  detail::dispatch_float(t, "bias_add", [&](auto z) {
    using T = decltype(z);
    const T* src = static_cast<const T*>(x);
    const T* bias = static_cast<const T*>(b);
    T* dst = static_cast<T*>(y);
    if (s == 1) {  // rows of C channels: (N, C), e.g. a dense layer
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t i = 0; i < c; ++i) dst[r * c + i] = src[r * c + i] + bias[i];
      return;
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      const T v = bias[r % c];
      const T* in = src + r * s;
      T* out = dst + r * s;
      for (std::int64_t i = 0; i < s; ++i) out[i] = in[i] + v;
    }
  });
}

void bias_grad_channels(DType t, const void* gy, void* gb, std::int64_t n, std::int64_t c, std::int64_t s,
                        std::int64_t c0, std::int64_t c1) {
  detail::dispatch_float(t, "bias_add_grad", [&](auto z) {
    using T = decltype(z);
    const T* src = static_cast<const T*>(gy);
    T* dst = static_cast<T*>(gb);
    if (s == 1) {  // (N, C): accumulate whole rows, reading gy in order
      std::vector<double> acc(static_cast<std::size_t>(c1 - c0), 0.0);
      for (std::int64_t i = 0; i < n; ++i) {
        const T* row = src + i * c + c0;
        for (std::int64_t k = 0; k < c1 - c0; ++k) acc[static_cast<std::size_t>(k)] += static_cast<double>(row[k]);
      }
      for (std::int64_t k = c0; k < c1; ++k) dst[k] = static_cast<T>(acc[static_cast<std::size_t>(k - c0)]);
      return;
    }
    for (std::int64_t k = c0; k < c1; ++k) {
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) sum += run_sum(src + (i * c + k) * s, s);
      dst[k] = static_cast<T>(sum);
    }
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
