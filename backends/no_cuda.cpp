// What a build without CUDA (CONVGRAPH_WITH_CUDA=OFF, or nvcc/cuDNN not found) has in place
// of backends/cuda/: no CUDA convolution algorithms, no CUDA kernels, and a cuda_info()
// that says why. Device placement never puts a node on the GPU in such a build (optimize()
// refuses device=cuda first).
#include "backends/cuda/conv_cuda.hpp"
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/kernel_registry.hpp"

#if !CONVGRAPH_WITH_CUDA

namespace convgraph {

void register_cuda_conv_algorithms(AlgorithmRegistry&) {}
void register_cuda_kernels(KernelRegistry&) {}

void cuda::apply_conv_epilogue_gpu(const ConvProblem& p, const ConvTensors&, const ConvContext&) {
  throw DeviceError(msg("conv epilogue on the GPU for ", p.key(), ": ", cuda_info().reason));
}

const CudaInfo& cuda_info() {
  static const CudaInfo info{false, false,
                             "convgraph was built without CUDA (CONVGRAPH_WITH_CUDA=OFF or nvcc/cuDNN not found)", "", 0};
  return info;
}

}  // namespace convgraph

#endif
