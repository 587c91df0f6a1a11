#pragma once
/// Turns CUDA runtime, cuDNN, cuBLAS and cuFFT status codes into convgraph::DeviceError.
/// Private to backends/cuda (it includes the vendor headers). Kept C++17-clean because
/// the .cu files (compiled by nvcc as C++17) include it too.
///
/// Message shape, e.g.:
///   cuDNN: cudnnConvolutionForward failed: CUDNN_STATUS_BAD_PARAM (2000) <cuDNN's detail>
///   [cudnnConvolutionForward(h, &alpha, ...)] at backends/cuda/conv_cudnn.cpp:123
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cufft.h>

#include <string>

#include "convgraph/core/error.hpp"

namespace convgraph::cuda {

/// Builds the message and throws DeviceError, or DeviceContextError when `lost` names the
/// sticky CUDA error that corrupted the context (cudaSuccess: none). `api` is the library
/// ("CUDA", "cuDNN", ...), `code_name` the status enumerator name, `detail` the library's
/// explanation.
[[noreturn]] void throw_device_error(const char* api, const char* expr, long long code,
                                     const std::string& code_name, const std::string& detail,
                                     const char* file, int line, cudaError_t lost = cudaSuccess);

/// Whether CUDA documents `e` as leaving the context unusable for the rest of the process
/// (illegal address, launch failure, assertion, uncorrectable ECC, ...).
bool cuda_error_is_sticky(cudaError_t e);
/// The sticky error the context is in, or cudaSuccess. Asked after a library call failed
/// with an execution or internal status, to tell a dead context from an ordinary failure;
/// it waits for the device, so only on such failure paths.
cudaError_t sticky_context_error();

/// "CUFFT_INVALID_SIZE" etc.; cuFFT has no string function of its own.
const char* cufft_result_name(cufftResult r);
/// cudnnGetErrorString plus cudnnGetLastErrorString's detail when it has one.
std::string cudnn_error_detail(cudnnStatus_t s);
/// True for every cuDNN 9 "not supported" status (the 3000 category).
inline bool cudnn_not_supported(cudnnStatus_t s) { return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED; }

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw_device_error("CUDA", expr, e, cudaGetErrorName(e), cudaGetErrorString(e), file, line,
                     cuda_error_is_sticky(e) ? e : cudaSuccess);
}
// The libraries report a kernel fault as an execution (or internal) failure of their own.
inline bool cudnn_may_be_sticky(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_EXECUTION_FAILED || CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_INTERNAL_ERROR;
}
inline void check_cudnn(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const std::string detail = cudnn_error_detail(s);
  throw_device_error("cuDNN", expr, s, cudnnGetErrorString(s), detail, file, line,
                     cudnn_may_be_sticky(s) ? sticky_context_error() : cudaSuccess);
}
inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const bool may = s == CUBLAS_STATUS_EXECUTION_FAILED || s == CUBLAS_STATUS_INTERNAL_ERROR;
  throw_device_error("cuBLAS", expr, s, cublasGetStatusName(s), cublasGetStatusString(s), file, line,
                     may ? sticky_context_error() : cudaSuccess);
}
inline void check_cufft(cufftResult r, const char* expr, const char* file, int line) {
  if (r == CUFFT_SUCCESS) return;
  const bool may = r == CUFFT_EXEC_FAILED || r == CUFFT_INTERNAL_ERROR;
  throw_device_error("cuFFT", expr, r, cufft_result_name(r), "", file, line, may ? sticky_context_error() : cudaSuccess);
}

}  // namespace convgraph::cuda

#define CG_CUDA_CHECK(expr) ::convgraph::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define CG_CUDNN_CHECK(expr) ::convgraph::cuda::check_cudnn((expr), #expr, __FILE__, __LINE__)
#define CG_CUBLAS_CHECK(expr) ::convgraph::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)
#define CG_CUFFT_CHECK(expr) ::convgraph::cuda::check_cufft((expr), #expr, __FILE__, __LINE__)
/// After a kernel launch: reports a bad launch configuration or a missing kernel image.
#define CG_CUDA_CHECK_LAUNCH() ::convgraph::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
