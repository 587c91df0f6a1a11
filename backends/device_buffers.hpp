#pragma once
// Internal: host <-> device buffers for the layers above the backends (runtime transfers
// and outputs, the meta-optimizer's tuning data, DebugMode comparisons), so that they never
// include the CUDA backend's private headers. CUDA builds use the CUDA backend's allocator
// and copies; other builds (and machines without a GPU) throw DeviceError carrying
// cuda_info().reason.
#include <cstddef>
#include <memory>
#include <optional>

#include "convgraph/core/tensor.hpp"

namespace convgraph {

/// A contiguous host copy (t itself when already on the host and contiguous).
Tensor copy_to_host(const Tensor& t);
/// A contiguous copy of a host tensor on `device`.
Tensor copy_to(const Tensor& host, DeviceKind device);
/// Copies `src` into the preallocated `dst` (same dtype and element count, both contiguous;
/// any mix of host and device) on the calling thread's current stream and waits for it,
/// so `dst` is ready and `src` may be reused on return. Host-to-host is a plain copy.
void copy_into(const Tensor& src, Tensor& dst);
/// Uninitialised memory on `device`.
std::shared_ptr<Storage> allocate_on(DeviceKind device, std::size_t bytes);
/// Bytes a new allocation on `device` can get at most: the GPU's free memory plus what
/// the caching allocator holds unused; nullopt on the host (no cheap answer; an
/// allocation there fails with MemoryError instead) and where the device is unusable.
std::optional<std::size_t> device_memory_available(DeviceKind device);
/// Waits for queued work on `device` (the calling thread's current stream); no-op on CPU.
void synchronize(DeviceKind device);

}  // namespace convgraph
