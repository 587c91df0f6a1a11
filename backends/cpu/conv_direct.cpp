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
  /// Register-blocked loops over the operands in place: no extra traffic, but a lower
  /// fraction of peak than a GEMM (lower still in the gradients, whose loops scatter or
  /// reduce), falling as the filter's channel or position counts get small.
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    const double base = p.direction == ConvDirection::forward       ? 0.35
                        : p.direction == ConvDirection::grad_inputs ? 0.12
                                                                    : 0.15;
    const auto sat = [](std::int64_t x) { return static_cast<double>(x) / static_cast<double>(x + 8); };
    const double eff = base * sat(p.Kg()) * sat(p.Cg() * p.kernel_numel());
    return p.flops() / (m.flops_per_s(computes_in_float64(p)) * eff) + operand_bytes(p) / m.bytes_per_s() +
           kConvCallSeconds;
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
