// "cpu.corrmm": im2col + GEMM (Theano's CorrMM and Corr3dMM in one N-d code path).
//
// float32 (FusedRunner) never materialises the column matrix (its workspace holds only a
// strided 1x1 filter's subsampled x, Plan::subsample, and the product of a 1x1 filter on
// small planes or of patches' grad inputs over all images, Plan::batched): the GEMM packs its B panels
// straight from the image (im2col_pack; sgemm.hpp PanelSource), grad weights is one
// batch-reduce GEMM over all images (the GEMM splits its long depth among the threads
// when dW is small), and grad inputs scatters each small column tile (col2im) while it
// is still in L2. float64 (Runner, Eigen's GEMM) works through a column buffer:
//
// Per group g (W_g = filters of g as a Kg x Cg*KS matrix, col = im2col of g's channels),
// in both:
//   forward        Y_g(:, P)  = W_g   * col(:, P)
//   grad inputs    col(:, P)  = W_g^T * dY_g(:, P), then col2im adds col into dX
//   grad weights   dW_g      += dY_g(:, P) * col(:, P)^T   over every image and position
// Filter flip lives in the im2col row order (im2col.hpp), so the stored filter is used as is.
//
// float64: work is cut into segments: one image and a range of its output positions. The column
// buffer (the workspace) holds the columns of a chunk of consecutive segments for every
// group; chunks are sized so workspace_bytes(p) <= p.workspace_limit. Within a chunk the
// (segment, group) pairs run in parallel; grad inputs then scatters per (image, channel)
// and grad weights splits dW into blocks, so no two tasks write the same memory and the
// result does not depend on the thread count. A 1x1 filter at stride 1 without padding
// skips im2col: the input planes already are the column matrix.
#include <algorithm>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/conv_epilogue.hpp"
#include "backends/cpu/conv_geometry.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/im2col.hpp"
#include "backends/cpu/sgemm.hpp"
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
/// Pointwise planes below this many positions run as one GEMM over all images (Plan::
/// batched). Zen 3, 1 thread, % of peak, one image's GEMM against eight side by side
/// (bench_sgemm --shape): 2048x49x512 73 -> 88, 512x49x2048 with A transposed (grad inputs)
/// 57 -> 82, 1024 x P x 256 at P = 16 73 -> 89 and 36 68 -> 88; level at 64 and 144.
constexpr i64 kBatchedPositions = 128;

