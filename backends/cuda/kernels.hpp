#pragma once
/// Launchers for the CUDA backend's own kernels (tensor_kernels.cu, conv_corrmm.cu,
/// conv_fft.cu): the seam between nvcc (C++17) and the C++20 host code, which never sees
/// a __global__ function. The per-element arithmetic and the geometry structs live in
/// kernel_math.hpp. Every launcher enqueues on `stream` and throws DeviceError when the
/// launch fails (bad configuration, no kernel image for the GPU).
#include <cuda_runtime.h>

#include "backends/cuda/kernel_math.hpp"

namespace convgraph::cuda::kernels {

enum class Elem { raw16, f32, f64 };  ///< raw16 copies float16/bfloat16 bits (scale must be 1)
/// dst = scale * gather(src) (see GatherSpec); dst is fully written.
void gather_nd(Elem e, const void* src, void* dst, const GatherSpec& s, double scale, cudaStream_t stream);

/// col (col_rows x col_cols) from one sample's x.
void im2col(const float* x, float* col, const ColGeometry& g, cudaStream_t stream);
void im2col(const double* x, double* col, const ColGeometry& g, cudaStream_t stream);
/// x = col2im(col) for one sample (x overwritten).
void col2im(const float* col, float* x, const ColGeometry& g, cudaStream_t stream);
void col2im(const double* col, double* x, const ColGeometry& g, cudaStream_t stream);

/// out = mac_value(...) for every output element; `is_double` picks cufftDoubleComplex
/// over cufftComplex.
void spectral_mac(MacMode mode, bool is_double, const void* a, const void* b, void* out, const MacShape& s,
                  cudaStream_t stream);

}  // namespace convgraph::cuda::kernels
