// CUDA probe, caching device allocator, host<->device copies, streams and event timer.
#include "backends/cuda/device.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <vector>

#include "backends/cuda/block_cache.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "convgraph/backends/cuda.hpp"

namespace convgraph {

// ---- probe ------------------------------------------------------------------------

namespace {
CudaInfo probe_cuda() {
  CudaInfo info;
  info.built = true;
  info.cudnn_version = static_cast<int>(cudnnGetVersion());  // works without a GPU
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    info.reason = msg("cudaGetDeviceCount failed: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), " = ",
                      static_cast<int>(e), ")");
    return info;
  }
  if (count == 0) {
    info.reason = "cudaGetDeviceCount found no CUDA device";
    return info;
  }
  cudaDeviceProp prop{};
  const cudaError_t pe = cudaGetDeviceProperties(&prop, 0);
  if (pe != cudaSuccess) {
    (void)cudaGetLastError();
    info.reason = msg("cudaGetDeviceProperties failed: ", cudaGetErrorString(pe));
    return info;
  }
  info.device_name = msg(prop.name, " (sm_", prop.major, prop.minor, ")");
  // A cuDNN handle is what the conv_dnn algorithms need; creating one also proves the
  // driver, the device and cuDNN's sub-libraries fit together.
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS) {
    info.reason = msg("cudnnCreate failed: ", cudnnGetErrorString(st), " (", static_cast<int>(st), ")");
    return info;
  }
  cudnnDestroy(h);
  info.available = true;
  return info;
}
}  // namespace

const CudaInfo& cuda_info() {
  static const CudaInfo info = [] {
    try {
      return probe_cuda();
    } catch (...) {  // never throw from the probe, whatever a library does
      CudaInfo i;
      i.built = true;
      i.reason = "CUDA probe failed with an exception";
      return i;
    }
  }();
  return info;
}

// ---- caching allocator --------------------------------------------------------------

std::size_t cuda_size_class(std::size_t bytes) {
  constexpr std::size_t kMin = 512;
  if (bytes <= kMin) return kMin;
  // Four classes per power of two: round up to a multiple of 2^(floor(log2(bytes-1)) - 2).
  const int top = std::bit_width(bytes - 1) - 1;
  const std::size_t step = std::size_t{1} << (top - 2);
  return (bytes + step - 1) / step * step;
}

