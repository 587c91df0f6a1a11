// "cpu.direct": convolution by direct loops, every direction and parameter. The kernels
// live in kernels/, compiled once per CPU level: float32 forward, grad inputs at stride 1
// and grad weights with enough destination channels take the channel-vectorised path
// (direct_kvec.cpp; its workspace holds the packed weights or grad weights' partial sums,
// and a zero-padded source); everything else the row engine (direct.cpp), which needs no
// workspace.
#include "backends/cpu/direct_kvec.hpp"
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

namespace convgraph::cpu {

CONVGRAPH_ISA_DECLARE(void direct_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))
CONVGRAPH_ISA_DECLARE(void direct_kvec_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))

namespace {

class DirectAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.direct"; }
  bool fuses_epilogue() const override { return true; }
  int version() const override { return 2; }  // 2: the channel-vectorised path
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_direct", "fast_run", "fast_compile"}; }
  Status applicable(const ConvProblem& p) const override {
    if (p.dtype == DType::float32 && (p.compute == DType::float32 || p.compute == DType::float64))
      return Status::ok();
    if (p.dtype == DType::float64 && p.compute == DType::float64) return Status::ok();
    return Status::no(msg("cpu.direct handles float32 (compute float32 or float64) and float64, not ",
                          dtype_name(p.dtype), " with compute ", dtype_name(p.compute)));
  }
  std::size_t workspace_bytes(const ConvProblem& p) const override {
    const KvecPlan pl(p);
    return pl.usable ? pl.workspace : 0;
  }

  /// The pixel-vector tiles' fraction of the peak on whole vectors, and each tile call's
  /// set-up in vector FMAs. A call runs kb x np FMAs a reduction step: a depthwise layer
  /// (one source channel) has a step per tap, so 5x5 on rows of 28 makes 50 FMAs a call
  /// and 7x7 on rows of 56 makes 196. Those ran at 0.14 and 0.2 of peak (Zen 5, 2 threads,
  /// 8x96 channels), 2.3x and 1.3-1.8x slower than cpu.depthwise; a set-up of 12 reduction
  /// steps a row put them at 0.3-0.35 and picked them. ResNeXt's 4-channel groups (432
  /// FMAs a call) ran at 0.32; heads and RGB outputs (thousands) barely see it.
  static constexpr double kPixelVectorsEfficiency = 0.5;
  static constexpr double kPixelVectorsCallFmas = 150;

