#include "optimizer/device_buffers.hpp"

#include "convgraph/backends/cuda.hpp"
#if CONVGRAPH_WITH_CUDA
#include "convgraph/backends/cuda/device.hpp"
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

std::shared_ptr<Storage> allocate_on(DeviceKind device, std::size_t bytes) {
  if (device == DeviceKind::cpu) return allocate_host(bytes);
#if CONVGRAPH_WITH_CUDA
  return allocate_cuda(bytes);
#else
  no_device("allocate_on");
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
