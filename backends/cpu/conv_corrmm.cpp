// "cpu.corrmm": im2col + GEMM (Theano's CorrMM and Corr3dMM in one N-d code path).
//
// Per group g (W_g = filters of g as a Kg x Cg*KS matrix, col = im2col of g's channels):
//   forward        Y_g(:, P)  = W_g   * col(:, P)
//   grad inputs    col(:, P)  = W_g^T * dY_g(:, P), then col2im adds col into dX
//   grad weights   dW_g      += dY_g(:, P) * col(:, P)^T   over every image and position
// Filter flip lives in the im2col row order (im2col.hpp), so the stored filter is used as is.
//
// Work is cut into segments: one image and a range of its output positions. The column
// buffer (the workspace) holds the columns of a chunk of consecutive segments for every
// group; chunks are sized so workspace_bytes(p) <= p.workspace_limit. Within a chunk the
// (segment, group) pairs run in parallel; grad inputs then scatters per (image, channel)
// and grad weights splits dW into blocks, so no two tasks write the same memory and the
// result does not depend on the thread count. A 1x1 filter at stride 1 without padding
// skips im2col: the input planes already are the column matrix.
#include <algorithm>
#include <functional>
#include <limits>

#include "backends/cpu/conv_epilogue.hpp"
#include "backends/cpu/conv_geometry.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/im2col.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "core/checked_math.hpp"

namespace convgraph::cpu {
namespace {

/// Aim for column segments of about this size: large enough for an efficient GEMM,
/// small enough to stay in L2/L3 between im2col and GEMM.
constexpr i64 kTargetSegmentBytes = i64{2} << 20;
/// Aim for this many bytes of columns per chunk (several segments per thread).
constexpr i64 kTargetChunkBytes = i64{16} << 20;
/// The smallest segment: this many output positions (or the whole image if smaller).
constexpr i64 kMinSegment = 32;
/// dW blocks for grad weights: rows x columns of the Kg x Cg*KS matrix per task.
constexpr i64 kWgradRows = 64;
constexpr i64 kWgradCols = 256;

struct Plan {
  ConvGeometry g;
  bool pointwise = false;
  i64 rows = 0;          ///< column-matrix rows of all groups: C * KS
  i64 seg_len = 0;       ///< output positions per segment (the last one of an image may be shorter)
  i64 segs_per_image = 0;
  i64 total_segs = 0;
  i64 segs_per_chunk = 0;
  std::size_t elem = 0;
  std::size_t workspace = 0;
  bool fits = true;      ///< false when even the smallest chunk exceeds the limit
  i64 min_bytes = 0;     ///< bytes of the smallest chunk

  i64 seg_begin(i64 s) const { return (s % segs_per_image) * seg_len; }
  i64 seg_end(i64 s) const { return std::min(g.out_numel, seg_begin(s) + seg_len); }
  i64 seg_image(i64 s) const { return s / segs_per_image; }
  /// Column-matrix block of segment slot `slot` (position within the chunk) and group grp.
  i64 col_offset(i64 slot, i64 grp) const { return (slot * rows + grp * g.Cg * g.ker_numel) * seg_len; }
};

Plan make_plan(const ConvProblem& p) {
  Plan pl;
  pl.g = ConvGeometry(p);
  const ConvGeometry& g = pl.g;
  pl.elem = dtype_size(p.dtype);
  pl.pointwise = g.is_pointwise();
  pl.rows = g.C * g.ker_numel;
  const i64 P = g.out_numel;
  const i64 row_bytes = pl.rows * static_cast<i64>(pl.elem);  // column bytes per position
  const i64 limit = static_cast<i64>(std::min<std::size_t>(p.workspace_limit, std::size_t{1} << 62));
  const i64 min_len = std::min(P, kMinSegment);
  if (pl.pointwise) pl.min_bytes = 0;
  else if (!detail::try_mul(row_bytes, min_len, pl.min_bytes)) pl.min_bytes = std::numeric_limits<i64>::max();
  if (pl.min_bytes > limit) {
    pl.fits = false;
    return pl;
  }
  // Segment length: about kTargetSegmentBytes of columns, at least min_len positions, at
  // most one image, and within the limit; then split each image into equal segments.
  i64 len = std::clamp(kTargetSegmentBytes / std::max<i64>(row_bytes, 1), min_len, P);
  if (!pl.pointwise) len = std::min(len, limit / row_bytes);
  pl.segs_per_image = (P + len - 1) / len;
  pl.seg_len = (P + pl.segs_per_image - 1) / pl.segs_per_image;
  pl.total_segs = g.N * pl.segs_per_image;
  if (pl.pointwise) {
    pl.segs_per_chunk = std::max<i64>(pl.total_segs, 1);  // no buffer: one chunk
    return pl;
  }
  // Chunk: several segments per thread, within the limit.
  const i64 seg_bytes = row_bytes * pl.seg_len;
  const i64 target = std::max<i64>(4, kTargetChunkBytes / seg_bytes);
  pl.segs_per_chunk = std::clamp<i64>(std::min(target, limit / seg_bytes), 1, std::max<i64>(pl.total_segs, 1));
  pl.workspace = static_cast<std::size_t>(pl.segs_per_chunk * seg_bytes);
  return pl;
}

template <class T>
class Runner {
 public:
  Runner(const Plan& pl, const ConvTensors& t, const ConvContext& ctx)
      : pl_(pl), g_(pl.g), x_(static_cast<T*>(t.x)), w_(static_cast<T*>(t.w)),
        y_(static_cast<T*>(t.y)), col_(static_cast<T*>(ctx.workspace)), epilogue_(t.epilogue), ctx_(ctx),
        KS_(g_.ker_numel), P_(g_.out_numel) {}

