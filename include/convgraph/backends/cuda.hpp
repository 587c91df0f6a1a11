#pragma once
/// What the process knows about CUDA: whether convgraph was built with it, and whether a
/// usable GPU is present. Probed once; never throws.
#include <string>

namespace convgraph {

struct CudaInfo {
  bool built = false;       ///< compiled with CONVGRAPH_WITH_CUDA
  bool available = false;   ///< a GPU, driver and cuDNN handle can be used
  std::string reason;       ///< why not available (the CUDA/cuDNN error string)
  std::string device_name;  ///< e.g. "NVIDIA H200" when available
  int cudnn_version = 0;    ///< cudnnGetVersion(), also without a GPU
};

const CudaInfo& cuda_info();

}  // namespace convgraph
