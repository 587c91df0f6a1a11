#pragma once
/// The ISA-neutral part of sgemm: blocking, packing order and threading. Each kernel
/// family (sgemm_avx512.cpp, sgemm_avx2.cpp, sgemm.cpp) instantiates run_sgemm with a
/// traits type that supplies the register block and its target-specific functions:
///
///   static constexpr int kMR, kNR;        register block: kMR rows x kNR columns of C
///   static constexpr std::int64_t kKC;    deepest depth block (the A sliver's row capacity)
///   static constexpr std::int64_t kABuf;  floats of one packed A sliver
///   static constexpr std::int64_t kAPanel;  transA: A slivers per prefetch group
///   static void pack_a(g, i0, m, p0, kc, dst);        one sliver: rows i0..i0+m, depth p0..
///   static std::int64_t a_depth_offset(g, k);  floats from a packed A sliver's start to
///     its depth k (a joined batch's pieces are packed at their depths, see run_sgemm)
///   static void pack_b_panel(g, p0, kc, j0, n, dst);  columns j0..j0+n, sliver q at q*kc*kNR
///   static void kernel(g, kc, a, b, c, m, n, first, pf);  C(m x n) (+)= A sliver * B sliver
///   optional: static void kernel_packing_a(g, kc, a_src, a_dst, b, c, m, n, first, pf);
///     kernel() on the A sliver where it is stored (first element at a_src), leaving it
///     packed at a_dst for the sliver's other calls
///   optional: static void kernel_packing_b(g, kc, a, b_src, b_dst, c, m, n, first, pf);
///     kernel() on a plain stored B sliver (depth row k at b_src + k*ldb), leaving it
///     packed at b_dst for the tile's other A slivers
///   (the packing kernels fall back on pack_a_then_kernel / pack_b_then_kernel, which
///   need static void pack_b(g, p0, kc, j0, n, dst): one sliver of plain B)
///   and derives from TraitsDefaults, whose tuning constants it may shadow.
///
/// The A sliver layout is the traits' business (pack_a and kernel agree on it). A packed
/// B sliver is dst[k*kNR + j], zero-padded past n. `first` is true for the first depth
/// block: the kernel then applies beta (beta == 0: C is not read); later depth blocks
/// accumulate into C. `pf` (never null) holds lines the driver wants fetched for what comes
/// next: each call issues exactly pf->share() of them, by one() per depth step where it can
/// (a burst of them stalls the loads behind it) and the state written back to *pf, or by
/// one pf->some(). g.stream_c: C is written in one pass (first is true, beta 0) and not
/// read back soon; a kernel may then store its full tiles non-temporally (the driver
/// fences them). The k order of every sum is fixed by K (and the machine's cache sizes)
/// alone, so results do not depend on the thread count.
///
/// Blocking comes from the cache sizes read at run time: the depth block KC (at most kKC)
/// keeps an A sliver in 3/4 of L1, the column tile NC keeps a KC x NC block of B in 3/4 of
/// L2 (traits may say less: kBBlockL2Eighths), at most 768 KB (see run_sgemm). (There is
/// no MC: A slivers are packed just in time and stream from L3.)
///
/// Loop order, chosen so the kernel streams as little as possible from far away:
///   tasks = column tiles of C (times row tiles when C has few columns; op(B) is then
///   packed once up front if it is a single tile), times depth parts when K is long and
///   C small (depth_parts; summed into C at the end); in a task, per depth block,
///   the tile's B block is packed (it stays in L2; by the first A sliver's kernel calls
///   where the traits can, kernel_packing_b), then each A sliver is packed right
///   before use into a small buffer (it stays in L1), by the sliver's first kernel call
///   where the traits can (kernel_packing_a), and the kernel runs over the tile's B
///   slivers. With transA the next kAPanel slivers' depth rows are prefetched meanwhile.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "backends/cpu/sgemm.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::cpu::sgemm_detail {

