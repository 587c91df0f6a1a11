// The fused convolution epilogue (kernels/conv_epilogue.hpp) as a per-level entry point, for
// the algorithms whose inner loops are not per-level code (cpu.corrmm, whose GEMM is) and
// for the pass after run() of algorithms that do not fuse it (backends/cpu/conv_epilogue.cpp).
#include <cstdint>

#include "convgraph/backends/conv_algorithm.hpp"  // before the level region: its std headers stay outside it
#include "convgraph/core/dtype.hpp"
#include "core/dtype_dispatch.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

void conv_epilogue(const ConvEpilogue& ep, DType t, void* y, std::int64_t offset, std::int64_t k, std::int64_t len) {
  detail::dispatch_float(t, "conv epilogue", [&](auto z) {
    conv_epilogue_run(ep, static_cast<decltype(z)*>(y), offset, k, len);
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
