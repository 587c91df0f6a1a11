#pragma once
// Private to backends/cpu: the blocked layout's hot loops (backends/cpu/kernels/blocked.cpp,
// compiled once per CPU level) and the registration of its kernels (blocked_kernels.cpp).
#include <cstdint>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph {

class KernelRegistry;
namespace detail {
struct PoolParams;
}

namespace cpu {
/// The blocked forward convolution (ops/blocked_info.hpp, BlockedConvOp): x, y and the
/// residual blocked by 16, w (K, C, kernel...), bias (K,) or null; `ws` holds
/// blocked_conv_workspace_floats(p) floats.
CONVGRAPH_ISA_DECLARE(void blocked_conv_run(const ConvProblem& p, const float* x, const float* w,
                                            const float* bias, const float* residual, bool relu, float* y,
                                            float* ws, const ConvContext& ctx))
/// Pooling of a blocked tensor (N * Cb planes of in[0] x in[1] x in[2] pixels of 16
/// channels; internal axes as PoolParams) into out[0] x out[1] x out[2] pixels.
CONVGRAPH_ISA_DECLARE(void blocked_pool_run(const detail::PoolParams& p, std::int64_t planes,
                                            const std::int64_t* in, const std::int64_t* out, const float* x,
                                            float* y, const ConvContext& ctx))
}  // namespace cpu

void register_cpu_blocked_kernels(KernelRegistry& r);

}  // namespace convgraph
