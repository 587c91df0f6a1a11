#pragma once
/// GPU memory, host<->device copies, streams and timing for the CUDA backend.
/// This header includes no CUDA header: streams and events are passed as void*
/// (a cudaStream_t / cudaEvent_t underneath), so any translation unit can use it.
/// Everything here exists only in CUDA builds (CONVGRAPH_WITH_CUDA=1); without a usable
/// GPU every function throws DeviceError carrying cuda_info().reason.
#include <cstddef>
#include <memory>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/device.hpp"
#include "convgraph/core/tensor.hpp"

namespace convgraph {

// ---- memory -----------------------------------------------------------------------

/// Device memory from the process-wide caching allocator. Blocks are rounded up to a
/// size class (4 classes per power of two, at least 512 bytes, so at most 25% slack)
/// and returned to that class's free list when the Storage dies, so repeated calls with
/// the same shapes never reach cudaMalloc again. On cudaMalloc running out of memory the
/// cached blocks are released and the call retried once.
///
/// Stream rule: a block belongs to the calling thread's current stream at allocation.
/// When it is freed, an event marks the work queued on that stream so far; the block is
/// handed out again at once for work on the same stream (stream order protects it) and
/// for another stream only once that event has completed (backends/cuda/block_cache.hpp).
/// Work on a third stream that touches the block must be ordered before the free by
/// the caller (an event or a synchronisation), as with any stream-ordered allocator.
///
/// Throws DeviceError without a usable GPU or on a CUDA failure, MemoryError when the
/// GPU is out of memory even after emptying the cache.
std::shared_ptr<Storage> allocate_cuda(std::size_t bytes);

struct CudaAllocatorStats {
  std::size_t bytes_in_use = 0;   ///< rounded bytes held by live Storage objects
  std::size_t bytes_cached = 0;   ///< rounded bytes sitting in free lists (some may wait for an event)
  std::size_t peak_in_use = 0;
  std::size_t device_allocations = 0;  ///< cudaMalloc calls that succeeded
  std::size_t cache_hits = 0;          ///< requests served from a free list
};
CudaAllocatorStats cuda_allocator_stats();
/// Gives every cached (unused) block back to the driver.
void cuda_empty_cache();
/// The size class a request of `bytes` is rounded to (exposed for tests; GPU-free).
std::size_t cuda_size_class(std::size_t bytes);
/// Live cuDNN + cuBLAS handles over all threads and streams (for tests: they die with
/// their stream or thread).
std::size_t cuda_live_library_handles();

struct CudaMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
/// cudaMemGetInfo for the current device (workspace limits, benchmarks).
CudaMemoryInfo cuda_memory_info();

// ---- copies -----------------------------------------------------------------------

/// A contiguous copy of `t` on `target`. host -> cuda and cuda -> host copy through the
/// calling thread's current stream and wait for it, so the result is ready on return.
/// Same device: a host tensor comes back as t.contiguous(); a contiguous device tensor
/// comes back as is (shared storage). A non-contiguous device tensor is rejected
/// (ValueError): make it contiguous on the device first.
Tensor to_device(const Tensor& t, DeviceKind target);

// ---- streams ----------------------------------------------------------------------

/// The calling thread's current stream: the one set by the innermost live
/// CurrentStreamGuard on this thread, else CUDA's per-thread default stream
/// (cudaStreamPerThread, which also orders against the legacy default stream).
void* current_stream();
/// Waits until all work queued on `stream` (nullptr: current_stream()) has finished.
void synchronize_stream(void* stream = nullptr);

/// An owned stream, e.g. one per compiled Function, so two Functions called from
/// different threads overlap on the GPU. Blocking with respect to the legacy default
/// stream, so plain cudaMemcpy elsewhere still orders correctly. Destroying it releases
/// the cuDNN / cuBLAS handles every thread bound to it; no thread may still use it then.
class CudaStream {
 public:
  CudaStream();  ///< throws DeviceError without a GPU
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void* get() const { return stream_; }
  void synchronize() const { synchronize_stream(stream_); }

 private:
  void* stream_ = nullptr;
};

/// Makes `stream` the calling thread's current stream until destroyed (nests).
class CurrentStreamGuard {
 public:
  explicit CurrentStreamGuard(void* stream);
  ~CurrentStreamGuard();
  CurrentStreamGuard(const CurrentStreamGuard&) = delete;
  CurrentStreamGuard& operator=(const CurrentStreamGuard&) = delete;

 private:
  void* previous_;
};

// ---- timing -----------------------------------------------------------------------

/// Times GPU work on one stream with a pair of CUDA events (the meta-optimizer's clock):
///   CudaEventTimer t(stream); t.start(); run(...); t.stop(); double ms = t.elapsed_ms();
/// elapsed_ms() waits for the stop event. Resolution is about half a microsecond.
class CudaEventTimer {
 public:
  explicit CudaEventTimer(void* stream = nullptr);  ///< nullptr: current_stream()
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;
  void start();
  void stop();
  double elapsed_ms() const;

 private:
  void* stream_ = nullptr;
  void* start_ = nullptr;
  void* stop_ = nullptr;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace convgraph
