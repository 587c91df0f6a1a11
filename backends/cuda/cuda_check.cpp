// Error messages for failed CUDA / cuDNN / cuBLAS / cuFFT calls (see cuda_check.hpp).
#include "backends/cuda/cuda_check.hpp"

#include <cstring>
#include <string_view>

#include "convgraph/backends/cuda.hpp"

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
                        const std::string& detail, const char* file, int line, cudaError_t lost) {
  std::string m = msg(api, ": ", function_of(expr), " failed: ", code_name, " (", code, ")");
  if (!detail.empty() && detail != code_name) m += msg(": ", detail);
  m += msg(" [", expr, "] at ", short_path(file), ":", line);
  if (lost == cudaSuccess) throw DeviceError(m);
  throw DeviceContextError(msg(m, "; the CUDA context is lost (", cudaGetErrorName(lost),
                               "): every later CUDA call in this process fails, restart it"));
}

bool cuda_error_is_sticky(cudaError_t e) {
  // The codes driver_types.h describes as leaving "the process in an inconsistent state",
  // plus the uncorrectable hardware errors.
  switch (static_cast<int>(e)) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorMpsClientTerminated:
    // By number: older CUDA 12 headers (a toolkit from wheels) may lack the names.
    case 226:  // cudaErrorContained
    case 721:  // cudaErrorTensorMemoryLeak
    case 911:  // cudaErrorExternalDevice
      return true;
    default:
      return false;
  }
}

cudaError_t sticky_context_error() {
  // A sticky error is returned by every later call; synchronising also surfaces a
  // kernel fault still in flight.
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return cudaSuccess;
  (void)cudaGetLastError();
  return cuda_error_is_sticky(e) ? e : cudaSuccess;
}

const char* cufft_result_name(cufftResult r) {
  switch (static_cast<int>(r)) {
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
    // By number: older cuFFT headers (CUDA 12 wheels) may lack the names.
    case 17: return "CUFFT_MISSING_DEPENDENCY";
    case 18: return "CUFFT_NVRTC_FAILURE";
    case 19: return "CUFFT_NVJITLINK_FAILURE";
    case 20: return "CUFFT_NVSHMEM_FAILURE";
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
