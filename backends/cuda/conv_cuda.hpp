#pragma once
/// The GPU-free planning halves of cuda.corrmm and cuda.fft: what they accept and how
/// much workspace they carve, computable (and unit-tested) without a GPU. Defined in
/// backends/conv_cuda_plan.cpp, which every build compiles, CUDA or not.
#include <cstddef>
#include <cstdint>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph::cuda {

// ---- cuda.corrmm: im2col/col2im kernels + cuBLAS GEMM ---------------------------------
//
// Per sample n, with P = prod(out) and col = (C * prod(kernel)) x P:
//   forward       col = im2col(x[n]);  y[n]_g = W_g * col_g            (G batched GEMMs)
//   grad_inputs   col_g = W_g^T * dy[n]_g;  dx[n] = col2im(col)
//   grad_weights  col = im2col(x[n]);  dW_g += dy[n]_g * col_g^T        (beta = 0 for n = 0)
// Flip is folded into im2col/col2im (they read tap K-1-k), so W is used as stored.

/// float32/float32 or float64/float64, every dimension count, group count, stride,
/// dilation and padding; sizes must fit cuBLAS's 32-bit GEMM arguments.
Status corrmm_static_check(const ConvProblem& p);
/// One sample's column buffer: C * prod(kernel) * prod(out) elements.
std::size_t corrmm_workspace_bytes(const ConvProblem& p);

// ---- cuda.fft: cuFFT convolution, stride 1 ---------------------------------------------
//
// Every signal is zero-padded to F >= in + pad_pre + pad_post per axis (the full linear
// size, so circular convolution equals linear) rounded up to a 2,3,5,7-smooth length.
// The filter is placed dilated (and flipped for cross-correlation) into the same size.
// R2C -> per-frequency complex multiply-accumulate over channels (conj for correlation)
// -> C2R -> crop and scale by 1 / prod(F).

struct FftGeometry {
  int ndim = 2;
  Axes3 size{1, 1, 1};                ///< F per axis (first ndim used)
  std::int64_t real_per_signal = 1;   ///< prod(F)
  std::int64_t complex_per_signal = 1;  ///< prod(F[:-1]) * (F[-1] / 2 + 1)
  std::size_t real_bytes = 0;      ///< staging buffer: max(N*C, K*C/G, N*K) real signals
  std::size_t spectra_bytes = 0;   ///< X, W and Y spectra (N*C + K*C/G + N*K)
  /// real_bytes + spectra_bytes, each 256-byte aligned; cuFFT's own work area (known
  /// only with a GPU) comes on top of it.
  std::size_t buffer_bytes() const;
};

/// Smallest n' >= n whose only prime factors are 2, 3, 5 and 7 (cuFFT's fast sizes).
std::int64_t fft_good_size(std::int64_t n);
/// Stride 1 on every axis, float32/float32 or float64/float64, FFT sizes within int.
Status fft_static_check(const ConvProblem& p);
FftGeometry fft_geometry(const ConvProblem& p);

// ---- the forward epilogue on the GPU ---------------------------------------------------

/// Applies t.epilogue (bias, residual, relu; ConvEpilogue) to the whole output t.y of the
/// forward problem p on the GPU with cuDNN's tensor ops, for the CUDA algorithms that do
/// not apply it themselves (cuda.corrmm, cuda.fft; ConvAlgorithm::fuses_epilogue()).
/// Defined in backends/cuda/cudnn_epilogue.cpp; without CUDA it throws DeviceError.
void apply_conv_epilogue_gpu(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx);

}  // namespace convgraph::cuda
