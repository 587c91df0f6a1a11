// The CPU kernel list of the non-convolution ops (KernelRegistry), one line per family.
// Called explicitly by KernelRegistry::builtin(), as register_cpu_conv_algorithms() is.
#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"

namespace convgraph {

void register_cpu_kernels(KernelRegistry& r) {
  register_cpu_elementwise_kernels(r);  // unary, binary, where, cast
  register_cpu_fused_kernels(r);        // the fusion pass's fused elementwise op
}

}  // namespace convgraph
