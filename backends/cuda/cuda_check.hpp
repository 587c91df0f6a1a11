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

/// Builds the message and throws DeviceError. `api` is the library ("CUDA", "cuDNN", ...),
/// `code_name` the status enumerator name, `detail` the library's explanation.
[[noreturn]] void throw_device_error(const char* api, const char* expr, long long code,
                                     const std::string& code_name, const std::string& detail,
                                     const char* file, int line);

/// "CUFFT_INVALID_SIZE" etc.; cuFFT has no string function of its own.
const char* cufft_result_name(cufftResult r);
/// cudnnGetErrorString plus cudnnGetLastErrorString's detail when it has one.
std::string cudnn_error_detail(cudnnStatus_t s);
/// True for every cuDNN 9 "not supported" status (the 3000 category).
inline bool cudnn_not_supported(cudnnStatus_t s) { return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED; }

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw_device_error("CUDA", expr, e, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
}
inline void check_cudnn(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw_device_error("cuDNN", expr, s, cudnnGetErrorString(s), cudnn_error_detail(s), file, line);
}
inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw_device_error("cuBLAS", expr, s, cublasGetStatusName(s), cublasGetStatusString(s), file, line);
}
inline void check_cufft(cufftResult r, const char* expr, const char* file, int line) {
  if (r == CUFFT_SUCCESS) return;
  throw_device_error("cuFFT", expr, r, cufft_result_name(r), "", file, line);
}

}  // namespace convgraph::cuda

#define CG_CUDA_CHECK(expr) ::convgraph::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define CG_CUDNN_CHECK(expr) ::convgraph::cuda::check_cudnn((expr), #expr, __FILE__, __LINE__)
#define CG_CUBLAS_CHECK(expr) ::convgraph::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)
#define CG_CUFFT_CHECK(expr) ::convgraph::cuda::check_cufft((expr), #expr, __FILE__, __LINE__)
/// After a kernel launch: reports a bad launch configuration or a missing kernel image.
#define CG_CUDA_CHECK_LAUNCH() ::convgraph::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
