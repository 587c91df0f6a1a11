#pragma once
/// The per-element arithmetic of the CUDA backend's own kernels, as host+device inline
/// functions over plain structs. The __global__ kernels (tensor_kernels.cu,
/// conv_corrmm.cu, conv_fft.cu, and for the DSL ops reduce.cu, softmax.cu and the cast
/// of elementwise.cu) are loops around these, and GPU-free tests
/// (tests/cuda/test_cuda_emulation.cpp, test_cuda_op_math.cpp) run the very same
/// functions on the host, in every build, and compare them with the CPU kernels.
/// C++17 and no CUDA header, so nvcc, g++ and the tests all include it.
///
/// Spatial geometry always has 3 axes; unused axes have extent 1, stride 1, dilation 1
/// and padding 0, so one code path serves 1D, 2D and 3D.
#include <cmath>
#include <cstdint>
#include <type_traits>
#if defined(__CUDACC__)
#include <cuda/std/limits>
#define CG_HD __host__ __device__ __forceinline__
#else
#include <limits>
#define CG_HD inline
#endif

namespace convgraph::cuda::kernels {

#if defined(__CUDACC__)
namespace lim = ::cuda::std;  // numeric_limits usable in device code
#else
namespace lim = ::std;
#endif

// ---- affine gather (tensor_kernels.cu) -----------------------------------------------

/// dst[b, t] = scale * src[b, s] with, per axis a,
///   s_a = (t_a * mul_a + add_a) / div_a   when the division is exact and 0 <= s_a < src_a,
/// and dst[b, t] = 0 otherwise: padding, cropping, dilating and flipping in one kernel.
/// `batch` counts the leading (N*C or K*C/G) slices.
struct GatherSpec {
  long long batch = 1;
  long long dst[3] = {1, 1, 1};
  long long src[3] = {1, 1, 1};
  long long mul[3] = {1, 1, 1};
  long long add[3] = {0, 0, 0};
  long long div[3] = {1, 1, 1};
};

CG_HD long long gather_total(const GatherSpec& s) { return s.batch * s.dst[0] * s.dst[1] * s.dst[2]; }

/// Offset in src that destination element i reads, or -1 for a zero.
CG_HD long long gather_source(const GatherSpec& s, long long i) {
  long long t[3];
  t[2] = i % s.dst[2];
  i /= s.dst[2];
  t[1] = i % s.dst[1];
  i /= s.dst[1];
  t[0] = i % s.dst[0];
  long long off = i / s.dst[0];  // batch index
  for (int a = 0; a < 3; ++a) {
    const long long num = t[a] * s.mul[a] + s.add[a];
    if (num < 0) return -1;
    const long long q = num / s.div[a];
    if (q * s.div[a] != num || q >= s.src[a]) return -1;
    off = off * s.src[a] + q;
  }
  return off;
}

// ---- im2col / col2im (conv_corrmm.cu) ------------------------------------------------

/// One sample's im2col geometry: col has channels * prod(kernel) rows and prod(out)
/// columns; row (c, k0, k1, k2) reads input offset (flip ? K - 1 - k : k) * dilation, so
/// multiplying by the filter as stored gives a true convolution when `flip`.
struct ColGeometry {
  long long channels = 1;
  long long in[3] = {1, 1, 1};
  long long kernel[3] = {1, 1, 1};
  long long out[3] = {1, 1, 1};
  long long stride[3] = {1, 1, 1};
  long long dilation[3] = {1, 1, 1};
  long long pad[3] = {0, 0, 0};  ///< padding before; padding after is implied by `out`
  bool flip = false;
};

CG_HD long long col_rows(const ColGeometry& g) { return g.channels * g.kernel[0] * g.kernel[1] * g.kernel[2]; }
CG_HD long long col_cols(const ColGeometry& g) { return g.out[0] * g.out[1] * g.out[2]; }
CG_HD long long image_size(const ColGeometry& g) { return g.channels * g.in[0] * g.in[1] * g.in[2]; }

/// Offset in x that col element i = (row, column) reads, or -1 for padding.
CG_HD long long im2col_source(const ColGeometry& g, long long i) {
  const long long P = col_cols(g);
  long long q = i % P;
  long long r = i / P;
  long long o[3], k[3];
  o[2] = q % g.out[2];
  q /= g.out[2];
  o[1] = q % g.out[1];
  o[0] = q / g.out[1];
  k[2] = r % g.kernel[2];
  r /= g.kernel[2];
  k[1] = r % g.kernel[1];
  r /= g.kernel[1];
  k[0] = r % g.kernel[0];
  long long off = r / g.kernel[0];  // channel
  for (int a = 0; a < 3; ++a) {
    const long long kk = g.flip ? g.kernel[a] - 1 - k[a] : k[a];
    const long long pos = o[a] * g.stride[a] - g.pad[a] + kk * g.dilation[a];
    if (pos < 0 || pos >= g.in[a]) return -1;
    off = off * g.in[a] + pos;
  }
  return off;
}

/// Input element idx of x: the sum of the col entries im2col copies it to. A gather per
/// input element, so col2im needs no atomics and is deterministic.
template <class T>
CG_HD T col2im_value(const T* col, const ColGeometry& g, long long idx) {
  const long long P = col_cols(g);
  const long long inner = g.in[0] * g.in[1] * g.in[2];
  long long rest = idx % inner;
  const long long c = idx / inner;
  long long pos[3];
  pos[2] = rest % g.in[2];
  rest /= g.in[2];
  pos[1] = rest % g.in[1];
  pos[0] = rest / g.in[1];
  T acc = T(0);
  for (long long k0 = 0; k0 < g.kernel[0]; ++k0) {
    const long long n0 = pos[0] + g.pad[0] - (g.flip ? g.kernel[0] - 1 - k0 : k0) * g.dilation[0];
    if (n0 < 0 || n0 % g.stride[0] != 0 || n0 / g.stride[0] >= g.out[0]) continue;
    for (long long k1 = 0; k1 < g.kernel[1]; ++k1) {
      const long long n1 = pos[1] + g.pad[1] - (g.flip ? g.kernel[1] - 1 - k1 : k1) * g.dilation[1];
      if (n1 < 0 || n1 % g.stride[1] != 0 || n1 / g.stride[1] >= g.out[1]) continue;
      for (long long k2 = 0; k2 < g.kernel[2]; ++k2) {
        const long long n2 = pos[2] + g.pad[2] - (g.flip ? g.kernel[2] - 1 - k2 : k2) * g.dilation[2];
        if (n2 < 0 || n2 % g.stride[2] != 0 || n2 / g.stride[2] >= g.out[2]) continue;
        const long long row = ((c * g.kernel[0] + k0) * g.kernel[1] + k1) * g.kernel[2] + k2;
        const long long column = ((n0 / g.stride[0]) * g.out[1] + n1 / g.stride[1]) * g.out[2] + n2 / g.stride[2];
        acc += col[row * P + column];
      }
    }
  }
  return acc;
}

// ---- spectral multiply-accumulate (conv_fft.cu) ----------------------------------------

enum class MacMode { forward, grad_inputs, grad_weights };
/// Spectra are stored one after another, `freq` complex values each.
///   forward:      out[n,k]  = sum_{c in g(k)} a[n,c] * conj(b[k,c'])   a = X, b = W
///   grad_inputs:  out[n,c]  = sum_{k in g(c)} a[n,k] * b[k,c']         a = dY, b = W
///   grad_weights: out[k,c'] = sum_n a[n,c] * conj(b[n,k])              a = X, b = dY
/// (c' = channel within its group, c = g * C/G + c').
struct MacShape {
  long long N = 1, C = 1, K = 1, G = 1;
  long long freq = 1;
};

CG_HD long long mac_total(MacMode mode, const MacShape& s) {
  const long long spectra = mode == MacMode::forward       ? s.N * s.K
                            : mode == MacMode::grad_inputs ? s.N * s.C
                                                           : s.K * (s.C / s.G);
  return spectra * s.freq;
}

/// acc += a * b, or a * conj(b). C is any struct with x (real) and y (imaginary).
template <class C>
CG_HD void complex_mac(C& acc, const C& a, const C& b, bool conj_b) {
  const auto bi = conj_b ? -b.y : b.y;
  acc.x += a.x * b.x - a.y * bi;
  acc.y += a.x * bi + a.y * b.x;
}

/// Output element i = (output spectrum, frequency); adjacent i are adjacent frequencies,
/// so on the GPU every load is coalesced.
template <class C>
CG_HD C mac_value(MacMode mode, const C* a, const C* b, const MacShape& s, long long i) {
  const long long Cg = s.C / s.G, Kg = s.K / s.G, F = s.freq;
  const long long f = i % F;
  const long long o = i / F;
  C acc;
  acc.x = 0;
  acc.y = 0;
  if (mode == MacMode::forward) {  // o = (n, k)
    const long long n = o / s.K, k = o % s.K, g = k / Kg;
    const C* pa = a + ((n * s.C + g * Cg) * F + f);
    const C* pb = b + (k * Cg * F + f);
    for (long long c = 0; c < Cg; ++c) complex_mac(acc, pa[c * F], pb[c * F], true);
  } else if (mode == MacMode::grad_inputs) {  // o = (n, c)
    const long long n = o / s.C, c = o % s.C, g = c / Cg, cl = c % Cg;
    const C* pa = a + ((n * s.K + g * Kg) * F + f);
    const C* pb = b + ((g * Kg * Cg + cl) * F + f);
    for (long long k = 0; k < Kg; ++k) complex_mac(acc, pa[k * F], pb[k * Cg * F], false);
  } else {  // o = (k, c')
    const long long k = o / Cg, cl = o % Cg, g = k / Kg;
    const C* pa = a + ((g * Cg + cl) * F + f);
    const C* pb = b + (k * F + f);
    for (long long n = 0; n < s.N; ++n) complex_mac(acc, pa[n * s.C * F], pb[n * s.K * F], true);
  }
  return acc;
}

// ---- reductions (reduce.cu) ---------------------------------------------------------

enum class RedOp { sum, mean, max, min };

/// The accumulator: floats in double (as the CPU kernel), integers and bool in their type.
template <class T>
using ReduceAcc = std::conditional_t<std::is_floating_point<T>::value, double, T>;

template <class T>
CG_HD ReduceAcc<T> reduce_identity(RedOp op) {
  using A = ReduceAcc<T>;
  if (op == RedOp::sum || op == RedOp::mean) return A(0);
  if constexpr (std::is_same<T, bool>::value) return op == RedOp::min;
  else if constexpr (std::is_floating_point<T>::value)
    return op == RedOp::max ? -lim::numeric_limits<A>::infinity() : lim::numeric_limits<A>::infinity();
  else return op == RedOp::max ? lim::numeric_limits<A>::lowest() : lim::numeric_limits<A>::max();
}

/// a (op) b; max and min propagate a NaN from either side, as the CPU kernel does.
template <class A>
CG_HD A reduce_combine(RedOp op, A a, A b) {
  if (op == RedOp::sum || op == RedOp::mean) return static_cast<A>(a + b);
  if constexpr (std::is_floating_point<A>::value) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return op == RedOp::max ? (b > a ? b : a) : (b < a ? b : a);
}

/// The output from the accumulator of `count` inputs (mean divides; integer mean truncates).
template <class T>
CG_HD T reduce_finish(RedOp op, ReduceAcc<T> a, long long count) {
  if (op == RedOp::mean) return static_cast<T>(a / static_cast<ReduceAcc<T>>(count));
  return static_cast<T>(a);
}

// ---- softmax family (softmax.cu) ---------------------------------------------------------
// Per row of n: m = max (NaN-propagating), e_j = exp(x_j - m) in T, s = sum e_j in double;
// softmax y_j = e_j * T(1 / s); log_softmax y_j = (x_j - m) - T(log s). Gradients with
// st = T(sum_j term_j): log: g_j - exp(y_j) st; plain: y_j (g_j - st).

/// The running row maximum; a NaN on either side wins (the row's outputs are then NaN).
template <class V>
CG_HD V softmax_max(V m, V v) {
  return v > m || v != v ? v : m;
}
template <class T>
CG_HD T softmax_exp(T x, T m) {
  using std::exp;
  return exp(x - m);
}
/// The factor every e_j is multiplied by.
template <class T>
CG_HD T softmax_scale(double s) {
  return static_cast<T>(1.0 / s);
}
/// (x - m) - log(s), not x - (m + log(s)): m + log(s) would round log(s) away.
template <class T>
CG_HD T log_softmax_value(T x, T m, double s) {
  using std::log;
  return (x - m) - static_cast<T>(log(s));
}
template <class T>
CG_HD double softmax_grad_term(bool log_out, T g, T y) {
  return log_out ? static_cast<double>(g) : static_cast<double>(g) * static_cast<double>(y);
}
template <class T>
CG_HD T softmax_grad_value(bool log_out, T g, T y, T st) {
  using std::exp;
  return log_out ? g - exp(y) * st : y * (g - st);
}
/// Whether class index c names one of n classes (out of range: take_class gives NaN,
/// scatter_class skips, where the CPU throws).
CG_HD bool class_in_range(long long c, long long n) { return c >= 0 && c < n; }

// ---- cast and fill (elementwise.cu) ----------------------------------------------------

/// A value in transit: integers and bools keep all 64 bits, floats go through double.
struct CastValue {
  double d = 0;
  long long l = 0;
  bool integral = false;
};

template <class T>
CG_HD CastValue cast_load(T v) {
  CastValue c;
  if constexpr (std::is_floating_point<T>::value) {
    c.d = static_cast<double>(v);
  } else {
    c.l = static_cast<long long>(v);
    c.integral = true;
  }
  return c;
}

/// To T (float16/bfloat16 are stored from as_double() by the kernel's own conversion):
/// bool is "nonzero", integers from integers wrap as C++ does, floats to integers
/// truncate toward zero (NaN and out-of-range values are undefined, as in C++).
CG_HD double cast_as_double(const CastValue& c) { return c.integral ? static_cast<double>(c.l) : c.d; }
template <class T>
CG_HD T cast_store(const CastValue& c) {
  if constexpr (std::is_same<T, bool>::value) return c.integral ? c.l != 0 : c.d != 0;
  else if constexpr (std::is_floating_point<T>::value) return static_cast<T>(cast_as_double(c));
  else return c.integral ? static_cast<T>(c.l) : static_cast<T>(c.d);
}

}  // namespace convgraph::cuda::kernels
