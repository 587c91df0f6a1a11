// Per-thread, per-stream cuDNN and cuBLAS handles (see cuda_handles.hpp).
#include "backends/cuda/cuda_handles.hpp"

#include <unordered_map>

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

// One cache per thread. Destruction runs at thread exit (for the main thread: during
// exit(), before the CUDA runtime's own teardown), when destroying handles is still legal.
struct CudnnHandles {
  std::unordered_map<cudaStream_t, cudnnHandle_t> map;
  ~CudnnHandles() {
    for (auto& [s, h] : map) cudnnDestroy(h);
  }
};
struct CublasHandles {
  std::unordered_map<cudaStream_t, cublasHandle_t> map;
  ~CublasHandles() {
    for (auto& [s, h] : map) cublasDestroy(h);
  }
};

}  // namespace

cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  thread_local CudnnHandles handles;
  auto it = handles.map.find(stream);
  if (it != handles.map.end()) return it->second;
  require_gpu("cudnn_handle");
  cudnnHandle_t h = nullptr;
  CG_CUDNN_CHECK(cudnnCreate(&h));
  const cudnnStatus_t st = cudnnSetStream(h, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    CG_CUDNN_CHECK(st);
  }
  handles.map.emplace(stream, h);
  return h;
}

cublasHandle_t cublas_handle(cudaStream_t stream) {
  thread_local CublasHandles handles;
  auto it = handles.map.find(stream);
  if (it != handles.map.end()) return it->second;
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
  handles.map.emplace(stream, h);
  return h;
}

}  // namespace convgraph::cuda
