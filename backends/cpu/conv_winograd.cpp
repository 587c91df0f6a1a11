// "cpu.winograd": Winograd F(4x4, 3x3) for 2D 3x3 stride-1 convolutions, forward and
// grad-inputs, float32. The kernels (and why F(4x4, 3x3)) are in kernels/winograd.cpp,
// compiled once per CPU level.
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph {
namespace cpu {
CONVGRAPH_ISA_DECLARE(std::size_t winograd_workspace_bytes(const ConvProblem& p))
CONVGRAPH_ISA_DECLARE(void winograd_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))
}  // namespace cpu

namespace {

class WinogradConv final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.winograd"; }
  bool fuses_epilogue() const override { return true; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_winograd", "fast_run"}; }

  Status applicable(const ConvProblem& p) const override {
    if (p.direction == ConvDirection::grad_weights)
      return Status::no("cpu.winograd: grad_weights is not implemented (forward and grad_inputs only)");
    if (p.ndim != 2) return Status::no(msg("cpu.winograd: ", p.ndim, " spatial axes (2D only)"));
    if (p.dtype != DType::float32 || p.compute != DType::float32)
      return Status::no(msg("cpu.winograd: dtype ", dtype_name(p.dtype), "/", dtype_name(p.compute),
                            " (float32 only)"));
    if (p.kernel[0] != 3 || p.kernel[1] != 3)
      return Status::no(msg("cpu.winograd: kernel ", p.kernel[0], "x", p.kernel[1], " (3x3 only)"));
    if (p.stride[0] != 1 || p.stride[1] != 1)
      return Status::no(msg("cpu.winograd: stride ", p.stride[0], "x", p.stride[1], " (stride 1 only)"));
    if (p.dilation[0] != 1 || p.dilation[1] != 1)
      return Status::no(msg("cpu.winograd: dilation ", p.dilation[0], "x", p.dilation[1], " (dilation 1 only)"));
    const std::size_t need = workspace_bytes(p);
    if (need > p.workspace_limit)
      return Status::no(msg("cpu.winograd: needs ", need, " bytes of workspace, over the limit of ", p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    if (p.ndim != 2 || p.direction == ConvDirection::grad_weights) return 0;
    return CONVGRAPH_ISA_ANY(winograd_workspace_bytes)(p);  // the same at every level
  }

  /// F(4x4, 3x3): per 4x4 tile of the written image, 36 transform-domain products per
  /// channel pair (against 144 direct), done as 36 GEMMs over the tiles; the input and
  /// output transforms (about 16 operations per transform-domain element) stream once.
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    const Axes3& image = p.direction == ConvDirection::forward ? p.out : p.in;
    const std::int64_t tiles = ((image[0] + 3) / 4) * ((image[1] + 3) / 4) * p.N;
    const std::int64_t c_in = p.direction == ConvDirection::forward ? p.Cg() : p.Kg();
    const std::int64_t c_out = p.direction == ConvDirection::forward ? p.Kg() : p.Cg();
    const double gemm = 2.0 * 36 * static_cast<double>(tiles) * static_cast<double>(c_in * c_out * p.G);
    const double elements = 36.0 * static_cast<double>(tiles) * static_cast<double>(p.C + p.K);
    const double flops = m.flops_per_s();
    return gemm / (flops * gemm_efficiency(c_out, tiles, c_in)) + 16 * elements / (flops * 0.2) +
           (4 * elements + operand_bytes(p)) / m.bytes_per_s() + kConvCallSeconds;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    const Status s = applicable(p);
    if (!s) throw ValueError(msg("cpu.winograd: cannot run ", p.key(), ": ", s.reason()));
    CONVGRAPH_ISA_CALL(winograd_run, p, t, ctx);
  }
};

}  // namespace

std::shared_ptr<const ConvAlgorithm> make_cpu_winograd_algorithm() { return std::make_shared<WinogradConv>(); }

}  // namespace convgraph
