// CPU kernels of the softmax family (ops/softmax.cpp): KernelRegistry keys "softmax",
// "softmax_grad", "take_class" and "scatter_class".
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "core/dtype_dispatch.hpp"
#include "ops/kernel_util.hpp"
#include "ops/softmax_info.hpp"

namespace convgraph {

namespace {

constexpr std::int64_t kRowGrain = 1 << 14;  // elements per parallel task

/// Runs fn(row_begin, row_end) over the rows (all axes but the last) of `t`.
template <class F>
void for_rows(const Tensor& t, const ExecContext& ctx, F&& fn) {
  const std::int64_t n = t.rank() ? t.shape().back() : 1;
  if (n == 0) return;
  const std::int64_t rows = t.numel() / n;
  detail::parallel_range(ctx, rows, std::max<std::int64_t>(1, kRowGrain / n), fn);
}

/// Reads the class index of row r, checking its range.
template <class I>
std::int64_t class_of(const I* idx, std::int64_t r, std::int64_t n, const char* op) {
  const auto c = static_cast<std::int64_t>(idx[r]);
  if (c < 0 || c >= n)
    throw ValueError(msg(op, ": class index ", c, " at position ", r, " is out of range for ", n, " classes"));
  return c;
}

template <class F>
void dispatch_index(DType t, F&& f) {
  if (t == DType::int32)
    f(std::int32_t{});
  else
    f(std::int64_t{});
}

void run_softmax(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const bool is_log = detail::softmax_is_log(op);
  detail::dispatch_float(in[0].dtype(), "softmax", [&](auto z) {
    using T = decltype(z);
    const T* x = in[0].data<T>();
    T* y = out.data<T>();
    const std::int64_t n = in[0].shape().back();
    for_rows(in[0], ctx, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        // Subtracting the row maximum keeps exp() from overflowing.
        T m = xr[0];
        for (std::int64_t j = 1; j < n; ++j) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const T e = std::exp(xr[j] - m);
          s += e;
          if (!is_log) yr[j] = e;
        }
        if (is_log) {
          // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round away log(s).
          const T ls = static_cast<T>(std::log(s));
          for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
        } else {
          const T inv = static_cast<T>(1.0 / s);
          for (std::int64_t j = 0; j < n; ++j) yr[j] *= inv;
        }
      }
    });
  });
}

void run_softmax_grad(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const bool is_log = detail::softmax_is_log(op);
  detail::dispatch_float(in[0].dtype(), op.name().c_str(), [&](auto z) {
    using T = decltype(z);
    const T* gy = in[0].data<T>();
    const T* y = in[1].data<T>();
    T* gx = out.data<T>();
    const std::int64_t n = in[0].shape().back();
    for_rows(in[0], ctx, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T *g = gy + r * n, *yr = y + r * n;
        T* o = gx + r * n;
        double s = 0;
        if (is_log) {
          for (std::int64_t j = 0; j < n; ++j) s += g[j];
          for (std::int64_t j = 0; j < n; ++j) o[j] = g[j] - std::exp(yr[j]) * static_cast<T>(s);
        } else {
          for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j]) * yr[j];
          for (std::int64_t j = 0; j < n; ++j) o[j] = yr[j] * (g[j] - static_cast<T>(s));
        }
      }
    });
  });
}

void run_take_class(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const std::int64_t n = in[0].shape().back(), rows = out.numel();
  detail::dispatch_float(in[0].dtype(), "take_class", [&](auto z) {
    using T = decltype(z);
    dispatch_index(in[1].dtype(), [&](auto iz) {
      using I = decltype(iz);
      const T* p = in[0].data<T>();
      const I* idx = in[1].data<I>();
      T* o = out.data<T>();
      for (std::int64_t r = 0; r < rows; ++r) o[r] = p[r * n + class_of(idx, r, n, "take_class")];
    });
  });
}

void run_scatter_class(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const std::int64_t n = out.shape().back(), rows = in[0].numel();
  detail::dispatch_float(out.dtype(), "scatter_class", [&](auto z) {
    using T = decltype(z);
    dispatch_index(in[1].dtype(), [&](auto iz) {
      using I = decltype(iz);
      const T* g = in[0].data<T>();
      const I* idx = in[1].data<I>();
      T* o = out.data<T>();
      std::fill(o, o + out.numel(), T(0));
      for (std::int64_t r = 0; r < rows; ++r) o[r * n + class_of(idx, r, n, "scatter_class")] = g[r];
    });
  });
}

}  // namespace

void register_cpu_softmax_kernels(KernelRegistry& r) {
  r.add("softmax", DeviceKind::cpu, {nullptr, run_softmax});
  r.add("softmax_grad", DeviceKind::cpu, {nullptr, run_softmax_grad});
  r.add("take_class", DeviceKind::cpu, {nullptr, run_take_class});
  r.add("scatter_class", DeviceKind::cpu, {nullptr, run_scatter_class});
}

}  // namespace convgraph
