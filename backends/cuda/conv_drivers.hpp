#pragma once
/// The step sequences of cuda.corrmm, cuda.fft and cuDNN's explicit padding, written once
/// against an `Ops` object that performs the steps. conv_corrmm.cpp / conv_fft.cpp pass
/// GPU ops (kernel launches, cuBLAS, cuFFT); tests/cuda/test_cuda_emulation.cpp passes
/// host ops with the same semantics (column-major strided-batched GEMM, unnormalised
/// R2C/C2R DFTs), so the drivers' indexing, leading dimensions and transposes are
/// checked against the reference without a GPU. No CUDA header here.
#include <algorithm>
#include <cstddef>

#include "backends/cuda/kernel_math.hpp"
#include "convgraph/conv/conv_problem.hpp"
#include "backends/cuda/conv_cuda.hpp"
#include "backends/cuda/cudnn_plan.hpp"

namespace convgraph::cuda {

// ---- cuDNN explicit padding ---------------------------------------------------------

/// x -> xp (zero-padded by the plan's extra pre/post), or with `crop` dxp -> dx.
/// Spatial axes are right-aligned in the 3 slots so extent-1 slots lead.
inline kernels::GatherSpec cudnn_pad_spec(const ConvProblem& p, const CudnnPadPlan& pad, bool crop) {
  kernels::GatherSpec s;
  s.batch = p.N * p.C;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const int slot = 3 - p.ndim + a;
    s.dst[slot] = crop ? p.in[ua] : pad.padded_in[ua];
    s.src[slot] = crop ? pad.padded_in[ua] : p.in[ua];
    s.add[slot] = crop ? pad.extra_pre[ua] : -pad.extra_pre[ua];
  }
  return s;
}

// ---- cuda.corrmm --------------------------------------------------------------------

inline kernels::ColGeometry corrmm_geometry(const ConvProblem& p) {
  kernels::ColGeometry geo;
  geo.channels = p.C;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    geo.in[a] = p.in[ua];
    geo.kernel[a] = p.kernel[ua];
    geo.out[a] = p.out[ua];
    geo.stride[a] = p.stride[ua];
    geo.dilation[a] = p.dilation[ua];
    geo.pad[a] = p.pad_pre[ua];
  }
  geo.flip = p.flip;
  return geo;
}

/// Per sample n, with P = prod(out), R = C/G * prod(kernel) (one group's col rows):
///   forward       col = im2col(x[n]);  y[n]_g (Kg x P) = W_g (Kg x R) * col_g (R x P)
///   grad_inputs   col_g (R x P) = W_g^T * dy[n]_g;  dx[n] = col2im(col)
///   grad_weights  col = im2col(x[n]);  dW_g (Kg x R) += dy[n]_g * col_g^T (beta 0 at n = 0)
/// The G groups are one strided-batched GEMM. Row-major operands are handed to the
/// column-major GEMM as their transposes: row-major C = A B is column-major C^T = B^T A^T.
/// Ops: im2col(x, col, geo), col2im(col, x, geo), and
///   gemm(trans_a, trans_b, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
///        strideC, batch) with cuBLAS's column-major semantics (C not read when beta = 0).
template <class T, class Ops>
void corrmm_run(const ConvProblem& p, T* x, T* w, T* y, T* col, Ops& ops) {
  const kernels::ColGeometry geo = corrmm_geometry(p);
  const int P = static_cast<int>(p.out_numel());
  const int Kg = static_cast<int>(p.Kg());
  const int R = static_cast<int>(p.Cg() * p.kernel_numel());
  const int G = static_cast<int>(p.G);
  const long long col_g = static_cast<long long>(R) * P;
  const long long w_g = static_cast<long long>(Kg) * R;
  const long long y_g = static_cast<long long>(Kg) * P;
  const long long x_n = p.C * p.in_numel(), y_n = p.K * p.out_numel();
  for (long long n = 0; n < p.N; ++n) {
    switch (p.direction) {
      case ConvDirection::forward:
        ops.im2col(x + n * x_n, col, geo);
        ops.gemm(false, false, P, Kg, R, T(1), col, P, col_g, w, R, w_g, T(0), y + n * y_n, P, y_g, G);
        break;
      case ConvDirection::grad_inputs:
        ops.gemm(false, true, P, R, Kg, T(1), y + n * y_n, P, y_g, w, R, w_g, T(0), col, P, col_g, G);
        ops.col2im(col, x + n * x_n, geo);
        break;
      case ConvDirection::grad_weights:
        ops.im2col(x + n * x_n, col, geo);
        ops.gemm(true, false, R, Kg, P, T(1), col, P, col_g, y + n * y_n, P, y_g, n == 0 ? T(0) : T(1), w, R, w_g,
                 G);
        break;
    }
  }
}

// ---- cuda.fft -----------------------------------------------------------------------

/// The three signal families: x (N*C signals), w (K*C/G), y (N*K).
enum FftFamily { kFamilyX = 0, kFamilyW = 1, kFamilyY = 2 };

