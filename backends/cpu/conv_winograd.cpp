// "cpu.winograd": Winograd F(4x4, 3x3) for 2D 3x3 stride-1 convolutions and 3D ones with
// 3x3 stride 1 on height and width (any depth kernel, stride, dilation: the depth taps are
// channels), all three directions, float32. The kernels (and why F(4x4, 3x3)) are in kernels/winograd.cpp,
// compiled once per CPU level.
//
// Dilation d (per axis) splits the convolution into d0 x d1 undilated ones on strided
// sub-images: outputs i, i + d, i + 2d, ... read only inputs of one residue class
// r = (i - pad) mod d, starting at sub-image index floor((i - pad) / d), with the same 3x3
// filter. The phases' operands are gathered into the workspace, the undilated engine runs
// on them (once for all phases of equal sub-images, stacked as a batch) and the results
// are scattered back (grad_weights sums the filters), so every direction applies.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/conv_epilogue.hpp"
#include "backends/cpu/kernels/isa_dispatch.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph {
namespace cpu {
CONVGRAPH_ISA_DECLARE(std::size_t winograd_workspace_bytes(const ConvProblem& p))
/// Whether the run is one block of tiles (grad weights: one chunk), whose transformed
/// filter (grad weights: transform-domain sums) never goes through memory whole.
CONVGRAPH_ISA_DECLARE(bool winograd_one_block(const ConvProblem& p))
CONVGRAPH_ISA_DECLARE(void winograd_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx))
}  // namespace cpu

