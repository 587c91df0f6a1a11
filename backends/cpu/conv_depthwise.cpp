// "cpu.depthwise": grouped convolutions with one input channel per group (C/G == 1).
// The kernels live in kernels/depthwise.cpp, compiled once per CPU level.
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph::cpu {

CONVGRAPH_ISA_DECLARE(void depthwise_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))

namespace {

class DepthwiseAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.depthwise"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_direct", "fast_run", "fast_compile"}; }
  Status applicable(const ConvProblem& p) const override {
    if (p.Cg() != 1)
      return Status::no(msg("cpu.depthwise needs one input channel per group (C/G == 1), got C/G = ", p.Cg(),
                            " (C = ", p.C, ", groups = ", p.G, ")"));
    // C == 1 without groups is a dense convolution: corrmm/direct stay its default choice.
    if (p.G == 1) return Status::no("cpu.depthwise handles grouped convolutions only (groups = 1 here)");
    if ((p.dtype == DType::float32 || p.dtype == DType::float64) && p.compute == p.dtype) return Status::ok();
    return Status::no(msg("cpu.depthwise handles float32 and float64 with compute of the same type, not ",
                          dtype_name(p.dtype), " with compute ", dtype_name(p.compute)));
  }
  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    if (Status s = applicable(p); !s) throw TypeError(msg("cpu.depthwise: ", s.reason(), " (", p.key(), ")"));
    CONVGRAPH_ISA_CALL(depthwise_run, p, t, ctx);
  }
};

}  // namespace
}  // namespace convgraph::cpu

namespace convgraph {
std::shared_ptr<const ConvAlgorithm> make_cpu_depthwise_algorithm() {
  return std::make_shared<cpu::DepthwiseAlgorithm>();
}
}  // namespace convgraph
