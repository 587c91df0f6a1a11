// CUDA probe, caching device allocator, host<->device copies, streams and event timer.
#include "backends/cuda/device.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

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

class CachingAllocator {
 public:
  void* allocate(std::size_t cls) {
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= cls;
        note_in_use(cls);
        ++stats_.cache_hits;
        return p;
      }
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

  void release(void* p, std::size_t cls) {
    std::lock_guard lock(mu_);
    free_[cls].push_back(p);
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
  }

  void empty_cache() {
    std::unordered_map<std::size_t, std::vector<void*>> blocks;
    {
      std::lock_guard lock(mu_);
      blocks.swap(free_);
      stats_.bytes_cached = 0;
    }
    // cudaFree waits for the device, so no queued kernel still uses a freed block.
    for (auto& [cls, list] : blocks)
      for (void* p : list) cudaFree(p);
  }

  CudaAllocatorStats stats() {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  void note_in_use(std::size_t cls) {
    stats_.bytes_in_use += cls;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  }
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
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
  auto s = std::make_shared<Storage>();
  s->data = pool().allocate(cls);
  s->bytes = bytes;
  s->device = DeviceKind::cuda;
  s->deleter = [cls](void* p) { pool().release(p, cls); };
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
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
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
