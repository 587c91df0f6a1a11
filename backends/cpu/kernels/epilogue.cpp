// The fused convolution epilogue (kernels/conv_epilogue.hpp) as a per-level entry point, for
// the algorithms whose inner loops are not per-level code (cpu.corrmm, whose GEMM is) and
// for the pass after run() of algorithms that do not fuse it (backends/cpu/conv_epilogue.cpp).
#include <cstdint>

#include "convgraph/core/dtype.hpp"
#include "convgraph/core/error.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

void conv_epilogue(const ConvEpilogue& ep, DType t, void* y, std::int64_t offset, std::int64_t k, std::int64_t len) {
  if (t == DType::float32) conv_epilogue_run(ep, static_cast<float*>(y), offset, k, len);
  else if (t == DType::float64) conv_epilogue_run(ep, static_cast<double*>(y), offset, k, len);
  else throw TypeError(msg("conv epilogue: dtype ", dtype_name(t), " (float32 and float64 only)"));
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
