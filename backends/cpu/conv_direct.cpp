// "cpu.direct": convolution by direct loops, every direction and parameter, no workspace.
// The kernels live in kernels/direct.cpp, compiled once per CPU level.
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph::cpu {

CONVGRAPH_ISA_DECLARE(void direct_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))

namespace {

class DirectAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.direct"; }
  bool fuses_epilogue() const override { return true; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_direct", "fast_run", "fast_compile"}; }
  Status applicable(const ConvProblem& p) const override {
    if (p.dtype == DType::float32 && (p.compute == DType::float32 || p.compute == DType::float64))
      return Status::ok();
    if (p.dtype == DType::float64 && p.compute == DType::float64) return Status::ok();
    return Status::no(msg("cpu.direct handles float32 (compute float32 or float64) and float64, not ",
                          dtype_name(p.dtype), " with compute ", dtype_name(p.compute)));
  }
  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    if (Status s = applicable(p); !s) throw TypeError(msg("cpu.direct: ", s.reason(), " (", p.key(), ")"));
    CONVGRAPH_ISA_CALL(direct_run, p, t, ctx);
  }
};

}  // namespace
}  // namespace convgraph::cpu

namespace convgraph {
std::shared_ptr<const ConvAlgorithm> make_cpu_direct_algorithm() {
  return std::make_shared<cpu::DirectAlgorithm>();
}
}  // namespace convgraph
