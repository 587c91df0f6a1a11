// The oracle. Every loop mirrors the definition in docs/DESIGN.md ("Semantics"):
//   y[n, k, o] = sum_c sum_t x_pad[n, g*Cg + c, o*s + t*d] * w[k, c, flip ? kern-1-t : t]
// with g = k / Kg. grad_inputs and grad_weights are written as gathers of exactly the same
// terms, so each output element is one double sum and nothing is accumulated into memory.
// Speed is not a goal; obviousness is. Only the outermost loop is split across threads.
#include "convgraph/backends/cpu/reference.hpp"

#include <array>
#include <cstdint>

#include "convgraph/core/thread_pool.hpp"

namespace convgraph {
namespace {

using i64 = std::int64_t;

/// The problem's geometry on exactly three axes: axes past ndim get size 1, stride 1,
/// dilation 1 and no padding, whatever the caller left in them.
struct Geo {
  std::array<i64, 3> in{}, ker{}, out{}, s{}, d{}, pad{};
  bool flip = false;
  i64 N = 0, C = 0, K = 0, Cg = 0, Kg = 0;

  explicit Geo(const ConvProblem& p) : flip(p.flip), N(p.N), C(p.C), K(p.K) {
    for (std::size_t a = 0; a < 3; ++a) {
      const bool used = static_cast<int>(a) < p.ndim;
      in[a] = used ? p.in[a] : 1;
      ker[a] = used ? p.kernel[a] : 1;
      out[a] = used ? p.out[a] : 1;
      s[a] = used ? p.stride[a] : 1;
      d[a] = used ? p.dilation[a] : 1;
      pad[a] = used ? p.pad_pre[a] : 0;
    }
    Cg = C / p.G;
    Kg = K / p.G;
  }
  // The loops' index helpers are always inlined: the reference is nearly every test's
  // oracle, and the sanitized build's -O1 (its checks making them too big to inline) called
  // them out of line, 60% of the reference's time there.
  [[gnu::always_inline]] i64 x_index(i64 n, i64 c, i64 i0, i64 i1, i64 i2) const {
    return (((n * C + c) * in[0] + i0) * in[1] + i1) * in[2] + i2;
  }
  [[gnu::always_inline]] i64 y_index(i64 n, i64 k, i64 o0, i64 o1, i64 o2) const {
    return (((n * K + k) * out[0] + o0) * out[1] + o1) * out[2] + o2;
  }
  /// Filter element for tap (t0, t1, t2) of the *unflipped* sum: flipping reads the
  /// mirrored filter position.
  [[gnu::always_inline]] i64 w_index(i64 k, i64 c, i64 t0, i64 t1, i64 t2) const {
    if (flip) {
      t0 = ker[0] - 1 - t0;
      t1 = ker[1] - 1 - t1;
      t2 = ker[2] - 1 - t2;
    }
    return (((k * Cg + c) * ker[0] + t0) * ker[1] + t1) * ker[2] + t2;
  }
  /// Input position touched by output o and tap t on axis a (may lie in the padding).
  [[gnu::always_inline]] i64 in_pos(std::size_t a, i64 o, i64 t) const { return o * s[a] - pad[a] + t * d[a]; }
  [[gnu::always_inline]] bool in_range(std::size_t a, i64 i) const { return i >= 0 && i < in[a]; }
  /// The output position whose tap t reads input position i on axis a, or -1 if none.
  [[gnu::always_inline]] i64 out_pos(std::size_t a, i64 i, i64 t) const {
    const i64 num = i + pad[a] - t * d[a];
    if (num < 0 || num % s[a] != 0) return -1;
    const i64 o = num / s[a];
    return o < out[a] ? o : -1;
  }
};

template <class T>
void forward(const Geo& g, const T* x, const T* w, T* y, i64 nk_begin, i64 nk_end) {
  for (i64 nk = nk_begin; nk < nk_end; ++nk) {
    const i64 n = nk / g.K, k = nk % g.K, grp = k / g.Kg;
    for (i64 o0 = 0; o0 < g.out[0]; ++o0)
      for (i64 o1 = 0; o1 < g.out[1]; ++o1)
        for (i64 o2 = 0; o2 < g.out[2]; ++o2) {
          double acc = 0.0;
          for (i64 c = 0; c < g.Cg; ++c)
            for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
              for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
                for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
                  const i64 i0 = g.in_pos(0, o0, t0), i1 = g.in_pos(1, o1, t1),
                            i2 = g.in_pos(2, o2, t2);
                  if (!g.in_range(0, i0) || !g.in_range(1, i1) || !g.in_range(2, i2)) continue;
                  acc += static_cast<double>(x[g.x_index(n, grp * g.Cg + c, i0, i1, i2)]) *
                         static_cast<double>(w[g.w_index(k, c, t0, t1, t2)]);
                }
          y[g.y_index(n, k, o0, o1, o2)] = static_cast<T>(acc);
        }
  }
}

template <class T>
void grad_inputs(const Geo& g, T* dx, const T* w, const T* dy, i64 nc_begin, i64 nc_end) {
  for (i64 nc = nc_begin; nc < nc_end; ++nc) {
    const i64 n = nc / g.C, ci = nc % g.C, grp = ci / g.Cg, c = ci % g.Cg;
    for (i64 i0 = 0; i0 < g.in[0]; ++i0)
      for (i64 i1 = 0; i1 < g.in[1]; ++i1)
        for (i64 i2 = 0; i2 < g.in[2]; ++i2) {
          double acc = 0.0;
          for (i64 kk = 0; kk < g.Kg; ++kk) {
            const i64 k = grp * g.Kg + kk;
            for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
              for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
                for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
                  const i64 o0 = g.out_pos(0, i0, t0), o1 = g.out_pos(1, i1, t1),
                            o2 = g.out_pos(2, i2, t2);
                  if (o0 < 0 || o1 < 0 || o2 < 0) continue;
                  acc += static_cast<double>(dy[g.y_index(n, k, o0, o1, o2)]) *
                         static_cast<double>(w[g.w_index(k, c, t0, t1, t2)]);
                }
          }
          dx[g.x_index(n, ci, i0, i1, i2)] = static_cast<T>(acc);
        }
  }
}

