// The CUDA algorithm list, in default priority order: cuDNN (every legacy algorithm,
// each direction's robust general algorithms first), then cuda.corrmm (the catch-all:
// any geometry, float32/float64), then cuda.fft (opt-in through its conv_fft tag).
//
// Not here yet: GPU kernels for the DSL's other ops (elementwise, reductions, pooling,
// upsampling). The op layer is still being written; their CUDA kernels will follow it
// and can reuse kernels.hpp's launch conventions and tensor_kernels.cu's gather.
#include "backends/cuda/registration.hpp"

namespace convgraph {

void register_cuda_conv_algorithms(AlgorithmRegistry& r) {
  cuda::register_cudnn_algorithms(r);
  cuda::register_corrmm_algorithm(r);
  cuda::register_fft_algorithm(r);
}

}  // namespace convgraph