struct GemmArgs {
  bool ta, tb;
  std::int64_t M, N, K;
  float alpha;
  const float* A;
  std::int64_t lda;
  const float* B;
  std::int64_t ldb;
  float beta;
  float* C;
  std::int64_t ldc;
  // sgemm_ex's extensions (SgemmExt): batch-reduce strides, a B source, a per-tile hook.
  std::int64_t batch = 1, a_stride = 0, b_stride = 0;
  const PanelSource* bsrc = nullptr;
  const TileHook* hook = nullptr;
  /// Set by the driver: C is stored non-temporally where a kernel can (see run_sgemm).
  bool stream_c = false;
  /// Set by the driver: kernel_packing_b, reading B's rows where they are stored, fetches
  /// them a few depth steps ahead into L1 (the sliver-by-sliver order, see run_sgemm).
  bool b_rows_ahead = false;
  /// op(A)(i, k) and op(B)(k, j), for the generic packers.
  float a(std::int64_t i, std::int64_t k) const { return ta ? A[k * lda + i] : A[i * lda + k]; }
  float b(std::int64_t k, std::int64_t j) const { return tb ? B[j * ldb + k] : B[k * ldb + j]; }
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Below this many flops the thread hand-off costs more than it saves.
constexpr double kMinParallelFlops = 4.0e6;

/// A per-thread, 64-byte aligned buffer that only grows: the packed panels are reused
/// across calls, so a conv layer's GEMMs neither reallocate nor page-fault each time.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(ptr_); }
  float* get(std::int64_t floats) {
    const std::size_t bytes = (static_cast<std::size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    if (bytes > bytes_) {
      std::free(ptr_);
      ptr_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      bytes_ = ptr_ ? bytes : 0;
      if (!ptr_) throw std::bad_alloc();
    }
    return ptr_;
  }

 private:
  float* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Slot 0: a thread's A sliver; 1: a thread's B block; 2: the caller's fully packed B;
/// 3: one sliver of a B source's rows (PanelSource::rows); 4: the caller's depth-part sums;
/// 5: the caller's transposed product (sgemm.cpp's operand swap).
inline float* scratch(int slot, std::int64_t floats) {
  thread_local Scratch buffers[6];
  return buffers[slot].get(floats);
}

/// Generic packers (plain C++; the compiler vectorises what it can for the TU's target).
template <int MR>
void pack_a_generic(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                    float* dst) {
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < m; ++i) dst[k * MR + i] = g.a(i0 + i, p0 + k);
    for (int i = m; i < MR; ++i) dst[k * MR + i] = 0.0f;
  }
}
template <int NR>
void pack_b_generic(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                    float* dst) {
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int j = 0; j < n; ++j) dst[k * NR + j] = g.b(p0 + k, j0 + j);
    for (int j = n; j < NR; ++j) dst[k * NR + j] = 0.0f;
  }
}

/// B panels sliver by sliver, for traits without a better way.
template <class Isa>
void pack_b_panel_by_sliver(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                            std::int64_t n, float* dst) {
  for (std::int64_t q = 0; q * Isa::kNR < n; ++q)
    Isa::pack_b(g, p0, kc, j0 + q * Isa::kNR, static_cast<int>(std::min<std::int64_t>(Isa::kNR, n - q * Isa::kNR)),
                dst + q * kc * Isa::kNR);
}

/// Fetches a stored B sliver's row of kFloats floats into L1 (prefetcht0): every line it
/// touches, wherever it starts (kernel_packing_b's rows, b_ahead steps on).
template <int kFloats>
inline void prefetch_row_l1(const float* p) {
  for (int f = 0; f < kFloats - 1; f += 16) __builtin_prefetch(p + f, 0, 3);
  __builtin_prefetch(p + kFloats - 1, 0, 3);
}

/// Prefetches two row ranges (rows of `len` floats: na at a + i*lda, nb at b + j*ldb) line
/// by line, an equal share at each of `calls` calls of some() (or share() calls of one(),
/// which a kernel interleaves with its depth steps).
class PrefetchRows {
 public:
  PrefetchRows() = default;
  PrefetchRows(const float* a, std::int64_t lda, std::int64_t na, const float* b, std::int64_t ldb,
               std::int64_t nb, std::int64_t len, std::int64_t calls)
      : a_(a), b_(b), row_(na > 0 ? a : b), lda_(lda), ldb_(ldb), na_(na), len_(len),
        lines_per_row_((len + 15) / 16 + 1) {  // + 1: a row need not start a line
    total_ = (na + nb) * lines_per_row_;
    per_call_ = (total_ + calls - 1) / std::max<std::int64_t>(calls, 1);
  }
  bool active() const { return done_ < total_; }
  /// One call's share of the lines: what some() issues.
  std::int64_t share() const { return std::min(per_call_, total_ - done_); }
  /// The next line. A caller that spreads them issues exactly share() per call (fewer
  /// would push lines onto later calls, later than the driver wants them).
  void one() {
    __builtin_prefetch(row_ + std::min(col_, len_ - 1), 0, 2);
    ++done_;
    col_ += 16;
    if (col_ == lines_per_row_ * 16) {  // next row: of A, then of B
      col_ = 0;
      ++r_;
      row_ = r_ < na_ ? a_ + r_ * lda_ : b_ + (r_ - na_) * ldb_;
    }
  }
  void some() {
    for (std::int64_t left = share(); left > 0; --left) one();
  }

 private:
  const float *a_ = nullptr, *b_ = nullptr, *row_ = nullptr;
  std::int64_t lda_ = 0, ldb_ = 0, na_ = 0, len_ = 1, lines_per_row_ = 1, total_ = 0, per_call_ = 0, done_ = 0;
  std::int64_t r_ = 0, col_ = 0;
};

/// Depth split: a long K over a small C leaves too few tiles of C to share among the
/// threads without packing op(B) once per row tile, so the depth steps are cut into
/// kparts ranges whose products go to separate buffers and are added up at the end.
/// kparts depends on the shape alone (the k order of every sum must not depend on the
/// thread count): a power of two (it divides among 2, 4 or 8 threads) of at most
/// kMaxParts, each part at least kMinPartSteps depth blocks deep (the final add is then
/// noise), and the extra buffers at most kMaxPartFloats.
constexpr std::int64_t kMaxParts = 8;
constexpr std::int64_t kMinPartSteps = 4;
constexpr std::int64_t kMaxPartFloats = std::int64_t{1} << 19;

