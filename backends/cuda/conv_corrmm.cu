// im2col / col2im kernels of cuda.corrmm (the GEMMs are cuBLAS calls made by
// conv_corrmm.cpp; the index arithmetic is kernel_math.hpp's).
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch.cuh"

namespace convgraph::cuda::kernels {

namespace {

template <class T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, ColGeometry g) {
  const long long total = col_rows(g) * col_cols(g);
  CG_GRID_STRIDE_LOOP(i, total) {
    const long long from = im2col_source(g, i);
    col[i] = from >= 0 ? x[from] : T(0);
  }
}

template <class T>
__global__ void col2im_kernel(const T* __restrict__ col, T* __restrict__ x, ColGeometry g) {
  const long long total = image_size(g);
  CG_GRID_STRIDE_LOOP(i, total) x[i] = col2im_value(col, g, i);
}

template <class T>
void launch_im2col(const T* x, T* col, const ColGeometry& g, cudaStream_t stream) {
  const long long total = col_rows(g) * col_cols(g);
  if (total == 0) return;
  im2col_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(x, col, g);
  CG_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_col2im(const T* col, T* x, const ColGeometry& g, cudaStream_t stream) {
  const long long total = image_size(g);
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
