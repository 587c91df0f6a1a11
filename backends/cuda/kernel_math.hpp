#pragma once
/// The per-element arithmetic of the CUDA backend's own kernels, as host+device inline
/// functions over plain structs. The __global__ kernels (tensor_kernels.cu,
/// conv_corrmm.cu, conv_fft.cu) are grid-stride loops around these, and GPU-free tests
/// (tests/cuda/test_cuda_emulation.cpp) run the very same functions on the host.
/// C++17 and no CUDA header, so nvcc, g++ and the tests all include it.
///
/// Spatial geometry always has 3 axes; unused axes have extent 1, stride 1, dilation 1
/// and padding 0, so one code path serves 1D, 2D and 3D.
#if defined(__CUDACC__)
#define CG_HD __host__ __device__ __forceinline__
#else
#define CG_HD inline
#endif

namespace convgraph::cuda::kernels {

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

}  // namespace convgraph::cuda::kernels