  /// The channel-vectorised path runs near the FMA peak once its (source channel, tap)
  /// count amortises each tile's transposed store (grad weights: the transposed dy chunk),
  /// less the lanes of a partial channel block, plus its workspace traffic. The row engine
  /// works on the operands in place at a lower fraction of peak (lower still in the
  /// gradients, whose loops scatter or reduce), falling as the filter's channel or position
  /// counts get small.
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    const double peak = m.flops_per_s(computes_in_float64(p));
    if (const KvecPlan pl(p); pl.usable) {
      const double reduction = static_cast<double>(pl.nsrc * pl.taps);
      if (pl.pixel_vectors) {
        // Rows of positions in whole vectors (the last partial); each FMA has its own load.
        const i64 lanes = cpu_isa_float_lanes(active_cpu_isa());
        const i64 kb = std::min(pl.ndst, kPixelMaxChannels), row = pl.dst[2];
        const i64 np = std::min(pixel_vectors_per_tile(kb), (row + lanes - 1) / lanes);
        const double used = static_cast<double>(row) / static_cast<double>((row + lanes - 1) / lanes * lanes);
        const double work = 2.0 * static_cast<double>(pl.N * pl.G * pl.ndst * pl.dst_numel) * reduction;
        const double traffic = 2.0 * static_cast<double>(pl.workspace) + operand_bytes(p);
        // A call runs a row's whole reduction; grad weights' calls are tiles of (input
        // channel, tap) rows over one slice's dy rows, fewer FMAs where a slice has few rows
        // (a 31x31 depthwise filter on 14x14 planes: 8 rows x 14 dy rows a call, 7.6 ms
        // where the whole reduction estimated 1.7 and picked it over cpu.depthwise's 2.3).
        const double row_fmas = reduction * static_cast<double>(kb * np);
        const double call_fmas =
            pl.grad_weights ? std::min(row_fmas, static_cast<double>(pl.N * pl.dst[0] * pl.dst[1] / pl.slices *
                                                                     ((row + lanes - 1) / lanes) *
                                                                     pixel_grad_weights_rows(kb, lanes) * kb))
                            : row_fmas;
        const double eff = kPixelVectorsEfficiency * used * call_fmas / (call_fmas + kPixelVectorsCallFmas);
        return work / (peak * eff) + traffic / m.bytes_per_s() + kConvCallSeconds;
      }
      // Destination channels go in the level's register blocks, zero-padded to whole vectors
      // (paired groups: two groups' channels a block).
      const i64 level_lanes = cpu_isa_float_lanes(active_cpu_isa()), nd = pl.tile_channels(level_lanes);
      const KvecShape sh = kvec_shape(nd, level_lanes, pl.grad_weights);
      const double lanes = static_cast<double>(nd) / static_cast<double>(sh.padded());
      // Forward and grad inputs store every output through a transpose in registers; grad
      // weights transposes dy once per chunk instead. The step counts are fitted, not
      // derived: 96 takes this kernel for the stem's forward (11 vs cpu.corrmm's 20 ms on
      // Zen 4) and leaves Winograd resnet8's 16x16 layers (0.67 vs 0.88 ms); 32 did not.
      // Grad weights: 16, fitted on 11 layers (Zen 4, 2 threads: 0.5 of peak at 27 (channel,
      // tap) rows, 0.8 at 72-144, 0.92-0.99 from 147 up; 48 made it 1.3-1.9x too slow).
      const double overhead = pl.grad_weights ? 16 : 96;
      // A phase of strided grad inputs has a share of the taps per pixel to amortise it over.
      const double steps = pl.phased() ? reduction * pl.tap_fraction() : reduction;
      const double eff = (pl.grad_weights ? 1.0 : 0.9) * lanes * steps / (steps + overhead);
      // The work it does: grad inputs runs over a zero-padded dy, skipping only the taps
      // that read nothing but padding along the outer axis, so a "valid" layer's input
      // gradient computes more than its FLOPs (LeNet's conv2: 2.25 x 2/3 = 1.5x); forward
      // skips a padded layer's border taps likewise.
      const double work =
          2.0 * static_cast<double>(pl.N * pl.G * pl.ndst * pl.dst_numel) * reduction * pl.tap_fraction();
      const double traffic = 2.0 * static_cast<double>(pl.workspace) + operand_bytes(p);
      return work / (peak * eff) + traffic / m.bytes_per_s() + kConvCallSeconds;
    }
    const double base = p.direction == ConvDirection::forward       ? 0.35
                        : p.direction == ConvDirection::grad_inputs ? 0.12
                                                                    : 0.15;
    const auto sat = [](std::int64_t x) { return static_cast<double>(x) / static_cast<double>(x + 8); };
    const double eff = base * sat(p.Kg()) * sat(p.Cg() * p.kernel_numel());
    return p.flops() / (peak * eff) + operand_bytes(p) / m.bytes_per_s() + kConvCallSeconds;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    if (Status s = applicable(p); !s) throw TypeError(msg("cpu.direct: ", s.reason(), " (", p.key(), ")"));
    if (const KvecPlan pl(p); pl.usable) {
      if (ctx.workspace == nullptr || ctx.workspace_bytes < pl.workspace)
        throw MemoryError(msg("cpu.direct: workspace of ", ctx.workspace_bytes, " bytes given, ", pl.workspace,
                              " needed (", p.key(), ")"));
      CONVGRAPH_ISA_CALL(direct_kvec_run, p, t, ctx);
    } else {
      CONVGRAPH_ISA_CALL(direct_run, p, t, ctx);
    }
  }
};

}  // namespace
}  // namespace convgraph::cpu

namespace convgraph {
std::shared_ptr<const ConvAlgorithm> make_cpu_direct_algorithm() {
  return std::make_shared<cpu::DirectAlgorithm>();
}
}  // namespace convgraph
