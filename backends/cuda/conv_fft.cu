// The frequency-domain multiply-accumulate of cuda.fft (cuFFT calls are made by
// conv_fft.cpp; the arithmetic is kernel_math.hpp's mac_value).
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch.cuh"

namespace convgraph::cuda::kernels {

namespace {

template <class C>
__global__ void spectral_mac_kernel(MacMode mode, const C* __restrict__ a, const C* __restrict__ b,
                                    C* __restrict__ out, MacShape s) {
  const long long total = mac_total(mode, s);
  CG_GRID_STRIDE_LOOP(i, total) out[i] = mac_value(mode, a, b, s, i);
}

template <class C>
void launch(MacMode mode, const void* a, const void* b, void* out, const MacShape& s, cudaStream_t stream) {
  const long long total = mac_total(mode, s);
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