inline std::int64_t depth_parts(std::int64_t M, std::int64_t N, std::int64_t steps) {
  std::int64_t parts = 1;
  while (parts < kMaxParts && steps >= 2 * parts * kMinPartSteps && (2 * parts - 1) * M * N <= kMaxPartFloats)
    parts *= 2;
  return parts;
}

/// Tuning constants a traits type inherits and may shadow with its own.
struct TraitsDefaults {
  /// Eighths of L2 the packed B block may fill.
  static constexpr std::int64_t kBBlockL2Eighths = 6;
  /// The shallowest depth block at which one thread runs plain B sliver by sliver (see
  /// sliver_outer in run_sgemm).
  static constexpr std::int64_t kSliverOuterMinDepth = 256;
};

/// kernel_packing_a's and kernel_packing_b's way for the calls a traits' packing kernel
/// does not cover (edge slivers): pack the sliver where it is stored (Isa::pack_a, or
/// Isa::pack_b of a plain B), then run Isa::kernel on the packed copy.
template <class Isa>
void pack_a_then_kernel(const GemmArgs& g, std::int64_t kc, const float* a_src, float* a_dst, const float* b,
                        float* c, int m, int n, bool first, PrefetchRows* pf) {
  GemmArgs stored = g;  // the sliver where it is stored, at row 0, depth 0
  stored.A = a_src;
  Isa::pack_a(stored, 0, m, 0, kc, a_dst);
  Isa::kernel(g, kc, a_dst, b, c, m, n, first, pf);
}
template <class Isa>
void pack_b_then_kernel(const GemmArgs& g, std::int64_t kc, const float* a, const float* b_src, float* b_dst,
                        float* c, int m, int n, bool first, PrefetchRows* pf) {
  GemmArgs stored = g;  // the sliver where it is stored, at depth 0, column 0
  stored.B = b_src;
  Isa::pack_b(stored, 0, kc, 0, n, b_dst);
  Isa::kernel(g, kc, a, b_dst, c, m, n, first, pf);
}

/// When the busiest of `threads` threads is done, in kernel calls per A sliver, with column
/// tiles about `width` slivers wide (tiles of equal width, as the driver makes them) times
/// `parts` depth parts, the threads taking the next task as they come free (run_sgemm's
/// hand-out). A task costs its width plus kTileOverhead: its A slivers are packed per tile.
/// 0 when there are too many tasks to bother (they spread evenly anyway).
inline double balanced_finish(std::int64_t nsl, std::int64_t width, std::int64_t parts, std::int64_t threads) {
  constexpr double kTileOverhead = 0.5;
  const std::int64_t ntiles = ceil_div(nsl, width), w = ceil_div(nsl, ntiles);
  if (ntiles * parts > 64 || threads > 64) return 0.0;
  double busy[64] = {};
  for (std::int64_t t = 0; t < ntiles * parts; ++t) {
    double* first_free = std::min_element(busy, busy + threads);
    *first_free += static_cast<double>(std::min(w, nsl - t % ntiles * w)) + kTileOverhead;
  }
  return *std::max_element(busy, busy + threads);
}

