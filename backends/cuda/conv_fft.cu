// The frequency-domain multiply-accumulate of cuda.fft (cuFFT calls are in conv_fft.cpp).
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernels.hpp"

namespace convgraph::cuda::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

// acc += a * b  or  a * conj(b)
template <class C>
__device__ __forceinline__ void mac(C& acc, C a, C b, bool conj_b) {
  const auto bi = conj_b ? -b.y : b.y;
  acc.x += a.x * b.x - a.y * bi;
  acc.y += a.x * bi + a.y * b.x;
}

// One thread per (output spectrum, frequency); adjacent threads take adjacent
// frequencies, so every load is coalesced. The reduction runs over the channels of one
// group (forward, grad_inputs) or over the batch (grad_weights).
template <class C>
__global__ void spectral_mac_kernel(MacMode mode, const C* __restrict__ a, const C* __restrict__ b,
                                    C* __restrict__ out, MacShape s) {
  const long long Cg = s.C / s.G, Kg = s.K / s.G, F = s.freq;
  const long long spectra = mode == MacMode::forward ? s.N * s.K
                            : mode == MacMode::grad_inputs ? s.N * s.C
                                                           : s.K * Cg;
  const long long total = spectra * F;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long f = i % F;
    const long long o = i / F;
    C acc;
    acc.x = 0;
    acc.y = 0;
    if (mode == MacMode::forward) {  // o = (n, k)
      const long long n = o / s.K, k = o % s.K, g = k / Kg;
      const C* pa = a + ((n * s.C + g * Cg) * F + f);
      const C* pb = b + (k * Cg * F + f);
      for (long long c = 0; c < Cg; ++c) mac(acc, pa[c * F], pb[c * F], true);
    } else if (mode == MacMode::grad_inputs) {  // o = (n, c)
      const long long n = o / s.C, c = o % s.C, g = c / Cg, cl = c % Cg;
      const C* pa = a + ((n * s.K + g * Kg) * F + f);
      const C* pb = b + ((g * Kg * Cg + cl) * F + f);
      for (long long k = 0; k < Kg; ++k) mac(acc, pa[k * F], pb[k * Cg * F], false);
    } else {  // o = (k, c')
      const long long k = o / Cg, cl = o % Cg, g = k / Kg;
      const C* pa = a + ((g * Cg + cl) * F + f);
      const C* pb = b + (k * F + f);
      for (long long n = 0; n < s.N; ++n) mac(acc, pa[n * s.C * F], pb[n * s.K * F], true);
    }
    out[i] = acc;
  }
}

template <class C>
void launch(MacMode mode, const void* a, const void* b, void* out, const MacShape& s, cudaStream_t stream) {
  const long long spectra = mode == MacMode::forward ? s.N * s.K
                            : mode == MacMode::grad_inputs ? s.N * s.C
                                                           : s.K * (s.C / s.G);
  const long long total = spectra * s.freq;
  if (total == 0) return;
  spectral_mac_kernel<C><<<blocks_for(total), kThreads, 0, stream>>>(
      mode, static_cast<const C*>(a), static_cast<const C*>(b), static_cast<C*>(out), s);
  CG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void spectral_mac(MacMode mode, bool is_double, const void* a, const void* b, void* out, const MacShape& s,
                  cudaStream_t stream) {
  if (is_double)
    launch<cufftDoubleComplex>(mode, a, b, out, s, stream);
  else
    launch<cufftComplex>(mode, a, b, out, s, stream);
}

}  // namespace convgraph::cuda::kernels
