// The CPU kernel list of the non-convolution ops (KernelRegistry), one line per family.
// Called explicitly by KernelRegistry::builtin(), as register_cpu_conv_algorithms() is.
#include "backends/cpu/blocked.hpp"
#include "backends/cpu/kernels_cpu.hpp"
#include "backends/cpu/kernels_nn.hpp"
#include "convgraph/backends/kernel_registry.hpp"

namespace convgraph {

void register_cpu_kernels(KernelRegistry& r) {
  register_cpu_elementwise_kernels(r);  // unary, binary, where, cast
  register_cpu_fused_kernels(r);        // the fusion pass's fused elementwise op
  register_cpu_reduce_kernels(r);       // reduce, sum_to, broadcast_to, fill
  register_cpu_softmax_kernels(r);      // softmax, softmax_grad, take_class, scatter_class
  register_cpu_matmul_kernel(r);        // matmul (Eigen GEMM)
  register_cpu_pool_kernels(r);         // pool, pool_grad, max_pool_grad_grad
  register_cpu_channel_kernels(r);      // bias_add(_grad), global_avg_pool(_grad)
  register_cpu_random_kernels(r);       // random (RandomStream draws)
  register_cpu_batch_norm_kernels(r);   // batch_norm_stats, batch_norm, batch_norm_grad_sums, batch_norm_grad_x
  register_cpu_blocked_kernels(r);      // to_blocked, from_blocked, blocked_conv, blocked_pool
}

}  // namespace convgraph
