#pragma once
// Private to the backends layer and above: applying a forward convolution's fused epilogue
// (ConvEpilogue) from code that is not per-level.
#include <cstdint>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph {
namespace cpu {
// The run of output channel k starting at flat element `offset` of y (`len` elements, y
// points at that run): y = act((y + bias[k]) + residual[offset ...]).
CONVGRAPH_ISA_DECLARE(void conv_epilogue(const ConvEpilogue& ep, DType t, void* y, std::int64_t offset,
                                         std::int64_t k, std::int64_t len))
}  // namespace cpu

/// Applies t.epilogue to the whole output t.y of the host forward problem p, one pass over
/// the (image, channel) planes in parallel: for algorithms that do not fuse it.
void apply_conv_epilogue(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx);

}  // namespace convgraph
