// The N-d affine gather (pad / crop / dilate / flip) and the kernel-image probe.
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"

namespace convgraph::cuda {
namespace kernels {

namespace {

constexpr int kThreads = 256;

// Grid size for a grid-stride loop over n elements (capped; the loop covers the rest).
unsigned blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

template <class T, bool kScale>
__global__ void gather_nd_kernel(const T* __restrict__ src, T* __restrict__ dst, GatherSpec s, T scale) {
  const long long inner = s.dst[0] * s.dst[1] * s.dst[2];
  const long long total = s.batch * inner;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long rest = i;
    long long t[3];
    t[2] = rest % s.dst[2];
    rest /= s.dst[2];
    t[1] = rest % s.dst[1];
    rest /= s.dst[1];
    t[0] = rest % s.dst[0];
    const long long b = rest / s.dst[0];
    long long off = b;
    bool inside = true;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const long long num = t[a] * s.mul[a] + s.add[a];
      const long long q = num / s.div[a];
      inside = inside && num >= 0 && q * s.div[a] == num && q < s.src[a];
      off = off * s.src[a] + q;
    }
    T v = inside ? src[off] : T(0);
    if constexpr (kScale) v *= scale;
    dst[i] = v;
  }
}

template <class T>
void launch_gather(const void* src, void* dst, const GatherSpec& s, double scale, cudaStream_t stream) {
  const long long total = s.batch * s.dst[0] * s.dst[1] * s.dst[2];
  if (total == 0) return;
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  if (scale == 1.0)
    gather_nd_kernel<T, false><<<blocks_for(total), kThreads, 0, stream>>>(in, out, s, T(1));
  else
    gather_nd_kernel<T, true><<<blocks_for(total), kThreads, 0, stream>>>(in, out, s, static_cast<T>(scale));
  CG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gather_nd(Elem e, const void* src, void* dst, const GatherSpec& s, double scale, cudaStream_t stream) {
  switch (e) {
    case Elem::raw16:
      if (scale != 1.0) throw ValueError("gather_nd: raw 16-bit copies cannot be scaled");
      launch_gather<std::uint16_t>(src, dst, s, 1.0, stream);
      return;
    case Elem::f32: launch_gather<float>(src, dst, s, scale, stream); return;
    case Elem::f64: launch_gather<double>(src, dst, s, scale, stream); return;
  }
}

}  // namespace kernels

bool own_kernels_loadable(std::string* why) {
  // sm_90 SASS + compute_90 PTX: an older GPU has no image for these kernels. Asking for
  // a kernel's attributes loads the module and reports that without launching anything.
  static const std::string error = [] {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, kernels::gather_nd_kernel<float, false>);
    if (e == cudaSuccess) return std::string();
    (void)cudaGetLastError();
    return std::string("convgraph's CUDA kernels cannot run on this GPU: ") + cudaGetErrorString(e) +
           " (built for sm_90)";
  }();
  if (why) *why = error;
  return error.empty();
}

}  // namespace convgraph::cuda
