#pragma once
/// What the process knows about CUDA: whether convgraph was built with it, and whether a
/// usable GPU is present. Probed once; never throws.
#include <string>

#include "convgraph/core/error.hpp"

namespace convgraph {

/// A CUDA failure that leaves the process's device context unusable (CUDA's "sticky"
/// errors: an illegal address, a kernel trap or assertion, an uncorrectable ECC error...):
/// every later CUDA call fails the same way until the process restarts. Code that
/// catches DeviceError to try something else (the meta-optimizer timing candidates)
/// rethrows this one instead of falling back.
class DeviceContextError : public DeviceError {
  using DeviceError::DeviceError;
};

struct CudaInfo {
  bool built = false;       ///< compiled with CONVGRAPH_WITH_CUDA
  bool available = false;   ///< a GPU, driver and cuDNN handle can be used
  std::string reason;       ///< why not available (the CUDA/cuDNN error string)
  std::string device_name;  ///< e.g. "NVIDIA H200" when available
  int cudnn_version = 0;    ///< cudnnGetVersion(), also without a GPU
};

const CudaInfo& cuda_info();

}  // namespace convgraph
