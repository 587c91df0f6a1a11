// The N-d affine gather (pad / crop / dilate / flip) and the kernel-image probe.
#include <cstdint>
#include <string>

#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch.cuh"

namespace convgraph::cuda {
namespace kernels {

namespace {

template <class T, bool kScale>
__global__ void gather_nd_kernel(const T* __restrict__ src, T* __restrict__ dst, GatherSpec s, T scale) {
  const long long total = gather_total(s);
  CG_GRID_STRIDE_LOOP(i, total) {
    const long long from = gather_source(s, i);
    T v = from >= 0 ? src[from] : T(0);
    if constexpr (kScale) v *= scale;
    dst[i] = v;
  }
}

template <class T>
void launch_gather(const void* src, void* dst, const GatherSpec& s, double scale, cudaStream_t stream) {
  const long long total = gather_total(s);
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