  void forward() {
    for_each_chunk([&](i64 s0, i64 s1) {
      parallel_over(ctx_, (s1 - s0) * g_.G, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) {
          const i64 slot = i / g_.G, grp = i % g_.G, s = s0 + slot;
          const auto [cols, ld_cols] = columns(slot, s, grp, /*fill=*/true);
          const i64 n = pl_.seg_image(s), p0 = pl_.seg_begin(s), np = pl_.seg_end(s) - p0;
          gemm(false, false, g_.Kg, np, g_.Cg * KS_, T(1), w_ + grp * g_.Kg * g_.Cg * KS_,
               g_.Cg * KS_, cols, ld_cols, T(0), y_ + (n * g_.K + grp * g_.Kg) * P_ + p0, P_);
          // The fused epilogue on the segment just written, while it is in cache.
          if (!epilogue_.empty())
            for (i64 k = grp * g_.Kg; k < (grp + 1) * g_.Kg; ++k)
              CONVGRAPH_ISA_CALL(conv_epilogue, epilogue_, dtype_of<T>(), y_ + (n * g_.K + k) * P_ + p0,
                                 (n * g_.K + k) * P_ + p0, k, np);
        }
      });
    });
  }

  void grad_inputs() {
    if (pl_.pointwise) {
      // dX_g = W_g^T * dY_g straight into the input gradient: every element written once.
      parallel_over(ctx_, pl_.total_segs * g_.G, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) {
          const i64 s = i / g_.G, grp = i % g_.G;
          const i64 n = pl_.seg_image(s), p0 = pl_.seg_begin(s), np = pl_.seg_end(s) - p0;
          gemm(true, false, g_.Cg, np, g_.Kg, T(1), w_ + grp * g_.Kg * g_.Cg, g_.Cg,
               y_ + (n * g_.K + grp * g_.Kg) * P_ + p0, P_, T(0),
               x_ + (n * g_.C + grp * g_.Cg) * P_ + p0, P_);
        }
      });
      return;
    }
    const i64 in_numel = g_.in_numel;
    parallel_over(ctx_, g_.N * g_.C, [&](i64 b, i64 e) {
      std::fill(x_ + b * in_numel, x_ + e * in_numel, T(0));  // col2im adds into dX
    });
    for_each_chunk([&](i64 s0, i64 s1) {
      parallel_over(ctx_, (s1 - s0) * g_.G, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) {
          const i64 slot = i / g_.G, grp = i % g_.G, s = s0 + slot;
          const i64 n = pl_.seg_image(s), p0 = pl_.seg_begin(s), np = pl_.seg_end(s) - p0;
          gemm(true, false, g_.Cg * KS_, np, g_.Kg, T(1), w_ + grp * g_.Kg * g_.Cg * KS_,
               g_.Cg * KS_, y_ + (n * g_.K + grp * g_.Kg) * P_ + p0, P_, T(0),
               col_ + pl_.col_offset(slot, grp), np);
        }
      });
      // Scatter: one task per (image, channel) so no two tasks touch the same plane; the
      // segments of an image are added in order, so the sum order is fixed.
      const i64 n_first = pl_.seg_image(s0), n_last = pl_.seg_image(s1 - 1);
      parallel_over(ctx_, (n_last - n_first + 1) * g_.C, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) {
          const i64 n = n_first + i / g_.C, ci = i % g_.C;
          const i64 grp = ci / g_.Cg, q = ci % g_.Cg;
          const i64 sb = std::max(s0, n * pl_.segs_per_image);
          const i64 se = std::min(s1, (n + 1) * pl_.segs_per_image);
          for (i64 s = sb; s < se; ++s) {
            const i64 p0 = pl_.seg_begin(s), p1 = pl_.seg_end(s);
            // Channel q's KS rows inside the group block, whose row stride is p1 - p0.
            const T* col = col_ + pl_.col_offset(s - s0, grp) + q * KS_ * (p1 - p0);
            col2im_add(g_, col, 1, p0, p1, x_ + (n * g_.C + ci) * in_numel);
          }
        }
      });
    });
  }

  void grad_weights() {
    const i64 cols_per_group = g_.Cg * KS_;
    const i64 mblocks = (g_.Kg + kWgradRows - 1) / kWgradRows;
    const i64 nblocks = (cols_per_group + kWgradCols - 1) / kWgradCols;
    if (pl_.total_segs == 0) {  // an empty batch: the gradient is zero
      std::fill(w_, w_ + g_.K * cols_per_group, T(0));
      return;
    }
    for_each_chunk([&](i64 s0, i64 s1) {
      if (!pl_.pointwise) {
        parallel_over(ctx_, (s1 - s0) * g_.G, [&](i64 b, i64 e) {
          for (i64 i = b; i < e; ++i) columns(i / g_.G, s0 + i / g_.G, i % g_.G, /*fill=*/true);
        });
      }
      // dW_g[block] (+)= dY_g(rows, P) * col(cols, P)^T, segment after segment: the first
      // product of the first chunk overwrites, the rest accumulate.
      parallel_over(ctx_, g_.G * mblocks * nblocks, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) {
          const i64 nb = i % nblocks, mb = (i / nblocks) % mblocks, grp = i / nblocks / mblocks;
          const i64 m0 = mb * kWgradRows, m = std::min(kWgradRows, g_.Kg - m0);
          const i64 c0 = nb * kWgradCols, c = std::min(kWgradCols, cols_per_group - c0);
          T* dw = w_ + (grp * g_.Kg + m0) * cols_per_group + c0;
          for (i64 s = s0; s < s1; ++s) {
            const auto [cols, ld_cols] = columns(s - s0, s, grp, /*fill=*/false);
            const i64 n = pl_.seg_image(s), p0 = pl_.seg_begin(s), np = pl_.seg_end(s) - p0;
            gemm(false, true, m, c, np, T(1), y_ + (n * g_.K + grp * g_.Kg + m0) * P_ + p0, P_,
                 cols + c0 * ld_cols, ld_cols, s == 0 ? T(0) : T(1), dw, cols_per_group);
          }
        }
      });
    });
  }

 private:
  /// Runs fn(s0, s1) for consecutive chunks of segments.
  template <class Fn>
  void for_each_chunk(Fn&& fn) {
    for (i64 s0 = 0; s0 < pl_.total_segs; s0 += pl_.segs_per_chunk)
      fn(s0, std::min(pl_.total_segs, s0 + pl_.segs_per_chunk));
  }

  struct ColView {
    const T* data;
    i64 ld;
  };
  /// The (Cg*KS) x np column matrix of segment s and group grp: the input itself for a
  /// pointwise filter, else the workspace block of its chunk slot (filled by im2col first
  /// when `fill`).
  ColView columns(i64 slot, i64 s, i64 grp, bool fill) {
    const i64 n = pl_.seg_image(s), p0 = pl_.seg_begin(s), p1 = pl_.seg_end(s);
    const T* xg = x_ + (n * g_.C + grp * g_.Cg) * g_.in_numel;
    if (pl_.pointwise) return {xg + p0, P_};
    T* col = col_ + pl_.col_offset(slot, grp);
    if (fill) im2col(g_, xg, g_.Cg, p0, p1, col);
    return {col, p1 - p0};
  }

  const Plan& pl_;
  const ConvGeometry& g_;
  T* x_;
  T* w_;
  T* y_;
  T* col_;
  ConvEpilogue epilogue_;  // forward only
  const ConvContext& ctx_;
  i64 KS_, P_;
};