template <class Isa>
void run_sgemm(const GemmArgs& args, ThreadPool* pool) {
  constexpr int MR = Isa::kMR;
  constexpr int NR = Isa::kNR;
  GemmArgs g = args;
  const std::int64_t M = g.M, N = g.N, K = g.K;

  // Blocking from the cache sizes (see the top of this file), rounded to whole vectors.
  const CacheSizes cache = cpu_cache_sizes();
  const std::int64_t kc_max =
      std::clamp<std::int64_t>(cache.l1d * 3 / 4 / (MR * 4) / 16 * 16, 64, Isa::kKC);
  // The B block: its share of L2, but at most kMaxBBlockBytes. Measured best on both
  // machines: Zen 4 (1 MB L2) at 3/4 of it, Intel Xeon (2 MB L2) at 3/8 rather than 3/4
  // (1 thread, the 36 layer GEMM shapes against oneDNN in the same run: forward shapes
  // 0.75 -> 0.80, all 0.937 -> 0.945; 64x3136x576 145 -> 160 GFLOP/s): a bigger block and
  // the next one prefetched meanwhile (prefetch_plain_b) crowd each other out of L2.
  constexpr std::int64_t kMaxBBlockBytes = 768 << 10;
  const std::int64_t b_block = std::min(cache.l2 * Isa::kBBlockL2Eighths / 8, kMaxBBlockBytes);
  const std::int64_t nc = std::clamp<std::int64_t>(b_block / (kc_max * 4) / NR * NR, 4 * NR, 4096);

  // Depth blocks of equal size (a short last block would waste a C pass); a batch repeats
  // them per element: `steps` depth steps in all, cut into `kparts` ranges. Batch elements
  // shallower than a block are joined instead: the blocks cut the batch's depths laid end
  // to end, and a step packs one piece per element it spans (Piece). Step by element, C
  // made a pass per element: grad weights of a 7x7 layer (49 positions an image) spent
  // more time moving C than in FMAs (Zen 3, 2048x512 from 8 elements of depth 49, GFLOP/s,
  // three runs alternating: 1 thread 77 -> 89, 2 threads 112 -> 165).
  const bool joined = g.batch > 1 && K < kc_max;
  const std::int64_t depth = joined ? g.batch * K : K;  // what the blocks cut
  const std::int64_t nkb = ceil_div(depth, kc_max);
  const std::int64_t kcb = ceil_div(depth, nkb);
  const std::int64_t msl = ceil_div(M, MR), nsl = ceil_div(N, NR);
  const std::int64_t Np = nsl * NR;
  const std::int64_t steps = joined ? nkb : g.batch * nkb;
  // Step `step`'s depth, and its pieces: batch element b's depths k0..k0+len at depth
  // `at` of the step (one piece unless joined).
  struct Piece {
    std::int64_t b, k0, len, at;
  };
  auto step_depth = [&](std::int64_t step) {
    return joined ? std::min(kcb, depth - step * kcb) : std::min(kcb, K - step % nkb * kcb);
  };
  auto lead_piece = [&](std::int64_t step) {
    if (!joined) return Piece{step / nkb, step % nkb * kcb, step_depth(step), 0};
    const std::int64_t d = step * kcb;
    return Piece{d / K, d % K, std::min(K - d % K, step_depth(step)), 0};
  };
  auto for_each_piece = [&](std::int64_t step, auto&& fn) {
    const std::int64_t kc = step_depth(step);
    for (Piece pc = lead_piece(step); pc.at < kc;) {
      fn(pc);
      pc.at += pc.len;
      pc = Piece{pc.b + 1, 0, std::min(K, kc - pc.at), pc.at};
    }
  };
  const std::int64_t kparts = depth_parts(M, N, steps);

  // C written in one pass (one depth step, no depth parts), with nothing that reads it
  // tile by tile (a hook) and too big for the L3: its tiles are stored non-temporally.
  // Plain stores first read each line of C from memory (the read for ownership) only to
  // overwrite it, a third more traffic on c3d_conv1's short-K GEMMs (Zen 4, 1 thread,
  // 64x200704x81: 79 -> 83% of peak; 81x200704x64 with A transposed 81 -> 85%). Full
  // lines only: C 64-byte aligned, rows a whole number of lines apart.
  g.stream_c = steps == 1 && kparts == 1 && g.hook == nullptr && g.beta == 0.0f &&
               static_cast<double>(M) * static_cast<double>(N) * sizeof(float) >= static_cast<double>(cache.l3) &&
               reinterpret_cast<std::uintptr_t>(g.C) % 64 == 0 && g.ldc % 16 == 0;

  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) *
                       static_cast<double>(g.batch);
  const std::int64_t threads = (pool && flops >= kMinParallelFlops) ? pool->size() : 1;

  // Column tiles: at most nc wide, or half that with threads where two threads may share
  // one L2 (SMT siblings: the 2-vCPU VMs that share a core give two threads 1.14x one
  // thread's FMA peak; where each core has its own L2, as Zen 3's two-core VMs, a
  // thread's tile is as wide as one thread's). With several threads aim at about 4 tasks
  // (tiles times depth parts) per thread (so a slow core takes fewer), but keep tiles at
  // least kMinTile slivers wide: each A sliver is packed once per tile and should serve
  // several kernel calls. Tiles are of equal width: of the widths down to half that, the
  // one whose tasks leave the threads least idle at the end (balanced_finish: 49 slivers
  // on 2 threads make 10 tiles of 5, not 7 of 7). When that leaves fewer than two tasks per thread (few
  // columns: 7x7 and 14x14 conv layers), the rows are split too; op(B) is then packed
  // once up front when it is a single tile, else per task.
  constexpr std::int64_t kMinTile = 8;
  std::int64_t max_tile = std::max<std::int64_t>(1, (threads > 1 && cache.l2_shared > 1 ? nc / 2 : nc) / NR);
  // Long K with op(B) stored transposed (grad weights): the next depth step's rows of A
  // and B are prefetched into L2 during this one (see the task loop) when they fit in half
  // of it, so the tile is narrowed to fit where that still leaves it 4 slivers wide.
  // Zen 4, 1 thread: resnet_3x3_28's 128x1152x6272 90 -> 97 GFLOP/s, alexnet_conv1's 83 -> 89.
  const bool long_k_transposed_b = !g.ta && g.tb && steps > 1;
  if (long_k_transposed_b) {
    const std::int64_t fit = (cache.l2 / 2 / (kcb * 4) - M) / NR;
    if (fit >= 4) max_tile = std::min(max_tile, fit);
  }
  std::int64_t ntiles = ceil_div(nsl, max_tile);
  std::int64_t mtiles = 1;
  if (threads > 1) {
    const std::int64_t tiles_wanted = ceil_div(4 * threads, kparts);
    const std::int64_t want = std::min(max_tile, std::max(kMinTile, ceil_div(nsl, tiles_wanted)));
    ntiles = ceil_div(nsl, want);
    double best = balanced_finish(nsl, want, kparts, threads);
    for (std::int64_t w = want - 1; w >= (want + 1) / 2 && best > 0; --w)
      if (const double t = balanced_finish(nsl, w, kparts, threads); t < best - 1e-9) {
        best = t;
        ntiles = ceil_div(nsl, w);
      }
    if (ntiles * kparts < 2 * threads) mtiles = std::min(msl, ceil_div(4 * threads, ntiles * kparts));
  }
  const std::int64_t tile_ns = ceil_div(nsl, ntiles);
  ntiles = ceil_div(nsl, tile_ns);
  const std::int64_t tile_ms = ceil_div(msl, mtiles);
  mtiles = ceil_div(msl, tile_ms);
  const std::int64_t tiles = mtiles * ntiles;
  const bool shared_b = mtiles > 1 && ntiles == 1 && g.batch == 1 && kparts == 1;

  // Packs columns j0..j0+n of op(B) of batch element b: from the source, or the stored B.
  auto pack_b = [&](std::int64_t b, std::int64_t p0, std::int64_t kc, std::int64_t j0, std::int64_t n,
                    float* dst) {
    if (g.bsrc != nullptr && g.bsrc->pack != nullptr) return g.bsrc->pack(g.bsrc->ctx, b, p0, kc, j0, n, NR, dst);
    if (g.bsrc != nullptr) {  // rows from the source, a sliver at a time (they stay in L1)
      float* rows = scratch(3, kc * NR);
      GemmArgs gt = g;
      gt.tb = true;
      gt.B = rows;
      gt.ldb = kc;
      for (std::int64_t q = 0; q * NR < n; ++q) {
        const std::int64_t m = std::min<std::int64_t>(NR, n - q * NR);
        g.bsrc->rows(g.bsrc->ctx, b, p0, kc, j0 + q * NR, m, rows);
        Isa::pack_b_panel(gt, 0, kc, 0, m, dst + q * kc * NR);
      }
      return;
    }
    GemmArgs gb = g;
    gb.B += b * g.b_stride;
    Isa::pack_b_panel(gb, p0, kc, j0, n, dst);
  };
  // Columns j0..j0+n of depth step `step` (kc deep): sliver by sliver, piece by piece when joined.
  auto pack_b_step = [&](std::int64_t step, std::int64_t kc, std::int64_t j0, std::int64_t n, float* dst) {
    if (!joined) {
      const Piece pc = lead_piece(step);
      return pack_b(pc.b, pc.k0, kc, j0, n, dst);
    }
    for (std::int64_t q = 0; q * NR < n; ++q)
      for_each_piece(step, [&](const Piece& pc) {
        pack_b(pc.b, pc.k0, pc.len, j0 + q * NR, std::min<std::int64_t>(NR, n - q * NR), dst + q * kc * NR + pc.at * NR);
      });
  };
  // A sliver s (m rows) of depth step `step` into dst: piece by piece when joined, each at
  // its depth's place in the traits' sliver layout.
  auto pack_a_step = [&](std::int64_t step, std::int64_t s, int m, float* dst) {
    for_each_piece(step, [&](const Piece& pc) {
      GemmArgs ga = g;
      ga.A += pc.b * g.a_stride;
      Isa::pack_a(ga, s * MR, m, pc.k0, pc.len, dst + Isa::a_depth_offset(g, pc.at));
    });
  };

  // n tasks: each thread takes the next one as it comes free (the pool's chunks of n/(4 *
  // threads) tasks would split 36 tasks 20:16 on two threads).
  auto run = [&](std::int64_t n, auto&& fn) {
    if (threads > 1 && n > 1) {
      std::atomic<std::int64_t> next{0};
      pool->parallel_for(std::min(threads, n), [&](std::int64_t, std::int64_t) {
        for (std::int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(t, t + 1);
      });
    } else {
      fn(0, n);
    }
  };

  // op(B) packed once up front when several row tiles would otherwise each pack the
  // same single column tile: depth block p at p*kcb*Np, its sliver j at j*kc*NR within.
  float* bpk = nullptr;
  if (shared_b) {
    bpk = scratch(2, kcb * nkb * Np);
    run(nkb * ntiles, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t p = t / ntiles, j0 = (t % ntiles) * tile_ns;
        const std::int64_t p0 = p * kcb, kc = std::min(kcb, K - p0);
        pack_b(0, p0, kc, j0 * NR, std::min(N - j0 * NR, tile_ns * NR), bpk + p * kcb * Np + j0 * kc * NR);
      }
    });
  }

  // Depth part q > 0 writes its products to partial + (q-1)*M*N (row stride N, no beta).
  float* partial = kparts > 1 ? scratch(4, (kparts - 1) * M * N) : nullptr;
  GemmArgs gpart = g;
  gpart.beta = 0.0f;
  gpart.ldc = N;

  // Tasks: a tile of C times a range of depth steps.
  const std::int64_t apanel = g.ta ? Isa::kAPanel : 1;
  // Where the traits have a kernel that packs A as it computes (kernel_packing_a), each
  // sliver's first call packs it and nothing is packed up front (Zen 4, 1 thread, GFLOP/s: A transposed,
  // 4608x49x512 84 -> 103; plain A, B transposed, 256x64x25088 95 -> 100, 96x363x24200 99 -> 105).
  // (Not for joined steps: a sliver's first call reads one stored run of depths.)
  const bool pack_in_kernel = requires { &Isa::kernel_packing_a; } && !joined;
  // Likewise plain stored B, where the traits can (kernel_packing_b): the tile's first A
  // sliver reads each B sliver where it is stored and leaves it packed for the others, so
  // no packing pass stalls the FMAs (Zen 4, 1 thread, GFLOP/s: 64x12544x147 100 -> 105,
  // 64x3136x576 100.5 -> 107, 128x50176x1728 99.5 -> 105, 64x200704x81 94 -> 100.5).
  constexpr bool can_pack_b_in_kernel = requires { &Isa::kernel_packing_b; };
  const bool b_in_kernel = can_pack_b_in_kernel && !g.tb && g.bsrc == nullptr && !shared_b && !joined;
  // Plain stored B over a deep step and few rows of C (forward-like shapes: M <= 336 on a
  // 2 MB L2): B sliver by B sliver, each packed by the first A sliver's call into a buffer
  // that stays in L1 and used at once by the tile's other A slivers, all of them packed
  // (they stay in L2). B's rows are then read from far away a sliver every (s1 - s0)
  // calls, not the whole block in the first sliver's calls (Intel Xeon, 1 thread, GFLOP/s:
  // 64x3136x576 188 -> 204, 96x3025x363 180 -> 198, 128x50176x1728 144 -> 156). On one
  // thread, below a depth block of 256, C's traffic weighs more and the A-sliver order ran
  // better (64x200704x81 156 -> 125 this way); on two threads, each pulling its B rows from
  // the shared L3, this order won there too (64x200704x81 179 -> 254, 81x200704x64 with A
  // transposed 173 -> 236, 256x3136x64 334 -> 354).
  // The 6-row AVX2 kernel gains at a shallower depth (Zen 3, 1 thread, % of peak, three
  // runs alternating: 64x3136x576, depth blocks of 192, 80 -> 83; 64x12544x147 78 -> 81;
  // 96x3025x363 81 -> 84; forced at depth 81, 64x200704x81 lost, 66 -> 63): see the
  // traits' kSliverOuterMinDepth.
  const bool sliver_outer = b_in_kernel && tile_ms * Isa::kABuf * 4 <= cache.l2 / 4 &&
                            (kcb >= Isa::kSliverOuterMinDepth || threads > 1);
  // There each B sliver's first call reads its kc rows, a page or more apart, from L2 (see
  // `ahead` below) or beyond: it fetches them a few steps ahead into L1 as it goes.
  g.b_rows_ahead = gpart.b_rows_ahead = sliver_outer;
  // Grad weights: op(A) stored with the depth along rows (A plain), op(B) too unless a
  // source makes it (B transposed; cpu.corrmm's im2col source: then A's rows alone).
  const bool prefetch_rows = long_k_transposed_b;
  const bool prefetch_b_rows = g.bsrc == nullptr && !shared_b;  // shared_b: packed up front
  const bool prefetch_plain_b = !g.tb && g.bsrc == nullptr && !shared_b;
  // Where A sliver s (depth p0 on) is stored in a batch element's A, for kernel_packing_a.
  auto stored_a = [&](const float* a, std::int64_t p0, std::int64_t s) {
    return g.ta ? a + p0 * g.lda + s * MR : a + s * MR * g.lda + p0;
  };
  run(kparts * tiles, [&](std::int64_t begin, std::int64_t end) {
    float* abuf = scratch(0, sliver_outer ? tile_ms * Isa::kABuf : Isa::kABuf);
    float* local_b = shared_b ? nullptr : scratch(1, kcb * tile_ns * NR);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t part = t / tiles, mt = t % tiles / ntiles, nt = t % ntiles;
      const std::int64_t s0 = mt * tile_ms, s1 = std::min(msl, s0 + tile_ms);
      const std::int64_t j0 = nt * tile_ns, j1 = std::min(nsl, j0 + tile_ns);
      const GemmArgs& gc = part == 0 ? g : gpart;
      float* C = part == 0 ? g.C : partial + (part - 1) * M * N;
      const std::int64_t step0 = steps * part / kparts, step1 = steps * (part + 1) / kparts;
      const std::int64_t tile_rows = std::min(M, s1 * MR) - s0 * MR, tile_cols = std::min(N, j1 * NR) - j0 * NR;
      for (std::int64_t step = step0; step < step1; ++step) {
        // The step's first piece (all of it unless joined): what the plain-B paths and the
        // prefetches below read.
        const Piece lead = lead_piece(step);
        const std::int64_t b = lead.b, p = step % nkb, p0 = lead.k0, kc = step_depth(step);
        // Long K over a small tile (grad weights): the packers read every element of the
        // step's A and B rows once, straight from memory, while the kernel waits. So the
        // next step's rows are prefetched a few lines per kernel call, spread over this
        // step's compute, when they fit in half of L2 beside this step's packed block;
        // else B's rows alone when they fit in a quarter (A's then come sliver by sliver).
        PrefetchRows next, next_a;  // the next step's rows; the next A sliver's
        const float* next_b = nullptr;  // plain B: the next block's first row, kc, columns
        std::int64_t next_b_kc = 0, next_b_cols = 0;
        bool next_covers_a = false;
        if (prefetch_rows && step + 1 < step1) {
          const Piece np = lead_piece(step + 1);  // joined: its first piece alone
          const std::int64_t nb = np.b, np0 = np.k0, nkc = np.len;
          const std::int64_t ncols = prefetch_b_rows ? tile_cols : 0;
          next_covers_a = (tile_rows + ncols) * nkc * 4 <= cache.l2 / 2;
          const float* next_b = ncols > 0 ? g.B + nb * g.b_stride + j0 * NR * g.ldb + np0 : nullptr;
          if (next_covers_a)
            next = PrefetchRows(g.A + nb * g.a_stride + s0 * MR * g.lda + np0, g.lda, tile_rows, next_b, g.ldb,
                                ncols, nkc, (s1 - s0) * (j1 - j0));
          else if (ncols > 0 && ncols * nkc * 4 <= cache.l2 / 4)  // B's rows alone (the packer's)
            next = PrefetchRows(nullptr, 0, 0, next_b, g.ldb, ncols, nkc, (s1 - s0) * (j1 - j0));
        } else if (prefetch_plain_b) {
          // Plain stored B (forward-like shapes: few rows of C, long rows of B): the first A
          // sliver's calls read the block's kc rows straight from memory, so the next
          // block's rows are fetched during this one's compute: this task's next step, or
          // the first step of the task this thread runs next.
          std::int64_t nstep = step + 1, nj0 = j0, nj1 = j1;
          const bool next_task = nstep == step1 && t + 1 < end;
          if (next_task) {
            nstep = steps * ((t + 1) / tiles) / kparts;
            nj0 = (t + 1) % ntiles * tile_ns;
            nj1 = std::min(nsl, nj0 + tile_ns);
          }
          if (nstep < step1 || next_task) {
            const Piece np = lead_piece(nstep);  // joined: its first piece alone
            next_b = g.B + np.b * g.b_stride + np.k0 * g.ldb + nj0 * NR;
            next_b_kc = np.len;
            next_b_cols = std::min(N, nj1 * NR) - nj0 * NR;
            if (!sliver_outer)  // else its first sliver alone, during this block's last sliver
              next = PrefetchRows(nullptr, 0, 0, next_b, g.ldb, next_b_kc, next_b_cols, (s1 - s0) * (j1 - j0));
          }
        }
        GemmArgs ga = g;  // A of batch element b
        ga.A += b * g.a_stride;
        if constexpr (can_pack_b_in_kernel) if (sliver_outer) {  // see sliver_outer
          const float* b_rows = g.B + b * g.b_stride + p0 * g.ldb;
          for (std::int64_t j = j0; j < j1; ++j) {
            const int n = static_cast<int>(std::min<std::int64_t>(NR, N - j * NR));
            // The next B sliver's rows (the next block's first) into L2 during this one's calls.
            PrefetchRows ahead;
            if (j + 1 < j1)
              ahead = PrefetchRows(nullptr, 0, 0, b_rows + (j + 1) * NR, g.ldb, kc,
                                   std::min<std::int64_t>(NR, N - (j + 1) * NR), s1 - s0);
            else if (next_b != nullptr)
              ahead = PrefetchRows(nullptr, 0, 0, next_b, g.ldb, next_b_kc, std::min<std::int64_t>(NR, next_b_cols),
                                   s1 - s0);
            for (std::int64_t s = s0; s < s1; ++s) {
              const int m = static_cast<int>(std::min<std::int64_t>(MR, M - s * MR));
              float* as = abuf + (s - s0) * Isa::kABuf;
              float* cj = C + s * MR * gc.ldc + j * NR;
              const bool first = step == step0;
              if (s == s0) {
                if (j == j0) Isa::pack_a(ga, s * MR, m, p0, kc, as);
                Isa::kernel_packing_b(gc, kc, as, b_rows + j * NR, local_b, cj, m, n, first, &ahead);
              } else if (j == j0) {
                if constexpr (requires { &Isa::kernel_packing_a; })
                  Isa::kernel_packing_a(gc, kc, stored_a(ga.A, p0, s), as,
                                        local_b, cj, m, n, first, &ahead);
                else {
                  Isa::pack_a(ga, s * MR, m, p0, kc, as);
                  Isa::kernel(gc, kc, as, local_b, cj, m, n, first, &ahead);
                }
              } else {
                Isa::kernel(gc, kc, as, local_b, cj, m, n, first, &ahead);
              }
            }
          }
          continue;
        }
        const float* bp;
        if (shared_b) {
          bp = bpk + p * kcb * Np + j0 * kc * NR;
        } else {
          if (!b_in_kernel) pack_b_step(step, kc, j0 * NR, std::min(N, j1 * NR) - j0 * NR, local_b);
          bp = local_b;
        }
        for (std::int64_t sb = s0; sb < s1; sb += apanel) {
          const std::int64_t se = std::min(s1, sb + apanel);
          // Plain A whose next step's rows are not being prefetched (narrow or tall tiles: 7x7
          // layers, grad weights of many filters): the next sliver's rows, during this one's calls.
          if (!g.ta && !next_covers_a && !next_a.active() && sb + 1 < s1)
            next_a = PrefetchRows(ga.A + (sb + 1) * MR * g.lda + p0, g.lda, std::min<std::int64_t>(MR, M - (sb + 1) * MR),
                                nullptr, 0, 0, lead.len, j1 - j0);
          // Transposed A: the next panel's kc depth rows (a short run each, lda apart: the
          // hardware prefetcher does not follow them), during this panel's calls (Zen 4, 1
          // thread, 4608x49x512, resnet_3x3_7's grad inputs, A from memory: 92 -> 94 GFLOP/s).
          if (g.ta && !next_a.active() && se < s1)
            next_a = PrefetchRows(ga.A + p0 * g.lda + se * MR, g.lda, lead.len, nullptr, 0, 0,
                                  std::min(M, std::min(s1, se + apanel) * MR) - se * MR, (se - sb) * (j1 - j0));
          for (std::int64_t s = sb; s < se; ++s) {
            const int m = static_cast<int>(std::min<std::int64_t>(MR, M - s * MR));
            const bool packing_b = b_in_kernel && s == s0;  // this sliver's calls pack B
            if (!pack_in_kernel || packing_b) pack_a_step(step, s, m, abuf);
            float* crow = C + s * MR * gc.ldc;
            for (std::int64_t j = j0; j < j1; ++j) {
              const int n = static_cast<int>(std::min<std::int64_t>(NR, N - j * NR));
              const float* bj = bp + (j - j0) * kc * NR;
              // The call's larger share of lines in the kernel's depth steps, the other in
              // one go: a burst of lines between calls waits on the fill buffers (Intel Xeon,
              // 1 thread, 64x3136x576: the next B block's 119 lines a call in one go,
              // behind the next A sliver's 17 spread, cost 10% of the time; 142 -> 163 GFLOP/s).
              PrefetchRows& spread = next_a.share() >= next.share() ? next_a : next;
              bool packing = false;  // the sliver's first call packs it
              if constexpr (can_pack_b_in_kernel)
                if ((packing = packing_b))
                  Isa::kernel_packing_b(gc, kc, abuf, g.B + b * g.b_stride + p0 * g.ldb + j * NR,
                                        local_b + (j - j0) * kc * NR, crow + j * NR, m, n, step == step0, &spread);
              if constexpr (requires { &Isa::kernel_packing_a; })
                if (pack_in_kernel && !packing && (packing = j == j0))
                  Isa::kernel_packing_a(gc, kc, stored_a(ga.A, p0, s), abuf,
                                        bj, crow + j * NR, m, n, step == step0, &spread);
              if (!packing) Isa::kernel(gc, kc, abuf, bj, crow + j * NR, m, n, step == step0, &spread);
              (&spread == &next ? next_a : next).some();
            }
          }
        }
      }
      if (g.hook != nullptr && kparts == 1)
        g.hook->fn(g.hook->ctx, s0 * MR, std::min(M, s1 * MR), j0 * NR, std::min(N, j1 * NR));
    }
    // Streaming stores are weakly ordered: make them visible before the caller (or the
    // pool's join) reads C.
    if (g.stream_c) __builtin_ia32_sfence();
  });
  if (kparts == 1) return;

  // C += the other parts, in part order (a fixed sum order), tile by tile.
  run(tiles, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t i0 = t / ntiles * tile_ms * MR, i1 = std::min(M, i0 + tile_ms * MR);
      const std::int64_t j0 = t % ntiles * tile_ns * NR, j1 = std::min(N, j0 + tile_ns * NR);
      for (std::int64_t i = i0; i < i1; ++i) {
        float* __restrict c = g.C + i * g.ldc;
        for (std::int64_t q = 1; q < kparts; ++q) {
          const float* __restrict src = partial + (q - 1) * M * N + i * N;
          for (std::int64_t j = j0; j < j1; ++j) c[j] += src[j];
        }
      }
      if (g.hook != nullptr) g.hook->fn(g.hook->ctx, i0, i1, j0, j1);
    }
  });
}

}  // namespace convgraph::cpu::sgemm_detail