inline FftFamily fft_output_family(ConvDirection d) {
  return d == ConvDirection::forward ? kFamilyY : d == ConvDirection::grad_inputs ? kFamilyX : kFamilyW;
}

inline long long fft_family_count(const ConvProblem& p, FftFamily f) {
  return f == kFamilyX ? p.N * p.C : f == kFamilyW ? p.K * p.Cg() : p.N * p.K;
}

/// Moves one family between its tensor and the FFT-sized real buffer: to_fft places
/// x at offset pad_pre, dy at 0, and the filter dilated (h[m] = w[m / d]) and, for true
/// convolution, flipped (h[m] = w[(span - m) / d]); back from the FFT buffer it crops
/// dx at pad_pre and y at 0, and picks dw[k] = dh[k d] (or dh[(K-1-k) d] when flipped).
inline kernels::GatherSpec fft_family_spec(const ConvProblem& p, const FftGeometry& g, FftFamily f, bool to_fft) {
  kernels::GatherSpec s;
  s.batch = fft_family_count(p, f);
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const long long extent = f == kFamilyX ? p.in[ua] : f == kFamilyW ? p.kernel[ua] : p.out[ua];
    s.dst[a] = to_fft ? g.size[ua] : extent;
    s.src[a] = to_fft ? extent : g.size[ua];
    const long long d = p.dilation[ua], span = (p.kernel[ua] - 1) * d;
    if (f == kFamilyX) {
      s.add[a] = to_fft ? -p.pad_pre[ua] : p.pad_pre[ua];
    } else if (f == kFamilyW) {
      s.mul[a] = to_fft ? (p.flip ? -1 : 1) : (p.flip ? -d : d);
      s.add[a] = p.flip ? span : 0;
      s.div[a] = to_fft ? d : 1;
    }
  }
  return s;
}

struct FftBuffers {
  void* real = nullptr;
  void* spectra[3] = {nullptr, nullptr, nullptr};
  void* work = nullptr;  ///< cuFFT's work area
};

/// Workspace layout: [real staging][X spectra][W spectra][Y spectra][cuFFT work], each
/// 256-byte aligned (FftGeometry::buffer_bytes() is the size up to the work area).
inline FftBuffers fft_carve(const ConvProblem& p, const FftGeometry& g, void* workspace) {
  const auto align = [](std::size_t v) { return (v + 255) / 256 * 256; };
  const std::size_t es = dtype_size(p.dtype);
  char* at = static_cast<char*>(workspace);
  FftBuffers b;
  b.real = at;
  at += align(g.real_bytes);
  for (int f = 0; f < 3; ++f) {
    b.spectra[f] = at;
    at += align(static_cast<std::size_t>(fft_family_count(p, FftFamily(f)) * g.complex_per_signal) * 2 * es);
  }
  b.work = at;
  return b;
}

/// Both inputs into the frequency domain, the multiply-accumulate, the output back.
/// Ops: gather(src, dst, spec, scale), r2c(family, real, spectrum), c2r(family, spectrum,
/// real) (unnormalised, batched over the family's signals), mac(mode, a, b, out, shape).
/// tensor = {x, w, y} device pointers.
template <class Ops>
void fft_run(const ConvProblem& p, const FftGeometry& g, void* const tensor[3], const FftBuffers& b, Ops& ops) {
  const FftFamily out = fft_output_family(p.direction);
  for (int f = 0; f < 3; ++f) {
    if (f == out) continue;
    ops.gather(tensor[f], b.real, fft_family_spec(p, g, FftFamily(f), true), 1.0);
    ops.r2c(FftFamily(f), b.real, b.spectra[f]);
  }
  kernels::MacShape shape;
  shape.N = p.N;
  shape.C = p.C;
  shape.K = p.K;
  shape.G = p.G;
  shape.freq = g.complex_per_signal;
  switch (p.direction) {
    case ConvDirection::forward:  // Y = X . conj(H)
      ops.mac(kernels::MacMode::forward, b.spectra[kFamilyX], b.spectra[kFamilyW], b.spectra[kFamilyY], shape);
      break;
    case ConvDirection::grad_inputs:  // DX = DY . H
      ops.mac(kernels::MacMode::grad_inputs, b.spectra[kFamilyY], b.spectra[kFamilyW], b.spectra[kFamilyX], shape);
      break;
    case ConvDirection::grad_weights:  // DH = X . conj(DY)
      ops.mac(kernels::MacMode::grad_weights, b.spectra[kFamilyX], b.spectra[kFamilyY], b.spectra[kFamilyW], shape);
      break;
  }
  ops.c2r(out, b.spectra[out], b.real);
  // The transforms are unnormalised: the round trip multiplies by prod(F).
  ops.gather(b.real, tensor[out], fft_family_spec(p, g, out, false), 1.0 / static_cast<double>(g.real_per_signal));
}

}  // namespace convgraph::cuda