class CorrMMAlgorithm final : public ConvAlgorithm {
 public:
  std::string name() const override { return "cpu.corrmm"; }
  bool fuses_epilogue() const override { return true; }
  DeviceKind device() const override { return DeviceKind::cpu; }
  std::vector<std::string> tags() const override { return {"conv_gemm", "fast_run", "fast_compile"}; }

  Status applicable(const ConvProblem& p) const override {
    if (p.dtype != DType::float32 && p.dtype != DType::float64)
      return Status::no(msg("cpu.corrmm handles float32 and float64, not ", dtype_name(p.dtype)));
    if (p.compute != p.dtype)
      return Status::no(msg("cpu.corrmm accumulates in the storage type (", dtype_name(p.dtype),
                            "), not ", dtype_name(p.compute)));
    const Plan pl = make_plan(p);
    if (!pl.fits)
      return Status::no(msg("cpu.corrmm needs at least ", pl.min_bytes,
                            " bytes of column buffer (", kMinSegment,
                            " output positions), above workspace_limit ", p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    const Plan pl = make_plan(p);
    return pl.fits ? pl.workspace : 0;
  }

  /// One GEMM per (image, group) of the column matrix's shape, plus writing and reading
  /// the column matrix; its chunks mostly stay in cache, so a quarter of that traffic is
  /// charged at memory bandwidth.
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    const std::int64_t rows = p.Cg() * p.kernel_numel(), cols = p.out_numel();
    const double eff = p.direction == ConvDirection::forward       ? gemm_efficiency(p.Kg(), cols, rows)
                       : p.direction == ConvDirection::grad_inputs ? gemm_efficiency(rows, cols, p.Kg())
                                                                   : gemm_efficiency(p.Kg(), rows, cols);
    const double col = ConvGeometry(p).is_pointwise()
                           ? 0.0
                           : 2.0 * static_cast<double>(rows * p.G) * static_cast<double>(cols * p.N) *
                                 static_cast<double>(dtype_size(p.dtype));
    return p.flops() / (m.flops_per_s(computes_in_float64(p)) * eff) +
           (col / 4 + operand_bytes(p)) / m.bytes_per_s() + kConvCallSeconds;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    if (Status s = applicable(p); !s) throw ValueError(msg("cpu.corrmm: ", s.reason(), " (", p.key(), ")"));
    const Plan pl = make_plan(p);
    if (ctx.workspace_bytes < pl.workspace || (pl.workspace > 0 && ctx.workspace == nullptr))
      throw MemoryError(msg("cpu.corrmm: workspace of ", ctx.workspace_bytes, " bytes given, ",
                            pl.workspace, " needed (", p.key(), ")"));
    if (p.dtype == DType::float32) dispatch<float>(pl, p.direction, t, ctx);
    else dispatch<double>(pl, p.direction, t, ctx);
  }

 private:
  template <class T>
  static void dispatch(const Plan& pl, ConvDirection dir, const ConvTensors& t, const ConvContext& ctx) {
    Runner<T> r(pl, t, ctx);
    switch (dir) {
      case ConvDirection::forward: r.forward(); break;
      case ConvDirection::grad_inputs: r.grad_inputs(); break;
      case ConvDirection::grad_weights: r.grad_weights(); break;
    }
  }
};

}  // namespace
}  // namespace convgraph::cpu

namespace convgraph {
std::shared_ptr<const ConvAlgorithm> make_cpu_corrmm_algorithm() {
  return std::make_shared<cpu::CorrMMAlgorithm>();
}
}  // namespace convgraph
