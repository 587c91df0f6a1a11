// Built instead of backends/cuda/* when convgraph is configured without CUDA.
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"

namespace convgraph {

void register_cuda_conv_algorithms(AlgorithmRegistry&) {}

const CudaInfo& cuda_info() {
  static const CudaInfo info{false, false, "convgraph was built without CUDA (CONVGRAPH_WITH_CUDA=OFF or nvcc/cuDNN not found)", "", 0};
  return info;
}

}  // namespace convgraph
