// The CUDA algorithm list, in default priority order: cuDNN (every legacy algorithm,
// each direction's robust general algorithms first), then cuda.corrmm (the catch-all:
// any geometry, float32/float64), then cuda.fft (opt-in through its conv_fft tag).
// The CUDA kernels of the other DSL ops (elementwise, reductions, softmax, matmul) are
// registered in the KernelRegistry by register_cuda_kernels() (op_kernels.cpp).
#include "backends/cuda/registration.hpp"

namespace convgraph {

void register_cuda_conv_algorithms(AlgorithmRegistry& r) {
  cuda::register_cudnn_algorithms(r);
  cuda::register_corrmm_algorithm(r);
  cuda::register_fft_algorithm(r);
}

}  // namespace convgraph
