#include "backends/device_buffers.hpp"

#include "convgraph/backends/cuda.hpp"
#if CONVGRAPH_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/device.hpp"
#endif

namespace convgraph {

#if !CONVGRAPH_WITH_CUDA
namespace {
[[noreturn]] void no_device(const char* what) {
  throw DeviceError(msg(what, ": CUDA memory is not available: ", cuda_info().reason));
}
}  // namespace
#endif

Tensor copy_to_host(const Tensor& t) {
  if (t.device() == DeviceKind::cpu) return t.contiguous();
#if CONVGRAPH_WITH_CUDA
  return to_device(t, DeviceKind::cpu);
#else
  no_device("copy_to_host");
#endif
}

Tensor copy_to(const Tensor& host, DeviceKind device) {
  if (device == DeviceKind::cpu) return host.contiguous();
#if CONVGRAPH_WITH_CUDA
  return to_device(host, device);
#else
  no_device("copy_to");
#endif
}

void copy_into(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel() || !src.is_contiguous() || !dst.is_contiguous())
    throw ValueError(msg("copy_into: cannot copy ", dtype_name(src.dtype()), shape_to_string(src.shape()), " into ",
                         dtype_name(dst.dtype()), shape_to_string(dst.shape()), " (both must be contiguous, same size)"));
  if (src.device() == DeviceKind::cpu && dst.device() == DeviceKind::cpu) {
    dst.copy_from(src.reshape(dst.shape()));
    return;
  }
#if CONVGRAPH_WITH_CUDA
  if (!cuda_info().available) throw DeviceError(msg("copy_into: no usable GPU: ", cuda_info().reason));
  if (src.nbytes() == 0) return;
  // cudaMemcpyDefault: unified addressing tells host from device pointers.
  CG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault,
                                static_cast<cudaStream_t>(current_stream())));
  synchronize_stream(nullptr);
#else
  no_device("copy_into");
#endif
}

std::shared_ptr<Storage> allocate_on(DeviceKind device, std::size_t bytes) {
  if (device == DeviceKind::cpu) return allocate_host(bytes);
#if CONVGRAPH_WITH_CUDA
  return allocate_cuda(bytes);
#else
  no_device("allocate_on");
#endif
}

std::optional<std::size_t> device_memory_available(DeviceKind device) {
  if (device == DeviceKind::cpu) return std::nullopt;
#if CONVGRAPH_WITH_CUDA
  if (!cuda_info().available) return std::nullopt;
  return cuda_memory_info().free_bytes + cuda_allocator_stats().bytes_cached;
#else
  return std::nullopt;
#endif
}

void synchronize(DeviceKind device) {
  if (device == DeviceKind::cpu) return;
#if CONVGRAPH_WITH_CUDA
  synchronize_stream(nullptr);
#else
  no_device("synchronize");
#endif
}

}  // namespace convgraph
