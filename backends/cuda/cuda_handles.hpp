#pragma once
/// Library handles for the CUDA backend (private; includes vendor headers).
/// cuDNN and cuBLAS handles are not safe to share between threads, and binding a handle
/// to a stream is cheap but stateful, so each thread keeps one handle per stream it has
/// used. Handles die with their thread or their stream (release_stream_handles),
/// whichever ends first.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace convgraph::cuda {

/// ConvContext::stream (void*) as a cudaStream_t; nullptr means current_stream().
cudaStream_t as_stream(void* stream);
/// This thread's cuDNN handle bound to `stream` (created on first use).
cudnnHandle_t cudnn_handle(cudaStream_t stream);
/// This thread's cuBLAS handle bound to `stream` (created on first use).
cublasHandle_t cublas_handle(cudaStream_t stream);

/// Destroys every thread's handles bound to `stream`; called before the stream is
/// destroyed (CudaStream), when no thread may still be using it.
void release_stream_handles(cudaStream_t stream);
/// Live cuDNN + cuBLAS handles of all threads (for tests).
std::size_t live_handle_count();

/// Throws DeviceError("<who>: no usable GPU: <cuda_info().reason>") when there is none.
void require_gpu(const char* who);

/// Whether this binary's own kernels (sm_90 code / compute_90 PTX) can run on the
/// current device; `why` gets the CUDA error when not. Probed once. Defined in
/// tensor_kernels.cu.
bool own_kernels_loadable(std::string* why);

}  // namespace convgraph::cuda
