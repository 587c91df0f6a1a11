// "cpu.fft": FFT convolution (stride 1, any rank, dilation, padding, groups, direction).
// The plan and the kernels are in kernels/fft.cpp, compiled once per CPU level.
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph {
namespace cpu {
CONVGRAPH_ISA_DECLARE(Status fft_plan_status(const ConvProblem& p))
CONVGRAPH_ISA_DECLARE(std::size_t fft_workspace_bytes(const ConvProblem& p))
CONVGRAPH_ISA_DECLARE(void fft_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))
}  // namespace cpu

namespace {

class FftConv final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.fft"; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_fft"}; }

  Status applicable(const ConvProblem& p) const override {
    if (p.dtype != DType::float32 && p.dtype != DType::float64)
      return Status::no(msg("cpu.fft: dtype ", dtype_name(p.dtype), " (float32 and float64 only)"));
    if (p.ndim < 1 || p.ndim > 3) return Status::no(msg("cpu.fft: ", p.ndim, " spatial axes (1 to 3 only)"));
    for (int a = 0; a < p.ndim; ++a)
      if (p.stride[static_cast<std::size_t>(a)] != 1)
        return Status::no(msg("cpu.fft: stride ", p.stride[static_cast<std::size_t>(a)], " on spatial axis ", a,
                              " (FFT convolution needs stride 1)"));
    return CONVGRAPH_ISA_ANY(fft_plan_status)(p);  // the same at every level
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    return CONVGRAPH_ISA_ANY(fft_workspace_bytes)(p);
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    const Status s = applicable(p);
    if (!s) throw ValueError(msg("cpu.fft: cannot run ", p.key(), ": ", s.reason()));
    CONVGRAPH_ISA_CALL(fft_run, p, t, ctx);
  }
};

}  // namespace

std::shared_ptr<const ConvAlgorithm> make_cpu_fft_algorithm() { return std::make_shared<FftConv>(); }

}  // namespace convgraph
