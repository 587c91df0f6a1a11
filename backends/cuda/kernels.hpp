#pragma once
/// Launchers for the CUDA backend's own kernels (tensor_kernels.cu, conv_corrmm.cu,
/// conv_fft.cu). Plain structs and C++17 only: this header is the seam between nvcc
/// (C++17) and the C++20 host code, which never sees a __global__ function.
/// Every launcher enqueues on `stream` and throws DeviceError on a launch failure.
/// Spatial geometry always has 3 axes; unused axes have extent 1, stride 1, dilation 1
/// and padding 0, so one code path serves 1D, 2D and 3D.
#include <cuda_runtime.h>

namespace convgraph::cuda::kernels {

// ---- tensor_kernels.cu ------------------------------------------------------------

/// Affine N-d gather with zero fill, the one kernel behind padding, cropping, dilating
/// and flipping a tensor:  dst[b, t] = scale * src[b, s]  with, per axis a,
///   s_a = (t_a * mul_a + add_a) / div_a   when that division is exact and 0 <= s_a < src_a,
/// and dst[b, t] = 0 otherwise. `batch` counts the leading (N*C) slices.
struct GatherSpec {
  long long batch = 1;
  long long dst[3] = {1, 1, 1};
  long long src[3] = {1, 1, 1};
  long long mul[3] = {1, 1, 1};
  long long add[3] = {0, 0, 0};
  long long div[3] = {1, 1, 1};
};
enum class Elem { raw16, f32, f64 };  ///< raw16 copies float16/bfloat16 bits (scale must be 1)
void gather_nd(Elem e, const void* src, void* dst, const GatherSpec& s, double scale, cudaStream_t stream);

// ---- conv_corrmm.cu ---------------------------------------------------------------

/// One sample's im2col geometry: col has channels * prod(kernel) rows and prod(out)
/// columns; row (c, k0, k1, k2) reads input offset (flip ? K - 1 - k : k) * dilation.
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
void im2col(const float* x, float* col, const ColGeometry& g, cudaStream_t stream);
void im2col(const double* x, double* col, const ColGeometry& g, cudaStream_t stream);
/// x = sum of the col entries that im2col would have read from each element (overwrites
/// x; a gather per input element, so deterministic and free of atomics).
void col2im(const float* col, float* x, const ColGeometry& g, cudaStream_t stream);
void col2im(const double* col, double* x, const ColGeometry& g, cudaStream_t stream);

// ---- conv_fft.cu ------------------------------------------------------------------

enum class MacMode { forward, grad_inputs, grad_weights };
/// Spectra are stored one after another, `freq` complex values each.
///   forward:      out[n,k]  = sum_{c in g(k)} a[n,c] * conj(b[k,c'])   a = X, b = W
///   grad_inputs:  out[n,c]  = sum_{k in g(c)} a[n,k] * b[k,c']         a = dY, b = W
///   grad_weights: out[k,c'] = sum_n a[n,c] * conj(b[n,k])              a = X, b = dY
/// (c' = channel within its group).
struct MacShape {
  long long N = 1, C = 1, K = 1, G = 1;
  long long freq = 1;
};
void spectral_mac(MacMode mode, bool is_double, const void* a, const void* b, void* out, const MacShape& s,
                  cudaStream_t stream);

}  // namespace convgraph::cuda::kernels