namespace {

using i64 = std::int64_t;

/// One phase of a dilated problem: the undilated sub-problem, and per axis the first
/// output index (i) and input index (r) of its strided sub-images.
struct Phase {
  ConvProblem sub;
  i64 out0[2] = {}, in0[2] = {};
  bool empty() const { return sub.out[0] * sub.out[1] == 0 || sub.in[0] * sub.in[1] == 0; }
};

std::vector<Phase> dilation_phases(const ConvProblem& p) {
  std::vector<Phase> out;
  for (i64 i0 = 0; i0 < p.dilation[0]; ++i0)
    for (i64 i1 = 0; i1 < p.dilation[1]; ++i1) {
      Phase ph;
      ph.sub = p;
      ph.sub.dilation = {1, 1, 1};
      for (int a = 0; a < 2; ++a) {
        const i64 d = p.dilation[a], i = a == 0 ? i0 : i1, r = ((i - p.pad_pre[a]) % d + d) % d;
        const i64 n_out = p.out[a] > i ? (p.out[a] - i + d - 1) / d : 0;
        const i64 n_in = p.in[a] > r ? (p.in[a] - r + d - 1) / d : 0;
        ph.out0[a] = i, ph.in0[a] = r;
        ph.sub.out[a] = n_out, ph.sub.in[a] = n_in;
        ph.sub.pad_pre[a] = -((i - p.pad_pre[a] - r) / d);  // sub-output o reads sub-input o + tap - pad
        ph.sub.pad_post[a] = n_out + 2 - n_in - ph.sub.pad_pre[a];
      }
      out.push_back(ph);
    }
  return out;
}

/// Phases whose sub-problems are equal (the same sub-image sizes and padding: all of them
/// where the sizes and the padding divide by the dilation) run as one: their sub-images, one after the other, are a batch of phases x N
/// images, so the engine runs once on more tiles instead of once per phase. dil4_3x3
/// (4x64x32x32, dilation 4: 16 phases of 8x8 sub-images, 16 tiles each) took 6 ms in every
/// direction run per phase, 3x cpu.direct's time.
struct PhaseGroup {
  std::vector<std::size_t> phases;  ///< indices into dilation_phases(p), none empty
  ConvProblem sub;                  ///< their sub-problem, of N x phases.size() images
};

/// The non-empty phases in groups of equal sub-problems (batched), or one group each.
std::vector<PhaseGroup> phase_groups(const std::vector<Phase>& phases, bool batched) {
  std::vector<PhaseGroup> out;
  for (std::size_t k = 0; k < phases.size(); ++k) {
    if (phases[k].empty()) continue;
    const ConvProblem& s = phases[k].sub;
    auto same = [&](const PhaseGroup& g) {
      return g.sub.in == s.in && g.sub.out == s.out && g.sub.pad_pre == s.pad_pre && g.sub.pad_post == s.pad_post;
    };
    const auto it = batched ? std::find_if(out.begin(), out.end(), same) : out.end();
    if (it == out.end()) out.push_back({{k}, s});
    else it->phases.push_back(k), it->sub.N += s.N;
  }
  return out;
}

/// Workspace of a dilated problem: the gathered x-side and y-side sub-images, a filter
/// for grad_weights when it sums several groups, then the largest group's own workspace. Where the limit
/// allows, every phase's sub-images at once (all_phases: each side is gathered and
/// scattered in one pass over its tensor, which reads every cache line once instead of
/// once per phase: the per-phase copies were about a fifth of dilated_3x3's grad inputs on
/// AVX2), a group's phases back to back, and the groups batched; otherwise one phase's at
/// a time, each phase its own group.
struct DilatedPlan {
  bool all_phases = false;
  std::vector<PhaseGroup> groups;
  std::vector<std::size_t> xs_off, ys_off;  ///< per group (all_phases), else one shared entry
  bool sum_groups = false;  ///< grad weights of several groups: each into w_off, added to w
  std::size_t w_off = 0, sub_off = 0, total = 0;
  std::string why;  ///< non-empty: does not fit p.workspace_limit
};

std::size_t align64(std::size_t v) { return (v + 63) / 64 * 64; }

DilatedPlan dilated_plan(const ConvProblem& p, const std::vector<Phase>& phases, bool all_phases) {
  DilatedPlan pl;
  pl.all_phases = all_phases;
  pl.groups = phase_groups(phases, all_phases);
  std::size_t off = 0;
  auto x_bytes = [&](const ConvProblem& q) { return align64(static_cast<std::size_t>(q.N * q.C * q.in[0] * q.in[1]) * 4); };
  auto y_bytes = [&](const ConvProblem& q) { return align64(static_cast<std::size_t>(q.N * q.K * q.out[0] * q.out[1]) * 4); };
  if (all_phases) {
    for (const PhaseGroup& g : pl.groups) pl.xs_off.push_back(off), off += x_bytes(g.sub);
    for (const PhaseGroup& g : pl.groups) pl.ys_off.push_back(off), off += y_bytes(g.sub);
  } else {
    std::size_t xm = 0, ym = 0;
    for (const PhaseGroup& g : pl.groups) xm = std::max(xm, x_bytes(g.sub)), ym = std::max(ym, y_bytes(g.sub));
    pl.xs_off.push_back(0), pl.ys_off.push_back(xm), off = xm + ym;
  }
  pl.w_off = off;
  pl.sub_off = pl.w_off;
  pl.sum_groups = p.direction == ConvDirection::grad_weights && pl.groups.size() != 1;
  if (pl.sum_groups) pl.sub_off += align64(static_cast<std::size_t>(p.w_numel()) * 4);
  if (pl.sub_off > p.workspace_limit) {
    pl.why = msg("cpu.winograd: dilation ", p.dilation[0], "x", p.dilation[1], " needs ", pl.sub_off,
                 " bytes of workspace for its sub-images, over the limit of ", p.workspace_limit);
    return pl;
  }
  std::size_t sub = 0;
  for (PhaseGroup& g : pl.groups) {
    g.sub.workspace_limit = p.workspace_limit - pl.sub_off;
    sub = std::max(sub, CONVGRAPH_ISA_ANY(winograd_workspace_bytes)(g.sub));
  }
  pl.total = pl.sub_off + sub;
  return pl;
}

DilatedPlan dilated_plan(const ConvProblem& p, const std::vector<Phase>& phases) {
  DilatedPlan all = dilated_plan(p, phases, true);
  if (all.why.empty() && all.total <= p.workspace_limit) return all;
  return dilated_plan(p, phases, false);
}

/// One pass over a dense tensor (planes x rows x cols) and every phase's sub-images:
/// element (y, x) belongs to the phase whose first index is (y mod d0, x mod d1), at sub
/// index (y / d0, x / d1). sub[r0 * d1 + r1]: that phase's sub-images (planes x h x w), or
/// nullptr where the phase is empty (not copied: its elements are zeroed separately).
template <bool kGather>
void phases_copy(ThreadPool* pool, i64 planes, float* full, i64 rows, i64 cols, const Axes3& d,
                 const std::vector<float*>& sub, const std::vector<i64>& h, const std::vector<i64>& w) {
  auto body = [&](i64 a, i64 b) {
    for (i64 pl = a; pl < b; ++pl)
      for (i64 y = 0; y < rows; ++y) {
        float* f = full + (pl * rows + y) * cols;
        const auto k0 = static_cast<std::size_t>(y % d[0] * d[1]);
        if (d[1] == 2 && sub[k0] != nullptr && sub[k0 + 1] != nullptr) {
          // Both column phases in one loop: a (de)interleave without gaps, which vectorises.
          float* s0 = sub[k0] + (pl * h[k0] + y / d[0]) * w[k0];
          float* s1 = sub[k0 + 1] + (pl * h[k0 + 1] + y / d[0]) * w[k0 + 1];
          const i64 n = w[k0 + 1];  // cols / 2; phase 0 has one more where cols is odd
          for (i64 x = 0; x < n; ++x) {
            if constexpr (kGather) s0[x] = f[2 * x], s1[x] = f[2 * x + 1];
            else f[2 * x] = s0[x], f[2 * x + 1] = s1[x];
          }
          if (w[k0] > n) {
            if constexpr (kGather) s0[n] = f[2 * n];
            else f[2 * n] = s0[n];
          }
          continue;
        }
        for (i64 r1 = 0; r1 < d[1]; ++r1) {
          const auto k = static_cast<std::size_t>(y % d[0] * d[1] + r1);
          if (sub[k] == nullptr) continue;
          float* s = sub[k] + (pl * h[k] + y / d[0]) * w[k];
          const float* fr = f + r1;
          float* fw = f + r1;
          for (i64 x = 0; x < w[k]; ++x) {
            if constexpr (kGather) s[x] = fr[d[1] * x];
            else fw[d[1] * x] = s[x];
          }
        }
      }
  };
  if (pool && planes > 1) pool->parallel_for(planes, body, 1);
  else body(0, planes);
}

/// Copies between planes (planes x rows x cols, dense) and their strided sub-images
/// (planes x h x w): sub[a][b] = full[first0 + d0 a][first1 + d1 b]. kGather: full -> sub.
template <bool kGather>
void strided_copy(ThreadPool* pool, i64 planes, float* full, i64 rows, i64 cols, const i64 first[2], const Axes3& d,
                  float* sub, i64 h, i64 w) {
  auto body = [&](i64 a, i64 b) {
    for (i64 pl = a; pl < b; ++pl)
      for (i64 y = 0; y < h; ++y) {
        float* f = full + (pl * rows + first[0] + d[0] * y) * cols + first[1];
        float* s = sub + (pl * h + y) * w;
        for (i64 x = 0; x < w; ++x) {
          if constexpr (kGather) s[x] = f[d[1] * x];
          else f[d[1] * x] = s[x];
        }
      }
  };
  if (pool && planes > 1) pool->parallel_for(planes, body, 1);
  else body(0, planes);
}

/// Zeros a strided sub-image of every plane: the written side of a phase whose other side
/// is empty (its outputs read only padding, or its inputs are read by no output).
void zero_phase(i64 planes, float* full, i64 rows, i64 cols, const i64 first[2], const Axes3& d, i64 h, i64 w) {
  for (i64 pl = 0; pl < planes; ++pl)
    for (i64 y = 0; y < h; ++y)
      for (i64 x = 0; x < w; ++x) full[(pl * rows + first[0] + d[0] * y) * cols + first[1] + d[1] * x] = 0.0f;
}

class WinogradConv final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.winograd"; }
  bool fuses_epilogue() const override { return true; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_winograd", "fast_run"}; }

  Status applicable(const ConvProblem& p) const override {
    if (p.ndim < 2)
      return Status::no(msg("cpu.winograd: ", p.ndim, " spatial axis (2D, or 3D with 3x3 on height and width)"));
    const int a = p.ndim - 2;  // the height axis; a 3D problem's depth taps are channels
    if (p.dtype != DType::float32 || p.compute != DType::float32)
      return Status::no(msg("cpu.winograd: dtype ", dtype_name(p.dtype), "/", dtype_name(p.compute),
                            " (float32 only)"));
    if (p.kernel[a] != 3 || p.kernel[a + 1] != 3)
      return Status::no(msg("cpu.winograd: kernel ", p.kernel[a], "x", p.kernel[a + 1], " on height and width (3x3 only)"));
    if (p.stride[a] != 1 || p.stride[a + 1] != 1)
      return Status::no(msg("cpu.winograd: stride ", p.stride[a], "x", p.stride[a + 1],
                            " on height and width (stride 1 only)"));
    if (p.ndim == 3 && (p.dilation[1] != 1 || p.dilation[2] != 1))
      return Status::no(msg("cpu.winograd: 3D dilation ", p.dilation[1], "x", p.dilation[2],
                            " on height and width (dilation 1 only in 3D)"));
    if (dilated(p)) {
      const DilatedPlan pl = dilated_plan(p, dilation_phases(p));
      if (!pl.why.empty()) return Status::no(pl.why);
    }
    const std::size_t need = workspace_bytes(p);
    if (need > p.workspace_limit)
      return Status::no(msg("cpu.winograd: needs ", need, " bytes of workspace, over the limit of ", p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    if (p.ndim < 2) return 0;
    if (dilated(p)) return dilated_plan(p, dilation_phases(p)).total;
    return CONVGRAPH_ISA_ANY(winograd_workspace_bytes)(p);  // the same at every level
  }

  /// F(4x4, 3x3): per 4x4 tile of the output (of dx for grad_inputs), 36 transform-domain
  /// products per channel pair (against 144 direct), done as 36 GEMMs: over channels with
  /// the tiles as columns, or for grad_weights output x input channels reducing over the
  /// tiles. The transforms (about 16 operations per transform-domain element) stream once
  /// (grad_weights' V and D chunks are two L2s in size, so sgemm packs them from cache: charging
  /// them 3 memory passes made fast_run pick cpu.direct on vgg_3x3_112, measured 1.7x slower).
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    if (dilated(p)) {  // the phase groups, plus gathering and scattering every operand once
      double sum = 2 * operand_bytes(p) / m.bytes_per_s();
      for (const PhaseGroup& g : dilated_plan(p, dilation_phases(p)).groups) sum += estimated_seconds(g.sub, m);
      return sum;
    }
    const bool gw = p.direction == ConvDirection::grad_weights, gi = p.direction == ConvDirection::grad_inputs;
    const Axes3& image = gi ? p.in : p.out;
    const int a = p.ndim - 2;
    const std::int64_t kd = a ? p.kernel[0] : 1;  // 3D: the depth taps are channels, V transformed kd times
    const std::int64_t tiles = ((image[a] + 3) / 4) * ((image[a + 1] + 3) / 4) * p.N * (a ? image[0] : 1);
    // Grad weights keeps input channels in panels of one vector (zero lanes past the last):
    // the GEMMs and V's transforms run on whole panels (C = 3 costs as much as 16).
    const std::int64_t lanes_per_vector = cpu_isa_float_lanes(active_cpu_isa());
    const std::int64_t c_in = gw ? (p.Cg() * kd + lanes_per_vector - 1) / lanes_per_vector * lanes_per_vector
                                 : (gi ? p.Kg() : p.Cg()) * kd;
    const std::int64_t c_out = gi ? p.Cg() : p.Kg();
    const double gemm = 2.0 * 36 * static_cast<double>(tiles) * static_cast<double>(c_in * c_out * p.G);
    // The transforms run 16 tiles of one tile row per vector: a row of tw tiles costs
    // round_up(tw, 16) lanes, except that narrow images (tw <= 8) put 16 / tw tile rows
    // side by side in one vector (7x7 or 8x8 images: 8 rows of tw = 2), copying each row's
    // taps in and its outputs out: about 6 lanes' work a row (fitted: Zen 5, 2 threads,
    // 64x64x8x8 forward, 0.63 ms; without it estimated 0.43).
    const std::int64_t tw = (image[a + 1] + 3) / 4, group = std::max<std::int64_t>(1, 16 / tw);
    const std::int64_t tile_rows = tiles / tw;
    const double lanes = static_cast<double>((tile_rows + group - 1) / group * ((group * tw + 15) / 16 * 16) +
                                             (group > 1 ? 6 * tile_rows : 0));
    const double per_tile = 36.0 * static_cast<double>((c_in + c_out) * p.G);  // V and M (D) elements
    // The transformed filter (grad weights: its transform-domain sums), 36 x c_in x c_out,
    // goes out to memory once (38 MB on 512 channels, as much as the GEMM's time on 7x7
    // images); the GEMM streams it back in under its arithmetic. Not when the kernel runs
    // one block of tiles (small images): each filter chunk (grad weights: each block of
    // sums) is then made and used in cache (resnet_3x3_7 forward: Winograd 6.5 ms,
    // cpu.direct 11.9, estimated 10.8 and 10.6 when charged).
    const double filter_bytes =
        CONVGRAPH_ISA_ANY(winograd_one_block)(p) ? 0.0 : 4.0 * 36 * static_cast<double>(c_in * c_out * p.G);
    const double flops = m.flops_per_s();
    // grad_weights' GEMMs run on sgemm; forward and grad inputs on this algorithm's own
    // kernel, whose 6 x 16 register block loses little to a short channel reduction, and
    // whose transforms run vectorised at about 2/3 of peak per lane (grad weights' at 0.3),
    // fitted on the resnet8 and c3d_small layers (3-64 channels, 2-8 tiles a row: Winograd
    // 1.1-1.8x faster than cpu.direct from 16x16 images up, 1.1-1.5x slower on 8x8) and
    // resnet_3x3_7 (512 channels: grad inputs 1.3x slower, grad weights 1.8x faster).
    // Grad weights' GEMMs (c_out x c_in, reducing over the tiles) run sgemm's kernel, whose
    // register block runs few rows (c_out: a group's output channels) at a fraction of its
    // rate; its transforms are cheaper per element than the forward's, and its four phases'
    // set-up and barriers cost about 0.1 ms. Fitted on 16 layers, Zen 4, 2 threads (3-512
    // channels, 7x7 to 128x128 images, groups of 1, 4 and 8) with sat(c_out, 2), every
    // estimate within 0.88-1.10x of the time; ResNeXt's 32 groups of 4-32 channels (Zen 5,
    // 2 threads) then took 2.7-3.5x their estimates and were picked over cpu.direct, 1.3-2.2x
    // faster. sat(c_out, 16) takes cpu.direct there and moves 64-channel layers' estimates
    // 1.2x (they measured 1.1-1.4x theirs on Zen 5).
    const auto sat = [](std::int64_t x, double h) { return static_cast<double>(x) / (static_cast<double>(x) + h); };
    const double eff = gw ? 0.9 * sat(c_out, 16) * sat(c_in, 2) * sat(tiles, 16)
                          : 0.8 * sat(c_out, 4) * sat(c_in, 2) * sat(tiles, 32);
    const double fixed = gw ? 1e-4 : 0.0;
    return gemm / (flops * eff) + 16 * per_tile * lanes / (flops * (gw ? 1.3 : 0.65)) +
           (4 * per_tile * static_cast<double>(tiles) + filter_bytes + operand_bytes(p)) / m.bytes_per_s() + fixed +
           kConvCallSeconds;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    const Status s = applicable(p);
    if (!s) throw ValueError(msg("cpu.winograd: cannot run ", p.key(), ": ", s.reason()));
    if (dilated(p)) run_dilated(p, t, ctx);
    else CONVGRAPH_ISA_CALL(winograd_run, p, t, ctx);
  }

 private:
  static bool dilated(const ConvProblem& p) { return p.ndim == 2 && (p.dilation[0] != 1 || p.dilation[1] != 1); }

  static void run_dilated(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
    const std::vector<Phase> phases = dilation_phases(p);
    const DilatedPlan pl = dilated_plan(p, phases);
    // Every phase may be empty (each output reads only padding): then nothing is needed.
    if (ctx.workspace_bytes < pl.total || (pl.total > 0 && ctx.workspace == nullptr))
      throw MemoryError(msg("cpu.winograd: workspace of ", ctx.workspace_bytes, " bytes, need ", pl.total, " for ",
                            p.key()));
    auto* ws = static_cast<unsigned char*>(ctx.workspace);
    const bool fwd = p.direction == ConvDirection::forward, gi = p.direction == ConvDirection::grad_inputs;
    auto* x = static_cast<float*>(t.x);
    auto* y = static_cast<float*>(t.y);
    auto* w = static_cast<float*>(t.w);
    const i64 xp = p.N * p.C, yp = p.N * p.K;
    ConvContext sc = ctx;
    sc.workspace = ws + pl.sub_off;
    sc.workspace_bytes = ctx.workspace_bytes - pl.sub_off;
    // Grad weights sums the groups' filters (one group writes w itself).
    float* wsub = pl.sum_groups ? reinterpret_cast<float*>(ws + pl.w_off) : w;
    if (pl.sum_groups) std::memset(w, 0, static_cast<std::size_t>(p.w_numel()) * sizeof(float));
    // The written side of an empty phase is zero (its outputs read only padding, or no
    // output reads its inputs).
    for (const Phase& ph : phases) {
      if (!ph.empty()) continue;
      if (fwd) zero_phase(yp, y, p.out[0], p.out[1], ph.out0, p.dilation, ph.sub.out[0], ph.sub.out[1]);
      if (gi) zero_phase(xp, x, p.in[0], p.in[1], ph.in0, p.dilation, ph.sub.in[0], ph.sub.in[1]);
    }
    // all_phases: per residue class (r0 * d1 + r1) of each side, its phase's sub-images,
    // at its place in its group's batch.
    const std::size_t nres = static_cast<std::size_t>(p.dilation[0] * p.dilation[1]);
    std::vector<float*> xres(nres, nullptr), yres(nres, nullptr);
    std::vector<i64> xh(nres), xw(nres), yh(nres), yw(nres);
    for (std::size_t g = 0; g < pl.groups.size() && pl.all_phases; ++g)
      for (std::size_t i = 0; i < pl.groups[g].phases.size(); ++i) {
        const Phase& ph = phases[pl.groups[g].phases[i]];
        const auto xr = static_cast<std::size_t>(ph.in0[0] * p.dilation[1] + ph.in0[1]);
        const auto yr = static_cast<std::size_t>(ph.out0[0] * p.dilation[1] + ph.out0[1]);
        const i64 xn = xp * ph.sub.in[0] * ph.sub.in[1], yn = yp * ph.sub.out[0] * ph.sub.out[1];
        xres[xr] = reinterpret_cast<float*>(ws + pl.xs_off[g]) + static_cast<i64>(i) * xn;
        yres[yr] = reinterpret_cast<float*>(ws + pl.ys_off[g]) + static_cast<i64>(i) * yn;
        xh[xr] = ph.sub.in[0], xw[xr] = ph.sub.in[1], yh[yr] = ph.sub.out[0], yw[yr] = ph.sub.out[1];
      }
    if (pl.all_phases) {
      if (!gi) phases_copy<true>(ctx.pool, xp, x, p.in[0], p.in[1], p.dilation, xres, xh, xw);
      if (!fwd) phases_copy<true>(ctx.pool, yp, y, p.out[0], p.out[1], p.dilation, yres, yh, yw);
    }
    for (std::size_t g = 0; g < pl.groups.size(); ++g) {
      const PhaseGroup& grp = pl.groups[g];
      const ConvProblem& q = grp.sub;
      const std::size_t gg = pl.all_phases ? g : 0;
      auto* xs = reinterpret_cast<float*>(ws + pl.xs_off[gg]);
      auto* ys = reinterpret_cast<float*>(ws + pl.ys_off[gg]);
      const Phase& ph = phases[grp.phases[0]];  // the only one when not all_phases
      if (!pl.all_phases && !gi)
        strided_copy<true>(ctx.pool, xp, x, p.in[0], p.in[1], ph.in0, p.dilation, xs, q.in[0], q.in[1]);
      if (!pl.all_phases && !fwd)
        strided_copy<true>(ctx.pool, yp, y, p.out[0], p.out[1], ph.out0, p.dilation, ys, q.out[0], q.out[1]);
      CONVGRAPH_ISA_CALL(winograd_run, q, ConvTensors{xs, wsub, ys, {}}, sc);
      if (!pl.all_phases && fwd)
        strided_copy<false>(ctx.pool, yp, y, p.out[0], p.out[1], ph.out0, p.dilation, ys, q.out[0], q.out[1]);
      if (!pl.all_phases && gi)
        strided_copy<false>(ctx.pool, xp, x, p.in[0], p.in[1], ph.in0, p.dilation, xs, q.in[0], q.in[1]);
      if (pl.sum_groups) {
        // The count hoisted: w_numel() per element (a call, and no vectorising) was a tenth
        // of ASPP's grad weights (4x256x28x28, dilation 6: four groups of 590k sums).
        const i64 n = p.w_numel();
        for (i64 i = 0; i < n; ++i) w[i] += wsub[i];
      }
    }
    if (pl.all_phases && fwd) phases_copy<false>(ctx.pool, yp, y, p.out[0], p.out[1], p.dilation, yres, yh, yw);
    if (pl.all_phases && gi) phases_copy<false>(ctx.pool, xp, x, p.in[0], p.in[1], p.dilation, xres, xh, xw);
    if (fwd && !t.epilogue.empty()) apply_conv_epilogue(p, t, ctx);
  }
};

}  // namespace

std::shared_ptr<const ConvAlgorithm> make_cpu_winograd_algorithm() { return std::make_shared<WinogradConv>(); }

}  // namespace convgraph