namespace {

/// Events for the block cache, recycled through a pool (creating one costs microseconds).
class CudaStreamClock final : public cuda::StreamClock {
 public:
  void* record(const cuda::StreamKey& s) override {
    cudaEvent_t ev = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!pool_.empty()) {
        ev = pool_.back();
        pool_.pop_back();
      }
    }
    if (!ev && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    // Another thread's per-thread default stream cannot be named from here: the legacy
    // default stream waits for every blocking stream, that one included (conservative).
    const bool foreign = s.thread != 0 && s.thread != cuda::this_thread_serial();
    const cudaStream_t stream = foreign ? cudaStreamLegacy : static_cast<cudaStream_t>(s.stream);
    if (cudaEventRecord(ev, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      cudaEventDestroy(ev);
      return nullptr;
    }
    return ev;
  }
  bool done(void* event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();  // cudaErrorNotReady, or a failure: not reusable yet either way
    return false;
  }
  void release(void* event) override {
    std::lock_guard lock(mu_);
    pool_.push_back(static_cast<cudaEvent_t>(event));
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> pool_;
};

/// The stream identity of work queued on `stream` by the calling thread.
cuda::StreamKey stream_key(void* stream) {
  const bool per_thread = stream == static_cast<void*>(cudaStreamPerThread);
  return cuda::StreamKey{stream, per_thread ? cuda::this_thread_serial() : 0};
}

class CachingAllocator {
 public:
  void* allocate(std::size_t cls, const cuda::StreamKey& stream) {
    if (void* p = cache_.take(cls, stream)) {
      std::lock_guard lock(mu_);
      note_in_use(cls);
      ++stats_.cache_hits;
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      empty_cache();
      e = cudaMalloc(&p, cls);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      const CudaAllocatorStats s = stats();
      throw MemoryError(msg("allocate_cuda: out of GPU memory allocating ", cls, " bytes (", s.bytes_in_use,
                            " bytes in use by convgraph, cache emptied)"));
    }
    CG_CUDA_CHECK(e);
    std::lock_guard lock(mu_);
    ++stats_.device_allocations;
    note_in_use(cls);
    return p;
  }

  /// Called from Storage deleters, so it never throws: a block that cannot be cached
  /// is leaked rather than reused unsafely.
  void release(void* p, std::size_t cls, const cuda::StreamKey& stream) noexcept {
    try {
      cache_.put(p, cls, stream);
    } catch (...) {
    }
    std::lock_guard lock(mu_);
    stats_.bytes_in_use -= cls;
  }

  void forget_stream(void* stream) { cache_.forget_stream(stream); }

  void empty_cache() {
    const auto blocks = cache_.take_all();
    if (blocks.empty()) return;
    // Kernels queued before a block was freed may still run: wait for them first.
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    for (const auto& [p, cls] : blocks) cudaFree(p);
  }

  CudaAllocatorStats stats() {
    std::lock_guard lock(mu_);
    CudaAllocatorStats s = stats_;
    s.bytes_cached = cache_.cached_bytes();
    return s;
  }

 private:
  void note_in_use(std::size_t cls) {
    stats_.bytes_in_use += cls;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  }
  CudaStreamClock clock_;
  cuda::BlockCache cache_{clock_};
  std::mutex mu_;
  CudaAllocatorStats stats_;
};

// Deliberately leaked: Storage objects may die during static destruction, after which
// a destroyed pool would be touched; the driver reclaims everything at process exit.
CachingAllocator& pool() {
  static CachingAllocator* p = new CachingAllocator;
  return *p;
}

}  // namespace

std::shared_ptr<Storage> allocate_cuda(std::size_t bytes) {
  cuda::require_gpu("allocate_cuda");
  const std::size_t cls = cuda_size_class(bytes);
  const cuda::StreamKey stream = stream_key(current_stream());
  auto s = std::make_shared<Storage>();
  s->data = pool().allocate(cls, stream);
  s->bytes = bytes;
  s->device = DeviceKind::cuda;
  s->deleter = [cls, stream](void* p) { pool().release(p, cls, stream); };
  return s;
}

CudaAllocatorStats cuda_allocator_stats() { return pool().stats(); }

void cuda_empty_cache() {
  if (cuda_info().available) pool().empty_cache();
}

CudaMemoryInfo cuda_memory_info() {
  cuda::require_gpu("cuda_memory_info");
  CudaMemoryInfo m;
  CG_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

// ---- copies -------------------------------------------------------------------------

Tensor to_device(const Tensor& t, DeviceKind target) {
  if (!t.defined()) throw ValueError("to_device: the tensor is undefined (default-constructed)");
  const DeviceKind from = t.device();
  if (from == target) {
    if (target == DeviceKind::cpu) return t.contiguous();
    if (!t.is_contiguous())
      throw ValueError(msg("to_device: device tensor of shape ", shape_to_string(t.shape()),
                           " is not contiguous; make it contiguous on the GPU first"));
    return t;
  }
  cuda::require_gpu("to_device");
  const cudaStream_t stream = cuda::as_stream(nullptr);
  if (target == DeviceKind::cuda) {
    const Tensor src = t.contiguous();
    Tensor dst(allocate_cuda(src.nbytes()), src.dtype(), src.shape());
    if (src.nbytes() > 0) {
      CG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice, stream));
      // Pageable host memory: the copy must finish before `src` may be released.
      CG_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return dst;
  }
  if (!t.is_contiguous())
    throw ValueError(msg("to_device: device tensor of shape ", shape_to_string(t.shape()),
                         " is not contiguous; make it contiguous on the GPU first"));
  Tensor dst(t.dtype(), t.shape());
  if (t.nbytes() > 0) {
    CG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, stream));
    CG_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return dst;
}

// ---- streams --------------------------------------------------------------------------

namespace {
thread_local void* tls_current_stream = nullptr;  // nullptr: cudaStreamPerThread
}

void* current_stream() {
  return tls_current_stream ? tls_current_stream : static_cast<void*>(cudaStreamPerThread);
}

void synchronize_stream(void* stream) {
  cuda::require_gpu("synchronize_stream");
  CG_CUDA_CHECK(cudaStreamSynchronize(cuda::as_stream(stream)));
}

CudaStream::CudaStream() {
  cuda::require_gpu("CudaStream");
  cudaStream_t s = nullptr;
  CG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
  stream_ = s;
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  cuda::release_stream_handles(static_cast<cudaStream_t>(stream_));
  pool().forget_stream(stream_);  // a later stream may get the same handle
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

CurrentStreamGuard::CurrentStreamGuard(void* stream) : previous_(tls_current_stream) {
  tls_current_stream = stream;
}
CurrentStreamGuard::~CurrentStreamGuard() { tls_current_stream = previous_; }

// ---- timer ----------------------------------------------------------------------------

CudaEventTimer::CudaEventTimer(void* stream) {
  cuda::require_gpu("CudaEventTimer");
  stream_ = cuda::as_stream(stream);
  cudaEvent_t a = nullptr, b = nullptr;
  CG_CUDA_CHECK(cudaEventCreate(&a));
  const cudaError_t e = cudaEventCreate(&b);
  if (e != cudaSuccess) {
    cudaEventDestroy(a);
    CG_CUDA_CHECK(e);
  }
  start_ = a;
  stop_ = b;
}

CudaEventTimer::~CudaEventTimer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void CudaEventTimer::start() {
  CG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream_)));
  started_ = true;
  stopped_ = false;
}

void CudaEventTimer::stop() {
  if (!started_) throw RuntimeError("CudaEventTimer::stop: start() was not called");
  CG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream_)));
  stopped_ = true;
}

double CudaEventTimer::elapsed_ms() const {
  if (!stopped_) throw RuntimeError("CudaEventTimer::elapsed_ms: call start() and stop() first");
  CG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.f;
  CG_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return static_cast<double>(ms);
}

}  // namespace convgraph
