// "cpu.depthwise": grouped convolutions with one input channel per group (C/G == 1).
// The kernels live in kernels/depthwise.cpp, compiled once per CPU level.
#include <limits>

#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "core/checked_math.hpp"

namespace convgraph::cpu {

CONVGRAPH_ISA_DECLARE(void depthwise_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))

namespace {

// Each thread copies one padded plane (grad inputs: one per channel multiplier) into a
// private buffer. Huge padding or dilation makes that buffer mostly zeros and possibly
// larger than memory; such problems are left to the other algorithms.
constexpr std::int64_t kMaxThreadBufferBytes = std::int64_t{256} << 20;

Status buffer_fits(const ConvProblem& p) {
  std::int64_t elements = p.direction == ConvDirection::grad_inputs ? p.K / p.G : 1;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    // The buffer's extent on this axis (kernels/depthwise.cpp, PlaneGeom::finish): the
    // reach of the outputs' windows; grad inputs runs with stride 1 over the input. On
    // the innermost axis the outputs are rounded up to whole vectors (16 lanes at most)
    // and the row holds one phase per stride step. Per-axis values are below 2^31
    // (ConvProblem::make), so each extent fits; only the product is checked.
    const bool gi = p.direction == ConvDirection::grad_inputs;
    const std::int64_t out = gi ? p.in[ua] : p.out[ua], s = gi ? 1 : p.stride[ua];
    const std::int64_t taps = (p.kernel[ua] - 1) * p.dilation[ua];
    const std::int64_t extent = a + 1 == p.ndim ? s * ((out + 15) / 16 * 16 + taps / s + 1) : (out - 1) * s + taps + 1;
    if (!detail::try_mul(elements, extent, elements)) elements = std::numeric_limits<std::int64_t>::max();
  }
  std::int64_t bytes = 0;
  if (!detail::try_mul(elements, static_cast<std::int64_t>(dtype_size(p.dtype)), bytes) || bytes > kMaxThreadBufferBytes)
    return Status::no(msg("cpu.depthwise would need a per-thread plane buffer of more than ", kMaxThreadBufferBytes,
                          " bytes (padding, stride or dilation too large for it)"));
  // The buffer is this algorithm's scratch memory, so the workspace limit applies to it.
  if (static_cast<std::size_t>(bytes) > p.workspace_limit)
    return Status::no(msg("cpu.depthwise needs a per-thread plane buffer of ", bytes,
                          " bytes, above workspace_limit ", p.workspace_limit));
  return Status::ok();
}

class DepthwiseAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.depthwise"; }
  bool fuses_epilogue() const override { return true; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_direct", "fast_run", "fast_compile"}; }
  Status applicable(const ConvProblem& p) const override {
    if (p.Cg() != 1)
      return Status::no(msg("cpu.depthwise needs one input channel per group (C/G == 1), got C/G = ", p.Cg(),
                            " (C = ", p.C, ", groups = ", p.G, ")"));
    // C == 1 without groups is a dense convolution: corrmm/direct stay its default choice.
    if (p.G == 1) return Status::no("cpu.depthwise handles grouped convolutions only (groups = 1 here)");
    if ((p.dtype == DType::float32 || p.dtype == DType::float64) && p.compute == p.dtype) return buffer_fits(p);
    return Status::no(msg("cpu.depthwise handles float32 and float64 with compute of the same type, not ",
                          dtype_name(p.dtype), " with compute ", dtype_name(p.compute)));
  }
  /// One channel per group: few multiply-adds per byte, so vector loops at a modest
  /// fraction of peak, more as more taps share each loaded row and less with a stride along
  /// rows (Zen 5, 2 threads, 8 images: 3x3 0.16, 5x5 0.26 and 7x7 0.24 of peak; 3x3 at
  /// stride 2 0.09), plus one pass over the operands.
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    const double taps = static_cast<double>(p.kernel_numel());
    const double eff = 0.3 * taps / (taps + 6) / static_cast<double>(p.stride[static_cast<std::size_t>(p.ndim - 1)]);
    return p.flops() / (m.flops_per_s(computes_in_float64(p)) * eff) + operand_bytes(p) / m.bytes_per_s() +
           kConvCallSeconds;
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
