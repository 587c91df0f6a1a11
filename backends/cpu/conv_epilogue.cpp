// One pass of a forward convolution's epilogue over its whole output, for algorithms that
// do not apply it themselves (ConvAlgorithm::fuses_epilogue() false).
#include "backends/cpu/conv_epilogue.hpp"

#include "backends/cpu/conv_geometry.hpp"

namespace convgraph {

void apply_conv_epilogue(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  if (t.epilogue.empty()) return;
  if (p.direction != ConvDirection::forward)
    throw ValueError(msg("conv epilogue: only a forward convolution has one, not ", p.key()));
  const std::int64_t plane = p.out_numel(), elem = static_cast<std::int64_t>(dtype_size(p.dtype));
  cpu::parallel_over(ctx, p.N * p.K, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      CONVGRAPH_ISA_CALL(conv_epilogue, t.epilogue, p.dtype, static_cast<char*>(t.y) + i * plane * elem, i * plane,
                         i % p.K, plane);
  });
}

}  // namespace convgraph