template <class T>
void grad_weights(const Geo& g, const T* x, T* dw, const T* dy, i64 kc_begin, i64 kc_end) {
  for (i64 kc = kc_begin; kc < kc_end; ++kc) {
    const i64 k = kc / g.Cg, c = kc % g.Cg, grp = k / g.Kg;
    for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
      for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
        for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
          double acc = 0.0;
          for (i64 n = 0; n < g.N; ++n)
            for (i64 o0 = 0; o0 < g.out[0]; ++o0)
              for (i64 o1 = 0; o1 < g.out[1]; ++o1)
                for (i64 o2 = 0; o2 < g.out[2]; ++o2) {
                  const i64 i0 = g.in_pos(0, o0, t0), i1 = g.in_pos(1, o1, t1),
                            i2 = g.in_pos(2, o2, t2);
                  if (!g.in_range(0, i0) || !g.in_range(1, i1) || !g.in_range(2, i2)) continue;
                  acc += static_cast<double>(x[g.x_index(n, grp * g.Cg + c, i0, i1, i2)]) *
                         static_cast<double>(dy[g.y_index(n, k, o0, o1, o2)]);
                }
          // w_index maps the unflipped tap to its storage position, so flipping is exact.
          dw[g.w_index(k, c, t0, t1, t2)] = static_cast<T>(acc);
        }
  }
}

template <class T>
void run_typed(const ConvProblem& p, const ConvTensors& t) {
  const Geo g(p);
  auto* x = static_cast<T*>(t.x);
  auto* w = static_cast<T*>(t.w);
  auto* y = static_cast<T*>(t.y);
  // Each output element is computed by exactly one task, so the split cannot change results.
  ThreadPool& pool = ThreadPool::default_pool();
  switch (p.direction) {
    case ConvDirection::forward:
      pool.parallel_for(g.N * g.K, [&](i64 b, i64 e) { forward<T>(g, x, w, y, b, e); });
      break;
    case ConvDirection::grad_inputs:
      pool.parallel_for(g.N * g.C, [&](i64 b, i64 e) { grad_inputs<T>(g, x, w, y, b, e); });
      break;
    case ConvDirection::grad_weights:
      pool.parallel_for(g.K * g.Cg, [&](i64 b, i64 e) { grad_weights<T>(g, x, w, y, b, e); });
      break;
  }
}

class ReferenceAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.reference"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_reference"}; }
  Status applicable(const ConvProblem& p) const override {
    if (p.dtype != DType::float32 && p.dtype != DType::float64)
      return Status::no(msg("cpu.reference handles float32 and float64 storage, not ",
                            dtype_name(p.dtype)));
    return Status::ok();
  }
  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext&) const override {
    reference_conv(p, t);
  }
};

}  // namespace

void reference_conv(const ConvProblem& p, const ConvTensors& t) {
  if (p.ndim < 1 || p.ndim > 3)
    throw ValueError(msg("reference_conv: ndim must be 1, 2 or 3, got ", p.ndim));
  if (p.G < 1 || p.C % p.G != 0 || p.K % p.G != 0)
    throw ShapeError(msg("reference_conv: channels C=", p.C, " and K=", p.K,
                         " must be divisible by groups G=", p.G));
  if (t.x == nullptr || t.w == nullptr || t.y == nullptr)
    throw ValueError(msg("reference_conv: null tensor pointer for ", p.key()));
  switch (p.dtype) {
    case DType::float32: run_typed<float>(p, t); return;
    case DType::float64: run_typed<double>(p, t); return;
    default:
      throw TypeError(msg("reference_conv: storage dtype must be float32 or float64, got ",
                          dtype_name(p.dtype), " (", p.key(), ")"));
  }
}

std::shared_ptr<const ConvAlgorithm> make_cpu_reference_algorithm() {
  return std::make_shared<ReferenceAlgorithm>();
}

}  // namespace convgraph
