// The GPU-free planning halves of cuda.corrmm and cuda.fft (backends/cuda/conv_cuda.hpp):
// what they accept and the workspace they carve. Compiled in every build, with or without
// CUDA, so tests/cuda/test_cuda_emulation.cpp checks the drivers' arithmetic anywhere;
// the GPU halves are backends/cuda/conv_corrmm.cpp and conv_fft.cpp.
#include <algorithm>
#include <climits>

#include "backends/cuda/conv_cuda.hpp"

namespace convgraph::cuda {

namespace {
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// ---- cuda.corrmm ----------------------------------------------------------------------

Status corrmm_static_check(const ConvProblem& p) {
  const bool f32 = p.dtype == DType::float32 && p.compute == DType::float32;
  const bool f64 = p.dtype == DType::float64 && p.compute == DType::float64;
  if (!f32 && !f64)
    return Status::no(msg("cuda.corrmm: runs float32/float32 and float64/float64 only, got ", dtype_name(p.dtype), "/",
                          dtype_name(p.compute)));
  if (p.ndim < 1 || p.ndim > 3) return Status::no(msg("cuda.corrmm: ", p.ndim, " spatial dimensions (1-3 supported)"));
  // cuBLAS's GEMM sizes and leading dimensions are 32-bit ints.
  const std::int64_t rows = p.Cg() * p.kernel_numel();
  for (std::int64_t v : {p.Kg(), rows, p.out_numel(), p.G})
    if (v > INT_MAX) return Status::no(msg("cuda.corrmm: a GEMM dimension of ", p.key(), " exceeds 2^31 - 1"));
  return Status::ok();
}

std::size_t corrmm_workspace_bytes(const ConvProblem& p) {
  return static_cast<std::size_t>(p.C * p.kernel_numel() * p.out_numel()) * dtype_size(p.dtype);
}

// ---- cuda.fft -------------------------------------------------------------------------

std::int64_t fft_good_size(std::int64_t n) {
  if (n <= 1) return 1;
  for (std::int64_t m = n;; ++m) {
    std::int64_t r = m;
    for (std::int64_t f : {2, 3, 5, 7})
      while (r % f == 0) r /= f;
    if (r == 1) return m;
  }
}

Status fft_static_check(const ConvProblem& p) {
  const bool f32 = p.dtype == DType::float32 && p.compute == DType::float32;
  const bool f64 = p.dtype == DType::float64 && p.compute == DType::float64;
  if (!f32 && !f64)
    return Status::no(msg("cuda.fft: runs float32/float32 and float64/float64 only, got ", dtype_name(p.dtype), "/",
                          dtype_name(p.compute)));
  if (p.ndim < 1 || p.ndim > 3) return Status::no(msg("cuda.fft: ", p.ndim, " spatial dimensions (1-3 supported)"));
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    if (p.stride[ua] != 1) return Status::no(msg("cuda.fft: needs stride 1 on every axis (axis ", a, " has ", p.stride[ua], ")"));
    if (p.in[ua] + p.pad_pre[ua] + p.pad_post[ua] > INT_MAX / 2)
      return Status::no(msg("cuda.fft: padded extent of axis ", a, " is too large for cuFFT"));
  }
  return Status::ok();
}

std::size_t FftGeometry::buffer_bytes() const { return align_up(real_bytes) + spectra_bytes; }

FftGeometry fft_geometry(const ConvProblem& p) {
  FftGeometry g;
  g.ndim = p.ndim;
  g.real_per_signal = 1;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    g.size[ua] = fft_good_size(p.in[ua] + p.pad_pre[ua] + p.pad_post[ua]);
    g.real_per_signal *= g.size[ua];
  }
  const auto last = static_cast<std::size_t>(p.ndim - 1);
  g.complex_per_signal = g.real_per_signal / g.size[last] * (g.size[last] / 2 + 1);
  const std::size_t es = dtype_size(p.dtype);
  const std::int64_t nx = p.N * p.C, nw = p.K * p.Cg(), ny = p.N * p.K;
  g.real_bytes = static_cast<std::size_t>(std::max({nx, nw, ny}) * g.real_per_signal) * es;
  const auto spectra = [&](std::int64_t n) { return align_up(static_cast<std::size_t>(n * g.complex_per_signal) * 2 * es); };
  g.spectra_bytes = spectra(nx) + spectra(nw) + spectra(ny);
  return g;
}

}  // namespace convgraph::cuda