struct Plan {
  ConvGeometry g;
  bool pointwise = false;
  /// float32 grad weights of a 1x1 filter at a stride, every output inside the input (a
  /// ResNet projection shortcut): x is subsampled into the workspace once, [N][C][out], and
  /// the GEMM reads it as the pointwise one does. Through the column source the GEMM's
  /// packer transposed a gathered copy of it per tile: res_down_1x1 (8x256x28x28 -> 512,
  /// stride 2), 2 threads, Zen 4, 2.8 ms, against 2.1 for the same GEMM at stride 1.
  /// The forward of such a layer subsamples x likewise where it runs batched (below).
  bool subsample = false;
  /// float32 forward and grad inputs of a pointwise filter on planes of fewer than
  /// kBatchedPositions positions (ResNet's 7x7 stage), and of a strided 1x1 one onto or
  /// from such planes (ResNet-50's last projection, 14x14 -> 7x7; forward over its
  /// subsampled x, grad inputs scattering to the stride's positions of a zeroed dx): one
  /// GEMM per group whose columns are every image's positions side by side, packed from
  /// the planes, its product copied to them tile by tile from the workspace (after the
  /// subsampled x). One GEMM per image is a few column slivers wide, the last mostly
  /// padding (see kBatchedPositions): 8x1024x14x14 -> 2048 at stride 2 ran 49 = 32 + 16 + 1
  /// columns an image, the last one on the thin kernel. Grad inputs of patches (a kernel no
  /// wider than its stride, no padding: ViT's 16x16 at stride 16) batch likewise, on larger
  /// planes too where patches_batch says so, their product stored at the taps' places in dx.
  bool batched = false;
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

/// Whether grad inputs of patches (rows = Cg x taps, P positions an image, depth Kg) runs
/// one GEMM over all images. One GEMM per image packs W^T again for each and, on few
/// positions, runs a thin last sliver: ViT's 16x16 at stride 16 (8x3x224x224 -> 768, 196
/// positions), Zen 5, 2 threads, 6.2 -> 5.5 ms; at 448x448 (784 positions) 6.1 -> 5.4.
/// The batched product is written and read once more, which gains nothing where the depth
/// is small: ConvNeXt's 4x4 stem and 2x2 downsampling, and 2x2 patches from 64 channels,
/// timed even within the noise. Batch where the GEMM's time saved (gemm_efficiency) exceeds
/// the product's 8 bytes an element at kFlopsPerByte (the product mostly stays in the L3).
bool patches_batch(i64 rows, i64 P, i64 N, i64 Kg) {
  constexpr double kFlopsPerByte = 4;
  const double saved = 2.0 * static_cast<double>(Kg) *
                       (1 / gemm_efficiency(rows, P, Kg) - 1 / gemm_efficiency(rows, N * P, Kg));
  return saved > 8 * kFlopsPerByte;
}

Plan make_plan(const ConvProblem& p) {
  Plan pl;
  pl.g = ConvGeometry(p);
  const ConvGeometry& g = pl.g;
  pl.elem = dtype_size(p.dtype);
  pl.pointwise = g.is_pointwise();
  pl.rows = g.C * g.ker_numel;
  const i64 P = g.out_numel;
  if (p.dtype == DType::float32) {  // no column buffer (FusedRunner), at most the subsampled x
    // Disjoint taps (each axis a 1-tap kernel or one no wider than its stride, every tap
    // inside the input: no leading padding, and none of the trailing padding read): every
    // input element feeds at most one column entry, so col2im is a plain scatter.
    bool disjoint = !pl.pointwise;
    for (std::size_t a = 0; a < 3; ++a)
      disjoint = disjoint && g.pad[a] == 0 && (g.out[a] - 1) * g.stride[a] + (g.ker[a] - 1) * g.dil[a] < g.in[a] &&
                 (g.ker[a] == 1 || (g.dil[a] == 1 && g.ker[a] <= g.stride[a]));
    const bool inside = disjoint && g.ker_numel == 1;  // a strided 1x1 filter
    const bool small = g.N > 1 && P < kBatchedPositions;
    i64 bytes = 0;
    if (inside && (p.direction == ConvDirection::grad_weights || (p.direction == ConvDirection::forward && small)) &&
        detail::try_mul(g.N * g.C, P * 4, bytes) && static_cast<std::size_t>(bytes) <= p.workspace_limit) {
      pl.subsample = true;
      pl.workspace = static_cast<std::size_t>(bytes);
    }
    const i64 product_rows = p.direction == ConvDirection::forward ? g.Kg : g.Cg * g.ker_numel;
    // The batched GEMM's operand as planes of P positions: as stored, or the strided x
    // subsampled (forward); grad inputs of disjoint taps scatter its product to the taps'
    // positions. Patches (a kernel wider than one tap) batch on larger planes too where
    // the GEMM gains more than the product's trip through memory costs (patches_batch),
    // while the product fits half the L3 (a larger batch's would go to memory and back).
    const bool planes = pl.pointwise || pl.subsample || (disjoint && p.direction == ConvDirection::grad_inputs);
    const bool ok = detail::try_mul(product_rows, g.N * P * 4, bytes);
    const bool patches = ok && disjoint && g.ker_numel > 1 && p.direction == ConvDirection::grad_inputs &&
                         2 * bytes <= cpu_cache_sizes().l3 && patches_batch(product_rows, P, g.N, g.Kg);
    if (ok && planes && p.direction != ConvDirection::grad_weights && (small || patches) &&
        pl.workspace + static_cast<std::size_t>(bytes) <= p.workspace_limit) {
      pl.batched = true;
      pl.workspace += static_cast<std::size_t>(bytes);
    } else if (p.direction == ConvDirection::forward) {  // a subsampled x serves only the batched GEMM
      pl.subsample = false;
      pl.workspace = 0;
    }
    return pl;
  }
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

/// float32 without a column buffer (see the top of the file).
class FusedRunner {
 public:
  FusedRunner(const Plan& pl, const ConvTensors& t, const ConvContext& ctx)
      : pl_(pl), g_(pl.g), x_(static_cast<float*>(t.x)), w_(static_cast<float*>(t.w)),
        y_(static_cast<float*>(t.y)), epilogue_(t.epilogue), ctx_(ctx), KS_(g_.ker_numel),
        P_(g_.out_numel), rows_(g_.Cg * KS_) {}

  // Y_g(n) = W_g * im2col(x_g(n)), one GEMM per image and group, the epilogue per C tile.
  void forward() {
    if (pl_.batched) return batched(ConvDirection::forward);
    each(g_.N * g_.G, 2, [&](i64 i, ThreadPool* pool) {
      const i64 n = i / g_.G, grp = i % g_.G;
      const Source src{&g_, image(n, grp), 0};
      const PanelSource ps{&Source::pack_rows, &src};
      float* y = y_ + (n * g_.K + grp * g_.Kg) * P_;
      const Tile tile{this, y, (n * g_.K + grp * g_.Kg) * P_, grp * g_.Kg};
      const TileHook hook{&Tile::epilogue, &tile};
      SgemmExt ext;
      ext.b_source = pl_.pointwise ? nullptr : &ps;
      ext.tile_done = epilogue_.empty() ? nullptr : &hook;
      sgemm_ex(false, false, g_.Kg, P_, rows_, 1.0f, w_ + grp * g_.Kg * rows_, rows_, image(n, grp), P_,
               0.0f, y, P_, ext, pool);
    });
  }

  // dW_g = sum over images of dY_g(n) * im2col(x_g(n))^T: one batch-reduce GEMM per group
  // (a long depth over a small dW is split into partial sums inside the GEMM, by shape).
  void grad_weights() {
    const i64 dw = g_.Kg * rows_;
    if (g_.N == 0) {
      std::fill(w_, w_ + g_.G * dw, 0.0f);
      return;
    }
    const float* x = pl_.subsample ? subsample_x() : x_;
    const bool plain = pl_.pointwise || pl_.subsample;  // B is x's planes as stored
    const i64 plane = plain ? P_ : g_.in_numel;
    each(g_.G, 2, [&](i64 grp, ThreadPool* pool) {
      const Source src{&g_, image(0, grp), g_.C * g_.in_numel};
      const PanelSource ps{nullptr, &src, &Source::rows};
      SgemmExt ext;
      ext.batch = g_.N;
      ext.a_stride = g_.K * P_;
      ext.b_stride = g_.C * plane;
      ext.b_source = plain ? nullptr : &ps;
      sgemm_ex(false, true, g_.Kg, rows_, P_, 1.0f, y_ + grp * g_.Kg * P_, P_, x + grp * g_.Cg * plane, P_, 0.0f,
               w_ + grp * dw, rows_, ext, pool);
    });
  }

  // dX_g(n) = col2im(W_g^T * dY_g(n)), a tile of positions at a time into a per-thread
  // buffer that the scatter reads while it is in L2. A task owns a block of input channels
  // of one image, so no two tasks add into the same plane.
  void grad_inputs() {
    if (g_.N == 0) return;
    if (pl_.batched) return batched(ConvDirection::grad_inputs);
    if (pl_.pointwise) {  // dX_g = W_g^T * dY_g: the GEMM writes dX directly
      each(g_.N * g_.G, 2, [&](i64 i, ThreadPool* pool) {
        const i64 n = i / g_.G, grp = i % g_.G;
        sgemm(true, false, g_.Cg, P_, g_.Kg, 1.0f, w_ + grp * g_.Kg * g_.Cg, g_.Cg,
              y_ + (n * g_.K + grp * g_.Kg) * P_, P_, 0.0f, x_ + (n * g_.C + grp * g_.Cg) * P_, P_, pool);
      });
      return;
    }
    // Channel blocks and tiles sized so a tile's columns (cb*KS rows x S) fill half of L2,
    // preferring 256 positions (each packed weight then serves 512 flops). S fixes the
    // order of the adds into dX, so it depends on the shape only; more channel blocks
    // (for more tasks than threads) do not change it.
    const i64 half_l2 = cpu_cache_sizes().l2 / 2;
    const i64 cb_max = std::clamp<i64>(half_l2 / (4 * KS_ * 256), 1, g_.Cg);
    const i64 S = std::clamp<i64>(half_l2 / (4 * cb_max * KS_) / 32 * 32, 64, 4096);
    const i64 threads = ctx_.pool != nullptr ? ctx_.pool->size() : 1;
    const i64 nblocks = std::max(ceil_div(g_.Cg, cb_max), std::min(g_.Cg, ceil_div(4 * threads, g_.N * g_.G)));
    const i64 cb = ceil_div(g_.Cg, nblocks);
    parallel_over(ctx_, g_.N * g_.G * nblocks, [&](i64 b, i64 e) {
      for (i64 i = b; i < e; ++i) {
        const i64 blk = i % nblocks, grp = i / nblocks % g_.G, n = i / nblocks / g_.G;
        if (blk * cb < g_.Cg) grad_inputs_block(n, grp, blk * cb, std::min(cb, g_.Cg - blk * cb), S);
      }
    });
  }

 private:
  /// x[n][c][out * stride] into the workspace's start (Plan::subsample): a 1x1 filter's
  /// im2col, a plane per task.
  float* subsample_x() const {
    auto* xs = static_cast<float*>(ctx_.workspace);
    parallel_over(ctx_, g_.N * g_.C, [&](i64 b, i64 e) {
      for (i64 plane = b; plane < e; ++plane) im2col(g_, x_ + plane * g_.in_numel, 1, 0, P_, xs + plane * P_);
    });
    return xs;
  }

  /// Channels c0..c0+nc of group grp of image n: dX = 0, then tile after tile of S
  /// positions, columns = W^T * dY into the thread's buffer, scattered right away.
  void grad_inputs_block(i64 n, i64 grp, i64 c0, i64 nc, i64 S) {
    float* dx = x_ + (n * g_.C + grp * g_.Cg + c0) * g_.in_numel;
    std::fill(dx, dx + nc * g_.in_numel, 0.0f);
    float* col = tile_buffer(nc * KS_ * S);
    for (i64 p0 = 0; p0 < P_; p0 += S) {
      const i64 np = std::min(S, P_ - p0);
      sgemm(true, false, nc * KS_, np, g_.Kg, 1.0f, w_ + grp * g_.Kg * rows_ + c0 * KS_, rows_,
            y_ + (n * g_.K + grp * g_.Kg) * P_ + p0, P_, 0.0f, col, np, nullptr);
      col2im_add(g_, col, nc, p0, p0 + np, dx);
    }
  }

  /// A group's planes in every image as one matrix (Plan::batched): row k is channel k of
  /// the group (or column-matrix row k, a channel's tap, where taps_at is set), column j
  /// position j % P of image j / P.
  struct Planes {
    float* base;  ///< the group's first plane in image 0
    i64 image;    ///< floats from one image's planes to the next's
    i64 P;
    i64 plane = 0;            ///< floats from one channel's plane to the next's (0: P)
    const i64* at = nullptr;  ///< where each position's first tap lies in its plane (null: position p at p)
    const i64* taps_at = nullptr;  ///< where row k lies from base in each image (null: k * plane)
    i64 row(i64 k) const { return taps_at != nullptr ? taps_at[k] : k * (plane != 0 ? plane : P); }
    /// fn(image, position, column, length) for each run of columns [j0, j1) in one image.
    template <class Fn>
    void runs(i64 j0, i64 j1, Fn&& fn) const {
      for (i64 j = j0; j < j1;) {
        const i64 img = j / P, pos = j % P, len = std::min(j1 - j, P - pos);
        fn(img, pos, j, len);
        j += len;
      }
    }
    /// The PanelSource packer: rows k0..k0+kc, columns j0..j0+n as the GEMM's slivers.
    static void pack(const void* ctx, i64, i64 k0, i64 kc, i64 j0, i64 n, int nr, float* dst) {
      const auto& s = *static_cast<const Planes*>(ctx);
      for (i64 q = 0; q * nr < n; ++q) {
        float* d = dst + q * kc * nr;
        const i64 c0 = j0 + q * nr, cn = std::min<i64>(nr, n - q * nr);
        s.runs(c0, c0 + cn, [&](i64 img, i64 pos, i64 j, i64 len) {
          const float* src = s.base + img * s.image + pos;
          for (i64 k = 0; k < kc; ++k) std::copy(src + s.row(k0 + k), src + s.row(k0 + k) + len, d + k * nr + (j - c0));
        });
        if (cn < nr)
          for (i64 k = 0; k < kc; ++k) std::fill(d + k * nr + cn, d + (k + 1) * nr, 0.0f);
      }
    }
  };
  /// The batched product's finished tile copied to the destination planes (the forward
  /// epilogue on each run as it lands): row i goes to the destination planes' row(i); the
  /// forward's rows are output channels channel0 + i, which the epilogue is told.
  struct BatchedTile {
    const FusedRunner* r;
    const Planes* out;
    const float* product;
    i64 ld, channel0;
    bool epilogue;
    static void copy(const void* ctx, i64 i0, i64 i1, i64 j0, i64 j1) {
      const auto& t = *static_cast<const BatchedTile*>(ctx);
      t.out->runs(j0, j1, [&](i64 img, i64 pos, i64 j, i64 len) {
        for (i64 i = i0; i < i1; ++i) {
          float* dst = t.out->base + img * t.out->image + t.out->row(i);
          const float* from = t.product + i * t.ld + j;
          if (t.out->at != nullptr) {  // grad inputs of disjoint taps (no epilogue)
            for (i64 q = 0; q < len; ++q) dst[t.out->at[pos + q]] = from[q];
            continue;
          }
          dst += pos;
          std::copy(from, from + len, dst);
          if (t.epilogue)
            CONVGRAPH_ISA_CALL(conv_epilogue, t.r->epilogue_, DType::float32, dst, dst - t.r->y_, t.channel0 + i, len);
        }
      });
    }
  };

  /// Plan::batched, per group one GEMM over every image's positions into the workspace:
  /// forward Y_g = W_g * X_g, grad inputs col_g = W_g^T * dY_g stored at its taps' places.
  void batched(ConvDirection dir) {
    const bool fwd = dir == ConvDirection::forward;
    const i64 NP = g_.N * P_, M = fwd ? g_.Kg : rows_, depth = fwd ? g_.Cg : g_.Kg;
    float* xs = x_;  // x's planes of P_ positions: as stored, or subsampled (a strided 1x1 forward)
    if (pl_.subsample) xs = subsample_x();
    // Grad inputs of disjoint taps: each product entry stored at its tap's input position,
    // dx zeroed first where the taps leave some of it unread.
    const bool scatter = !fwd && !pl_.pointwise;
    const i64 x_plane = scatter ? g_.in_numel : P_;
    std::vector<i64> at, taps_at;
    if (scatter) {
      for (i64 pos = 0; pos < P_; ++pos) {
        const i64 o2 = pos % g_.out[2], o1 = pos / g_.out[2] % g_.out[1], o0 = pos / g_.out[2] / g_.out[1];
        at.push_back((o0 * g_.stride[0] * g_.in[1] + o1 * g_.stride[1]) * g_.in[2] + o2 * g_.stride[2]);
      }
      for (i64 r = 0; r < rows_; ++r) {  // row (channel, stored tap) -> the unflipped tap's offset
        i64 t[3];
        const i64 q = g_.column_row(r, t);
        taps_at.push_back(q * g_.in_numel + (t[0] * g_.in[1] + t[1]) * g_.in[2] + t[2]);
      }
      bool covered = true;
      for (std::size_t a = 0; a < 3; ++a) covered = covered && g_.out[a] * g_.ker[a] == g_.in[a];
      if (!covered)
        parallel_over(ctx_, g_.N * g_.C, [&](i64 b, i64 e) {
          std::fill(x_ + b * g_.in_numel, x_ + e * g_.in_numel, 0.0f);
        });
    }
    auto* product = static_cast<float*>(ctx_.workspace) + (pl_.subsample ? g_.N * g_.C * P_ : 0);
    for (i64 grp = 0; grp < g_.G; ++grp) {
      const Planes x{xs + grp * g_.Cg * x_plane, g_.C * x_plane, P_, x_plane, scatter ? at.data() : nullptr,
                     scatter ? taps_at.data() : nullptr};
      const Planes y{y_ + grp * g_.Kg * P_, g_.K * P_, P_};
      const Planes& in = fwd ? x : y;
      const PanelSource ps{&Planes::pack, &in};
      const BatchedTile tile{this, fwd ? &y : &x, product, NP, grp * M, fwd && !epilogue_.empty()};
      const TileHook hook{&BatchedTile::copy, &tile};
      SgemmExt ext;
      ext.b_source = &ps;
      ext.tile_done = &hook;
      sgemm_ex(!fwd, false, M, NP, depth, 1.0f, w_ + grp * g_.Kg * rows_, rows_, nullptr, NP, 0.0f,
               product, NP, ext, ctx_.pool);
    }
  }

  /// The panel source: the image planes of one group (x), `stride` floats per batch element.
  struct Source {
    const ConvGeometry* g;
    const float* x;
    i64 stride;
    static void pack_rows(const void* ctx, i64 b, i64 k0, i64 kc, i64 j0, i64 n, int nr, float* dst) {
      const auto* s = static_cast<const Source*>(ctx);
      im2col_pack(*s->g, s->x + b * s->stride, k0, kc, j0, n, nr, dst);
    }
    /// Grad weights' op(B) = im2col^T, given as im2col rows j0..j0+n over positions
    /// k0..k0+kc (contiguous copies; the GEMM's packer transposes them).
    static void rows(const void* ctx, i64 b, i64 k0, i64 kc, i64 j0, i64 n, float* dst) {
      const auto* s = static_cast<const Source*>(ctx);
      im2col_pack_t(*s->g, s->x + b * s->stride, k0, kc, j0, n, 1, dst);
    }
  };
  /// The forward epilogue on a finished C tile: y holds output channels k0.. of one image.
  struct Tile {
    const FusedRunner* r;
    float* y;
    i64 offset, k0;
    static void epilogue(const void* ctx, i64 i0, i64 i1, i64 j0, i64 j1) {
      const auto* t = static_cast<const Tile*>(ctx);
      const i64 P = t->r->P_;
      for (i64 i = i0; i < i1; ++i)
        CONVGRAPH_ISA_CALL(conv_epilogue, t->r->epilogue_, DType::float32, t->y + i * P + j0,
                           t->offset + i * P + j0, t->k0 + i, j1 - j0);
    }
  };

  const float* image(i64 n, i64 grp) const { return x_ + (n * g_.C + grp * g_.Cg) * g_.in_numel; }

  /// fn(task, pool) for every task: whole tasks per thread when there are at least
  /// `per_thread` per thread (enough to balance), else one task after another with the
  /// pool inside the GEMM.
  template <class Fn>
  void each(i64 tasks, i64 per_thread, Fn&& fn) {
    const i64 threads = ctx_.pool != nullptr ? ctx_.pool->size() : 1;
    if (threads > 1 && tasks >= per_thread * threads) {
      parallel_over(ctx_, tasks, [&](i64 b, i64 e) {
        for (i64 i = b; i < e; ++i) fn(i, nullptr);
      });
    } else {
      for (i64 i = 0; i < tasks; ++i) fn(i, ctx_.pool);
    }
  }

  static float* tile_buffer(i64 floats) {
    thread_local std::vector<float> buf;
    if (static_cast<i64>(buf.size()) < floats) buf.resize(static_cast<std::size_t>(floats));
    return buf.data();
  }

  const Plan& pl_;
  const ConvGeometry& g_;
  float* x_;
  float* w_;
  float* y_;
  ConvEpilogue epilogue_;  // forward only
  const ConvContext& ctx_;
  i64 KS_, P_, rows_;
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

  /// One GEMM per (image, group) of the column matrix's shape, plus the column matrix.
  /// float64 writes and reads it (chunks that mostly stay in cache: a quarter of that
  /// traffic is charged at memory bandwidth); float32 makes each element once, in the
  /// GEMM's packing (a gather from the image, or the col2im scatter), which costs about
  /// kPackFlops of the thread's arithmetic (fitted to the standard layers at 2 threads:
  /// the 7x7/s2 stem and 3x3 layers with 64 filters, where it is a fifth of the time).
  /// Plan::batched is one GEMM per group over all images, its product copied out once.
  /// float32's grad weights is one batch-reduce GEMM whose depth is every image's
  /// positions (the GEMM joins images shallower than its depth block).
  double estimated_seconds(const ConvProblem& p, const MachineModel& m) const override {
    constexpr double kPackFlops = 64;
    const Plan pl = make_plan(p);
    const std::int64_t rows = p.Cg() * p.kernel_numel(), cols = p.out_numel() * (pl.batched ? p.N : 1);
    const std::int64_t wgrad_depth = p.out_numel() * (p.dtype == DType::float32 ? p.N : 1);
    const double eff = p.direction == ConvDirection::forward       ? gemm_efficiency(p.Kg(), cols, rows)
                       : p.direction == ConvDirection::grad_inputs ? gemm_efficiency(rows, cols, p.Kg())
                                                                   : gemm_efficiency(p.Kg(), rows, wgrad_depth);
    // Column elements im2col packs or col2im adds: none where the GEMM reads planes as
    // stored or subsampled, or a batched product is copied out (charged below).
    const double elements = pl.pointwise || pl.subsample || pl.batched
                                ? 0.0
                                : static_cast<double>(rows * p.G) * static_cast<double>(cols * p.N);
    const bool f64 = computes_in_float64(p);
    const double columns = p.dtype == DType::float32
                               ? elements * kPackFlops / m.flops_per_s(f64)
                               : 2.0 * elements * static_cast<double>(dtype_size(p.dtype)) / 4 / m.bytes_per_s();
    const double product = pl.batched ? 2.0 * static_cast<double>(pl.workspace) : 0.0;  // written, copied out
    return p.flops() / (m.flops_per_s(f64) * eff) + columns + (operand_bytes(p) + product) / m.bytes_per_s() +
           kConvCallSeconds;
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
  template <class R>
  static void run_direction(R&& r, ConvDirection dir) {
    switch (dir) {
      case ConvDirection::forward: r.forward(); break;
      case ConvDirection::grad_inputs: r.grad_inputs(); break;
      case ConvDirection::grad_weights: r.grad_weights(); break;
    }
  }
  template <class T>
  static void dispatch(const Plan& pl, ConvDirection dir, const ConvTensors& t, const ConvContext& ctx) {
    if constexpr (std::is_same_v<T, float>) run_direction(FusedRunner(pl, t, ctx), dir);
    else run_direction(Runner<T>(pl, t, ctx), dir);
  }
};

}  // namespace
}  // namespace convgraph::cpu

namespace convgraph {
std::shared_ptr<const ConvAlgorithm> make_cpu_corrmm_algorithm() {
  return std::make_shared<cpu::CorrMMAlgorithm>();
}
}  // namespace convgraph
