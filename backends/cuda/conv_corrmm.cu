// N-d im2col / col2im for cuda.corrmm (the GEMMs are cuBLAS calls in conv_corrmm.cpp).
// One code path for 1-3 spatial axes: unused axes have extent 1 (see kernels.hpp).
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernels.hpp"

namespace convgraph::cuda::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

// col[(c, k0, k1, k2), (o0, o1, o2)] = x[c, o*s - pad + kk*d] (0 outside), kk = flipped k
// when `flip`: multiplying by the unflipped filter then gives a true convolution.
template <class T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, ColGeometry g) {
  const long long kprod = g.kernel[0] * g.kernel[1] * g.kernel[2];
  const long long P = g.out[0] * g.out[1] * g.out[2];
  const long long total = g.channels * kprod * P;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
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
    const long long c = r / g.kernel[0];
    long long off = c;
    bool inside = true;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const long long kk = g.flip ? g.kernel[a] - 1 - k[a] : k[a];
      const long long pos = o[a] * g.stride[a] - g.pad[a] + kk * g.dilation[a];
      inside = inside && pos >= 0 && pos < g.in[a];
      off = off * g.in[a] + pos;
    }
    col[i] = inside ? x[off] : T(0);
  }
}

// x[c, i] = sum over kernel taps k and outputs o with o*s - pad + kk*d == i of
// col[(c, k), o]. Each thread owns one input element, so no atomics are needed.
template <class T>
__global__ void col2im_kernel(const T* __restrict__ col, T* __restrict__ x, ColGeometry g) {
  const long long P = g.out[0] * g.out[1] * g.out[2];
  const long long inner = g.in[0] * g.in[1] * g.in[2];
  const long long total = g.channels * inner;
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long rest = idx % inner;
    const long long c = idx / inner;
    long long pos[3];
    pos[2] = rest % g.in[2];
    rest /= g.in[2];
    pos[1] = rest % g.in[1];
    pos[0] = rest / g.in[1];
    T acc = T(0);
    for (long long k0 = 0; k0 < g.kernel[0]; ++k0) {
      const long long kk0 = g.flip ? g.kernel[0] - 1 - k0 : k0;
      const long long n0 = pos[0] + g.pad[0] - kk0 * g.dilation[0];
      if (n0 < 0 || n0 % g.stride[0] != 0 || n0 / g.stride[0] >= g.out[0]) continue;
      const long long o0 = n0 / g.stride[0];
      for (long long k1 = 0; k1 < g.kernel[1]; ++k1) {
        const long long kk1 = g.flip ? g.kernel[1] - 1 - k1 : k1;
        const long long n1 = pos[1] + g.pad[1] - kk1 * g.dilation[1];
        if (n1 < 0 || n1 % g.stride[1] != 0 || n1 / g.stride[1] >= g.out[1]) continue;
        const long long o1 = n1 / g.stride[1];
        for (long long k2 = 0; k2 < g.kernel[2]; ++k2) {
          const long long kk2 = g.flip ? g.kernel[2] - 1 - k2 : k2;
          const long long n2 = pos[2] + g.pad[2] - kk2 * g.dilation[2];
          if (n2 < 0 || n2 % g.stride[2] != 0 || n2 / g.stride[2] >= g.out[2]) continue;
          const long long o2 = n2 / g.stride[2];
          const long long row = (c * g.kernel[0] + k0) * g.kernel[1] * g.kernel[2] + k1 * g.kernel[2] + k2;
          acc += col[row * P + (o0 * g.out[1] + o1) * g.out[2] + o2];
        }
      }
    }
    x[idx] = acc;
  }
}

template <class T>
void launch_im2col(const T* x, T* col, const ColGeometry& g, cudaStream_t stream) {
  const long long total = g.channels * g.kernel[0] * g.kernel[1] * g.kernel[2] * g.out[0] * g.out[1] * g.out[2];
  if (total == 0) return;
  im2col_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(x, col, g);
  CG_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_col2im(const T* col, T* x, const ColGeometry& g, cudaStream_t stream) {
  const long long total = g.channels * g.in[0] * g.in[1] * g.in[2];
  if (total == 0) return;
  col2im_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(col, x, g);
  CG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void im2col(const float* x, float* col, const ColGeometry& g, cudaStream_t s) { launch_im2col(x, col, g, s); }
void im2col(const double* x, double* col, const ColGeometry& g, cudaStream_t s) { launch_im2col(x, col, g, s); }
void col2im(const float* col, float* x, const ColGeometry& g, cudaStream_t s) { launch_col2im(col, x, g, s); }
void col2im(const double* col, double* x, const ColGeometry& g, cudaStream_t s) { launch_col2im(col, x, g, s); }

}  // namespace convgraph::cuda::kernels
