// Per-thread, per-stream cuDNN and cuBLAS handles (see cuda_handles.hpp).
#include "backends/cuda/cuda_handles.hpp"

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda/block_cache.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "convgraph/backends/cuda.hpp"
#include "backends/cuda/device.hpp"

namespace convgraph::cuda {

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream ? stream : current_stream());
}

void require_gpu(const char* who) {
  const CudaInfo& info = cuda_info();
  if (!info.available) throw DeviceError(msg(who, ": no usable GPU: ", info.reason));
}

namespace {

struct Handles {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
};

/// Handles by (stream, thread): a handle must not be used by two threads at once, and
/// cudaStreamPerThread names a different stream in each thread. Released with their
/// stream (CudaStream's destructor) or their thread, whichever ends first.
class HandleRegistry {
 public:
  struct Key {
    cudaStream_t stream;
    std::uint64_t thread;
    bool operator==(const Key&) const = default;
  };

  Handles find(const Key& k) {
    std::lock_guard lock(mu_);
    auto it = map_.find(k);
    return it == map_.end() ? Handles{} : it->second;
  }
  // Only the key's own thread adds to its entry, so find-then-set needs no wider lock.
  void set(const Key& k, cudnnHandle_t h) {
    std::lock_guard lock(mu_);
    map_[k].cudnn = h;
  }
  void set(const Key& k, cublasHandle_t h) {
    std::lock_guard lock(mu_);
    map_[k].cublas = h;
  }
  template <class Match>
  void release(Match match) {
    std::vector<Handles> dead;
    {
      std::lock_guard lock(mu_);
      for (auto it = map_.begin(); it != map_.end();) {
        if (match(it->first)) {
          dead.push_back(it->second);
          it = map_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Handles& h : dead) {
      if (h.cudnn) cudnnDestroy(h.cudnn);
      if (h.cublas) cublasDestroy(h.cublas);
    }
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& [k, h] : map_) n += (h.cudnn ? 1 : 0) + (h.cublas ? 1 : 0);
    return n;
  }

 private:
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.stream) ^ (std::hash<std::uint64_t>()(k.thread) * 0x9e3779b97f4a7c15ULL);
    }
  };
  std::mutex mu_;
  std::unordered_map<Key, Handles, KeyHash> map_;
};

// Leaked: thread-exit cleanup of the main thread may run during static destruction.
HandleRegistry& registry() {
  static auto* r = new HandleRegistry;
  return *r;
}

/// Releases the calling thread's handles when it exits (for the main thread: during
/// exit(), before the CUDA runtime's own teardown, when destroying handles is legal).
struct ThreadHandles {
  ~ThreadHandles() {
    const std::uint64_t me = this_thread_serial();
    registry().release([me](const HandleRegistry::Key& k) { return k.thread == me; });
  }
};

HandleRegistry::Key key_for(cudaStream_t stream) {
  thread_local ThreadHandles at_exit;
  (void)at_exit;
  return {stream, this_thread_serial()};
}

}  // namespace

cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  const HandleRegistry::Key key = key_for(stream);
  if (cudnnHandle_t h = registry().find(key).cudnn) return h;
  require_gpu("cudnn_handle");
  cudnnHandle_t h = nullptr;
  CG_CUDNN_CHECK(cudnnCreate(&h));
  const cudnnStatus_t st = cudnnSetStream(h, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    CG_CUDNN_CHECK(st);
  }
  registry().set(key, h);
  return h;
}

cublasHandle_t cublas_handle(cudaStream_t stream) {
  const HandleRegistry::Key key = key_for(stream);
  if (cublasHandle_t h = registry().find(key).cublas) return h;
  require_gpu("cublas_handle");
  cublasHandle_t h = nullptr;
  CG_CUBLAS_CHECK(cublasCreate(&h));
  // The default math mode keeps SGEMM in full fp32 (TF32 needs an explicit opt-in),
  // which is what a float32 compute type promises.
  const cublasStatus_t st = cublasSetStream(h, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    CG_CUBLAS_CHECK(st);
  }
  registry().set(key, h);
  return h;
}

void release_stream_handles(cudaStream_t stream) {
  registry().release([stream](const HandleRegistry::Key& k) { return k.stream == stream; });
}

std::size_t live_handle_count() { return registry().count(); }

}  // namespace convgraph::cuda

std::size_t convgraph::cuda_live_library_handles() { return cuda::live_handle_count(); }
