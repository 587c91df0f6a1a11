// Error messages for failed CUDA / cuDNN / cuBLAS / cuFFT calls (see cuda_check.hpp).
#include "backends/cuda/cuda_check.hpp"

#include <cstring>
#include <string_view>

namespace convgraph::cuda {

namespace {
/// "…/convgraph/backends/cuda/conv_cudnn.cpp" -> "backends/cuda/conv_cudnn.cpp": the build
/// passes absolute paths in __FILE__, which only add noise to a message.
std::string_view short_path(const char* file) {
  std::string_view f(file);
  const auto pos = f.rfind("backends/");
  return pos == std::string_view::npos ? f : f.substr(pos);
}

/// "cudnnConvolutionForward(h, ...)" -> "cudnnConvolutionForward".
std::string_view function_of(const char* expr) {
  std::string_view e(expr);
  const auto paren = e.find('(');
  return paren == std::string_view::npos ? e : e.substr(0, paren);
}
}  // namespace

void throw_device_error(const char* api, const char* expr, long long code, const std::string& code_name,
                        const std::string& detail, const char* file, int line) {
  std::string m = msg(api, ": ", function_of(expr), " failed: ", code_name, " (", code, ")");
  if (!detail.empty() && detail != code_name) m += msg(": ", detail);
  m += msg(" [", expr, "] at ", short_path(file), ":", line);
  throw DeviceError(m);
}

const char* cufft_result_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    case CUFFT_MISSING_DEPENDENCY: return "CUFFT_MISSING_DEPENDENCY";
    case CUFFT_NVRTC_FAILURE: return "CUFFT_NVRTC_FAILURE";
    case CUFFT_NVJITLINK_FAILURE: return "CUFFT_NVJITLINK_FAILURE";
    case CUFFT_NVSHMEM_FAILURE: return "CUFFT_NVSHMEM_FAILURE";
  }
  return "CUFFT_UNKNOWN_ERROR";
}

std::string cudnn_error_detail(cudnnStatus_t s) {
  // cuDNN 9 keeps a per-thread explanation of the last failure; it is far more useful
  // than the enumerator ("Conv: filter dims mismatch ...").
  char buf[512] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  std::string detail(buf, strnlen(buf, sizeof(buf)));
  (void)s;
  return detail;
}

}  // namespace convgraph::cuda
