// cpu.direct's channel-vectorised path (float32; the plan is backends/cpu/direct_kvec.hpp):
// forward, grad inputs (strided ones phase by phase, a row's phases in one unit) and grad
// weights, for layers with at least kKvecMinChannels destination (output-gradient, for grad
// weights) channels per group.
//
// A tile is P output pixels x NK vectors of destination channels, all accumulators in
// registers; each step of the reduction over (source channel, tap) broadcasts one source
// value per pixel and loads NK weight vectors, so any stride, dilation or kernel size costs
// the same and no lane is wasted on short rows: the pixels of a tile are consecutive in
// (image, position) order and may span rows and images (7x7 images fill whole tiles).
// That is what the row engine (direct.cpp) lacks for C = 3 first layers (strided, with
// gathered loads), 7x7 layers (rows shorter than a vector) and 3-D layers.
//
// A work unit is a block of destination channels x kTiles tiles; it walks the source
// channels in chunks whose weights fit in L1, keeping its partial sums in a small buffer,
// and finally writes them transposed to the planar destination (plus the fused epilogue).
// Grad weights runs the same tile over (input channel, tap) rows and dy transposed in
// chunks of kChunkPixels pixels. With AVX-512, 8-channel groups run two to a vector over an
// interleaved source copy (KvecPlan::pair_groups): units of two groups, positions of two floats.
// One vector of channels runs two tiles in one destination row as a row tile (row_tile),
// which broadcasts each source value once for all the filter row's taps that read it;
// grad weights likewise runs whole filter rows over a run of dy pixels (dw_row_tile).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/conv_geometry.hpp"
#include "backends/cpu/direct_kvec.hpp"
#include "backends/cpu/sgemm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"
#include "backends/cpu/kernels/native_vec.hpp"
#include "backends/cpu/kernels/prefetch.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

// Register blocks per level (direct_kvec.hpp's kvec_shape): kAcc accumulators of kL floats
// (24 of 32 registers with AVX-512, 12 of 16 below) as rows x vectors, plus the vectors'
// weights and a broadcast (for 3 x 4 the compiler reads the fourth vector from memory,
// which AVX2 takes for grad weights only: kvec_shape). Every shape comes from the one
// template below.
#if CONVGRAPH_ISA_AVX512
constexpr int kL = 16;
#elif CONVGRAPH_ISA_AVX2
constexpr int kL = 8;
#else
constexpr int kL = 4;
#endif
constexpr int kMaxNK = static_cast<int>(kvec_max_vectors(kL));
constexpr int kAcc = static_cast<int>(kvec_accumulators(kL));
constexpr int kMaxP = 8;          // rows of a tile at most
// Tiles per work unit, sharing each weight chunk in L1: 12 KiB of partial sums at every
// level (8 tiles of AVX-512, 32 of AVX2), so a unit stores runs of 48-96 pixels per
// channel whatever the vector width (8 AVX2 tiles stored runs of 24-48 pixels, slower).
constexpr int kTiles = 12 * 1024 / static_cast<int>(kAcc * kL * sizeof(float));
constexpr i64 kChunkBytes = 24 * 1024;  // weights per source-channel chunk (L1)
constexpr i64 kChunkPages = 32;         // source channels per chunk when planes exceed a page
constexpr i64 kChunkPixels = 96;        // grad weights: dy pixels transposed at a time (L1)
using vkf = float __attribute__((vector_size(kL * sizeof(float))));
static_assert(kKvecMaxBlock % (kL * kMaxNK) == 0 && kKvecMaxTileRows % kMaxP == 0);

KvecShape shape_for(const KvecPlan& pl) { return kvec_shape(pl.tile_channels(kL), kL, pl.grad_weights); }

/// The float at `at` in every lane, as one broadcast load. `vkf{} + *at` is not that: 0 + s
/// is +0 for s = -0, so the compiler added in a scalar register first and then broadcast
/// the sum (a dependent add and a shuffle a broadcast); s - 0 is s, so it folds away.
inline vkf splat(const float* at) { return *at - vkf{}; }

/// The two floats at `at` in every pair of lanes (paired groups: lane 2i the first group's
/// value, 2i + 1 the second's), as one 64-bit broadcast; moved as integers, so the bits
/// arrive unchanged.
inline vkf pair_broadcast(const float* at) {
  using vkq = std::int64_t __attribute__((vector_size(kL * sizeof(float))));
  std::int64_t bits;
  std::memcpy(&bits, at, sizeof bits);
  return reinterpret_cast<vkf>(vkq{} + bits);
}

/// Paired groups' lanes rearranged, pixel by pixel (kL floats each). kToChannels: results
/// into channel order, the even lanes (the first group's channels) then the odd ones (the
/// second's, its next channels in NCHW). Else the inverse, for grad weights' dy chunks:
/// the first group's channel i to lane 2i, the second's to 2i + 1.
template <bool kToChannels>
void permute_pairs(float* at, i64 pixels) {
#if CONVGRAPH_ISA_AVX512
  for (i64 j = 0; j < pixels; ++j) {
    vkf v;
    std::memcpy(&v, at + j * kL, sizeof v);
    if constexpr (kToChannels) v = __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    else v = __builtin_shufflevector(v, v, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    std::memcpy(at + j * kL, &v, sizeof v);
  }
#else
  (void)at, (void)pixels;  // only AVX-512's vectors hold two groups
#endif
}

/// acc[p][*] (+)= sum_{q in [q0, q1), t < nt} src[p][q * qstride + taps[t]] * w[q][t][*] for
/// P rows and NK vectors (w's rows T taps apart), with acc held in io ([P][NK * kL]):
/// zero-started when `init`, else loaded. Taps t = u mod U go to accumulator set u, added
/// up at the end. kPair: each source read is a pair of floats (pair_broadcast).
/// kRows: the taps are `nrows` runs of nt, each `row_step` taps after the one before (a
/// tile's columns in each tap row: skip_columns), all in each source channel's pass.
template <int P, int NK, int U, bool kPair, bool kRows>
[[gnu::always_inline]] inline void tile_body(const float* const* src, const float* w, const i64* taps, i64 T, i64 nt,
                                             i64 nrows, i64 row_step, i64 q0, i64 q1, i64 qstride, float* io,
                                             bool init) {
  constexpr int B = NK * kL;
  vkf acc[U][P][NK];
  const float* s[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    s[p] = src[p] + q0 * qstride;
#pragma GCC unroll 4
    for (int v = 0; v < NK; ++v) {
      if (init) acc[0][p][v] = vkf{};
      else std::memcpy(&acc[0][p][v], io + p * B + v * kL, sizeof(vkf));
#pragma GCC unroll 3
      for (int u = 1; u < U; ++u) acc[u][p][v] = vkf{};
    }
  }
  // One reduction step of `n` (U, or 1 for the tail) taps: offsets tp, weights wt. Every
  // address stays in a general register: rows advance a channel at a time and taps and
  // weights by pointer, so 8 rows, 3 offsets and 2 pointers fit. Indexing by q * qstride +
  // taps[t] spilled a row and the counter in the 8 x 16 x 3 tile (Zen 5, 2 threads, grad
  // inputs of 8x64x28x28 -> 128, 5x5, 4 groups: 2.10 -> 1.84 ms).
  const auto step = [&](const float* wt, const i64* tp, auto n) {
    constexpr int kN = decltype(n)::value;
    vkf wv[kN][NK];
    i64 o[kN];
#pragma GCC unroll 3
    for (int u = 0; u < kN; ++u) {
      o[u] = tp[u];
#pragma GCC unroll 4
      for (int v = 0; v < NK; ++v) std::memcpy(&wv[u][v], wt + u * B + v * kL, sizeof(vkf));
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 3
      for (int u = 0; u < kN; ++u) {
        if constexpr (kPair) {
          const vkf x = pair_broadcast(s[p] + o[u]);
#pragma GCC unroll 4
          for (int v = 0; v < NK; ++v) acc[u][p][v] += x * wv[u][v];
        } else {
          const float x = s[p][o[u]];
#pragma GCC unroll 4
          for (int v = 0; v < NK; ++v) acc[u][p][v] += x * wv[u][v];
        }
      }
  };
  const float* wq = w + q0 * T * B;
  for (i64 q = q0; q < q1; ++q, wq += T * B) {
    for (i64 r = 0; r < (kRows ? nrows : 1); ++r) {
      const i64* const row = taps + (kRows ? r * row_step : 0);
      const float* wt = wq + (kRows ? r * row_step * B : 0);
      const i64* tp = row;
      const i64* const whole = row + nt / U * U;
      for (; tp != whole; tp += U, wt += U * B) step(wt, tp, std::integral_constant<int, U>{});
      for (; tp != row + nt; ++tp, wt += B) step(wt, tp, std::integral_constant<int, 1>{});
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) s[p] += qstride;
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < NK; ++v) {
#pragma GCC unroll 3
      for (int u = 1; u < U; ++u) acc[0][p][v] += acc[u][p][v];
      std::memcpy(io + p * B + v * kL, &acc[0][p][v], sizeof(vkf));
    }
}
template <int P, int NK, int U, bool kPair = false>
void tile(const float* const* src, const float* w, const i64* taps, i64 T, i64 nt, i64 q0, i64 q1, i64 qstride,
          float* io, bool init) {
  tile_body<P, NK, U, kPair, false>(src, w, taps, T, nt, 1, 0, q0, q1, qstride, io, init);
}
template <int P, int NK, int U, bool kPair = false>
void span_tile(const float* const* src, const float* w, const i64* taps, i64 T, i64 nt, i64 nrows, i64 row_step,
               i64 q0, i64 q1, i64 qstride, float* io, bool init) {
  tile_body<P, NK, U, kPair, true>(src, w, taps, T, nt, nrows, row_step, q0, q1, qstride, io, init);
}

/// A row tile: kRowPixels consecutive positions of one destination row (F floats apart,
/// stride 1) x one vector of destination channels, over taps in `nrows` rows of KW
/// consecutive positions (dilation 1; the r-th row's first tap at offset taps[r * KW],
/// its weights KW vectors from w + r * KW * kL in a source channel's T taps). Each source
/// value is broadcast once per tap row and feeds the KW (pixel, tap) pairs that read it:
/// kRowPixels + KW - 1 broadcasts and KW weight loads for kRowPixels x KW FMAs, where tile()
/// takes a broadcast per FMA. One vector of channels (16, or two groups of 8) ran tile()
/// at 0.56-0.7 of peak, bound by its loads; this runs at 0.82-0.92 (Zen 5, 1 thread, L1).
/// 16 pixels keep each accumulator's KW dependent FMAs a step off the critical path
/// (8 pixels ran at 0.72).
constexpr int kRowPixels = 16;
template <int KW, bool kPair>
void row_tile(const float* src, const float* w, const i64* taps, i64 T, i64 nrows, i64 q0, i64 q1, i64 qstride,
              float* io, bool init) {
  constexpr int P = kRowPixels, F = kPair ? 2 : 1;
  vkf acc[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    if (init) acc[p] = vkf{};
    else std::memcpy(&acc[p], io + p * kL, sizeof(vkf));
  }
  const float* sq = src + q0 * qstride;
  const float* wq = w + q0 * T * kL;
  for (i64 q = q0; q < q1; ++q, sq += qstride, wq += T * kL)
    for (i64 r = 0; r < nrows; ++r) {
      const float* s = sq + taps[r * KW];
      const float* wr = wq + r * KW * kL;
      vkf wv[KW];
#pragma GCC unroll 8
      for (int t = 0; t < KW; ++t) std::memcpy(&wv[t], wr + t * kL, sizeof(vkf));
#pragma GCC unroll 24
      for (int j = 0; j < P + KW - 1; ++j) {
        vkf x;
        if constexpr (kPair) x = pair_broadcast(s + j * F);
        else x = splat(s + j);
#pragma GCC unroll 8
        for (int t = 0; t < KW; ++t)
          if (j - t >= 0 && j - t < P) acc[j - t] += x * wv[t];
      }
    }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) std::memcpy(io + p * kL, &acc[p], sizeof(vkf));
}

/// Grad weights' row tile: NR filter rows of KW taps (dilation 1) x one vector of output
/// channels, accumulated over the pixels of a dy chunk (dyt: pixel j's channels at
/// dyt + j * kL): io row r * KW + k (+)= sum_j x[xrows[r] + x_off[j] + k * F] * dyt[j],
/// zero-started when `init`. The chunk comes as `nruns` runs, run u its pixels
/// [runs[u], runs[u + 1]), whose sources are S positions apart (along a row at stride S):
/// the caller finds them once for all the chunk's tiles. Source column c of a run feeds the
/// pairs (pixel i, tap k)
/// with S * i + k = c: it is broadcast once per filter row for all of them, against a
/// window of the last ceil(KW / S) dy vectors. At stride 1 that is NR broadcasts and one
/// load for NR x KW FMAs, at stride 2 2 x NR broadcasts for NR x KW, where tile() takes a
/// broadcast per FMA. The first and last pixels' steps skip the pairs outside the run (never
/// a zero product, which would turn an infinite input into NaN).
template <int KW, int NR, int S, bool kPair>
void dw_row_tile(const float* const* xrows, const float* dyt, const i64* x_off, const i64* runs, i64 nruns,
                 float* io, bool init) {
  constexpr int F = kPair ? 2 : 1, M = (KW + S - 1) / S;
  vkf acc[NR][KW];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int k = 0; k < KW; ++k) {
      if (init) acc[r][k] = vkf{};
      else std::memcpy(&acc[r][k], io + (r * KW + k) * kL, sizeof(vkf));
    }
  for (i64 u = 0; u < nruns; ++u) {
    const i64 j0 = runs[u], n = runs[u + 1] - j0;
    const float* xs[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) xs[r] = xrows[r] + x_off[j0];
    const float* d = dyt + j0 * kL;
    vkf win[M] = {};  // win[u]: dy of the run's pixel i - u
    // Step i: columns S * i + e (e < S), each tap k = e + S * u with pixel i - u in the run.
    const auto step = [&](i64 i, auto guarded) {
#pragma GCC unroll 8
      for (int u = M - 1; u > 0; --u) win[u] = win[u - 1];
      if (!guarded || i < n) std::memcpy(&win[0], d + i * kL, sizeof(vkf));
#pragma GCC unroll 2
      for (int e = 0; e < S; ++e) {
        bool any = !guarded;
#pragma GCC unroll 8
        for (int u = 0; u < M; ++u) any = any || (e + S * u < KW && i - u >= 0 && i - u < n);
        if (!any) continue;  // no pair reads this column (past the run's last tap)
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
          vkf x;
          if constexpr (kPair) x = pair_broadcast(xs[r] + (S * i + e) * F);
          else x = splat(xs[r] + S * i + e);
#pragma GCC unroll 8
          for (int u = 0; u < M; ++u)
            if (e + S * u < KW && (!guarded || (i - u >= 0 && i - u < n))) acc[r][e + S * u] += x * win[u];
        }
      }
    };
    // Steps [0, M - 1) and [max(n, M - 1), n + M - 1) have pairs outside the run.
    i64 i = 0;
    for (; i < M - 1; ++i) step(i, std::true_type{});
    for (; i < n; ++i) step(i, std::false_type{});
    for (; i < n + M - 1; ++i) step(i, std::true_type{});
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int k = 0; k < KW; ++k) std::memcpy(io + (r * KW + k) * kL, &acc[r][k], sizeof(vkf));
}

/// out[c * ostride + k] = in[k * istride + c] for k < rows, c < cols, in whole kVL x kVL
/// blocks through registers; returns the extents the blocks covered (cols rounded down to
/// kVL; rows all, or with kStream rounded down to kRun), the caller moves the rest one float
/// at a time. The last rows short of a block go as one, each output row's first floats
/// stored alone: a strided grad inputs' rows of 56 positions left 8 a row to the floats one
/// at a time, 7% of its time (ResNeXt's stride-2 layer, Zen 5). Unit stores and dy
/// chunks moved one float per load and store before (Zen 4, resnet_stem forward, 1 thread:
/// 26.9 -> 21.0 ms; Zen 3 with 8 x 8 blocks: the stem 0.57 -> 0.69 of peak). kStream: the
/// stores bypass the caches, and each output row gets a whole 64-byte line at once (two
/// 8 x 8 blocks with AVX2): half lines, finished a block later, left the write-combining
/// buffers to flush partial lines (Zen 3, resnet_stem forward, 1 thread: 33.5 -> 27-29 ms).
template <bool kStream = false>
std::pair<i64, i64> transpose_blocks(const float* in, i64 istride, float* out, i64 ostride, i64 rows, i64 cols) {
  constexpr int kLineFloats = 64 / static_cast<int>(sizeof(float));
  constexpr int kRun = kStream ? std::max(kVL, kLineFloats) : kVL;  // rows stored per output row at once
  constexpr int kSub = kRun / kVL;
  const i64 rv = rows / kRun * kRun, cv = cols / kVL * kVL;
  for (i64 k = 0; k < rv; k += kRun)
    for (i64 c = 0; c < cv; c += kVL) {
      vnat r[kSub][kVL];
#pragma GCC unroll 2
      for (int h = 0; h < kSub; ++h) {
#pragma GCC unroll 16
        for (int i = 0; i < kVL; ++i) r[h][i] = loadn(in + (k + h * kVL + i) * istride + c);
        transposen(r[h]);
      }
#pragma GCC unroll 16
      for (int i = 0; i < kVL; ++i)
#pragma GCC unroll 2
        for (int h = 0; h < kSub; ++h) {
          if constexpr (kStream) stream_storen(out + (c + i) * ostride + k + h * kVL, r[h][i]);
          else storen(out + (c + i) * ostride + k + h * kVL, r[h][i]);
        }
    }
  if (kStream || rv == rows) return {rv, cv};
  const int left = static_cast<int>(rows - rv);  // below kVL: rows past it repeat the last
  for (i64 c = 0; c < cv; c += kVL) {
    vnat r[kVL];
#pragma GCC unroll 16
    for (int i = 0; i < kVL; ++i) r[i] = loadn(in + (rv + std::min(i, left - 1)) * istride + c);
    transposen(r);
#pragma GCC unroll 16
    for (int i = 0; i < kVL; ++i) storen_first(out + (c + i) * ostride + rv, r[i], left);
  }
  return {rows, cv};
}

/// A part of the destination walked as one grid of pixels: all of it, or one phase of
/// strided grad inputs (KvecPlan::phases), with its run of the tap lists.
struct Phase {
  std::array<i64, 3> extent;  ///< positions along each axis
  std::array<i64, 3> step;    ///< destination floats between neighbours along each axis
  i64 first;                  ///< the first position's offset in a destination plane
  i64 tap0, taps;
  i64 numel() const { return extent[0] * extent[1] * extent[2]; }
};

/// Fewer than kKvecMinChannels destination channels (KvecPlan::pixel_vectors): KB channels x
/// NP vectors of consecutive positions along a row, all taps of `nq` source channels (taps
/// offsets into the padded copy, qstride apart), weights w[q][t][d] for d < ndst from the
/// block's first channel. Stores the first n positions of each channel, cstride apart.
template <int KB, int NP>
void pixel_tile(const float* src, const float* w, i64 ndst, const i64* taps, i64 nt, i64 nq, i64 qstride,
                float* dst, i64 cstride, i64 n) {
  vkf acc[KB][NP];
#pragma GCC unroll 4
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[kk][v] = vkf{};
  for (i64 q = 0; q < nq; ++q) {
    const float* sq = src + q * qstride;
    const float* wq = w + q * nt * ndst;
    for (i64 t = 0; t < nt; ++t) {
      // Of the weights and the source vectors, the fewer stay in registers and the other
      // operand streams through one: KB x NP + min(KB, NP) + 1 registers, 16 at most.
      // Holding the larger side (a 4 x 3 tile's 4 weights) took 17 and spilled an
      // accumulator, whose store and reload each step halved the speed (Zen 3, 1 thread).
      const float* s = sq + taps[t];
      if constexpr (KB <= NP) {
        float wt[KB];
#pragma GCC unroll 4
        for (int kk = 0; kk < KB; ++kk) wt[kk] = wq[t * ndst + kk];
#pragma GCC unroll 8
        for (int v = 0; v < NP; ++v) {
          vkf x;
          std::memcpy(&x, s + v * kL, sizeof(vkf));
#pragma GCC unroll 4
          for (int kk = 0; kk < KB; ++kk) acc[kk][v] += wt[kk] * x;
        }
      } else {
        vkf x[NP];
#pragma GCC unroll 8
        for (int v = 0; v < NP; ++v) std::memcpy(&x[v], s + v * kL, sizeof(vkf));
#pragma GCC unroll 4
        for (int kk = 0; kk < KB; ++kk) {
          const float wt = wq[t * ndst + kk];
#pragma GCC unroll 8
          for (int v = 0; v < NP; ++v) acc[kk][v] += wt * x[v];
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) {
      const i64 m = std::min<i64>(kL, n - v * kL);
      if (m == kL) {
        std::memcpy(dst + kk * cstride + v * kL, &acc[kk][v], sizeof(vkf));
      } else if (m > 0) {
        alignas(64) float part[kL];
        std::memcpy(part, &acc[kk][v], sizeof(vkf));
        std::copy(part, part + m, dst + kk * cstride + v * kL);
      }
    }
}

/// Grad weights with fewer than kKvecMinChannels output channels (pixel vectors):
/// out[kk][r] += sum over the rows i < nrows, positions j < n of dy[i][kk * cstride + j] *
/// x[i][roff[r] + j], for KB output channels and R (input channel, tap) rows whose source
/// rows start roff[r] after x[i]. Positions go in vectors; in a row's last partial vector
/// both operands' lanes past n are zero, so a NaN or Inf beyond the row stays out of the sums.
template <int KB, int R>
void pixel_dw_tile(const float* const* dy, i64 cstride, const float* const* x, i64 nrows, const i64* roff, i64 n,
                   float* out, i64 out_kstride) {
  using vki = std::int32_t __attribute__((vector_size(kL * sizeof(float))));
  vkf acc[KB][R];
#pragma GCC unroll 4
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[kk][r] = vkf{};
  const i64 full = n / kL * kL, m = n - full;
  vki keep;
  for (int l = 0; l < kL; ++l) keep[l] = l < m ? -1 : 0;
  for (i64 i = 0; i < nrows; ++i) {
    const float* xi[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xi[r] = x[i] + roff[r];
    const auto step = [&](i64 j, const vkf* d, bool tail) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        vkf xv;
        std::memcpy(&xv, xi[r] + j, sizeof(vkf));
        if (tail) xv = reinterpret_cast<vkf>(reinterpret_cast<vki>(xv) & keep);
#pragma GCC unroll 4
        for (int kk = 0; kk < KB; ++kk) acc[kk][r] += d[kk] * xv;
      }
    };
    for (i64 j = 0; j < full; j += kL) {
      vkf d[KB];
#pragma GCC unroll 4
      for (int kk = 0; kk < KB; ++kk) std::memcpy(&d[kk], dy[i] + kk * cstride + j, sizeof(vkf));
      step(j, d, false);
    }
    // dy is the caller's tensor: its tail is loaded masked, not read past. Copied through a
    // zeroed stack row instead, the vector load waited on the scalar stores (no store
    // forwarding): 8x256x28x28 in 4-channel groups took 6.7 ms, 1.7 masked (Zen 5, 2 threads).
    if (m > 0) {
      vkf d[KB];
#pragma GCC unroll 4
      for (int kk = 0; kk < KB; ++kk) d[kk] = loadn_masked(dy[i] + kk * cstride + full, keep);
      step(full, d, true);
    }
  }
#pragma GCC unroll 4
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int l = 0; l < kL; ++l) sum += acc[kk][r][l];
      out[kk * out_kstride + r] += sum;
    }
}

/// The two kinds of pixel-vector tile, each with its template's second count (position
/// vectors, or (input channel, tap) rows) limited per channel count kb.
struct PixelTiles {
  static constexpr i64 limit(i64 kb) { return pixel_vectors_per_tile(kb); }
  template <int KB, int N>
  static constexpr auto fn = &pixel_tile<KB, N>;
};
struct PixelGradWeightsTiles {
  static constexpr i64 limit(i64 kb) { return pixel_grad_weights_rows(kb, kL); }
  template <int KB, int N>
  static constexpr auto fn = &pixel_dw_tile<KB, N>;
};

/// Tiles::fn<kb, n> for kb in 1..kPixelMaxChannels and n in 1..Tiles::limit(kb).
template <class Tiles, int KB, int... N>
auto pixel_tile_of(i64 n, std::integer_sequence<int, N...>) {
  std::remove_const_t<decltype(Tiles::template fn<KB, 1>)> fn = nullptr;
  ((fn = n == N + 1 ? Tiles::template fn<KB, N + 1> : fn), ...);
  return fn;
}
template <class Tiles>
auto pixel_tile_for(i64 kb, i64 n) {
  static_assert(kPixelMaxChannels == 4);
  switch (kb) {
    case 1: return pixel_tile_of<Tiles, 1>(n, std::make_integer_sequence<int, static_cast<int>(Tiles::limit(1))>{});
    case 2: return pixel_tile_of<Tiles, 2>(n, std::make_integer_sequence<int, static_cast<int>(Tiles::limit(2))>{});
    case 3: return pixel_tile_of<Tiles, 3>(n, std::make_integer_sequence<int, static_cast<int>(Tiles::limit(3))>{});
    default: return pixel_tile_of<Tiles, 4>(n, std::make_integer_sequence<int, static_cast<int>(Tiles::limit(4))>{});
  }
}

using TileFn = void (*)(const float* const*, const float*, const i64*, i64, i64, i64, i64, i64, float*, bool);

using SpanTileFn = void (*)(const float* const*, const float*, const i64*, i64, i64, i64, i64, i64, i64, i64, float*,
                            bool);

/// The one tile function of each shape kvec_shape gives this level (paired groups: one
/// vector of channels, at AVX-512), as tile or as span_tile (kSpan).
template <bool kSpan>
auto tile_for(const KvecShape& sh, bool paired) {
  const auto pick = [&]<int P, int NK, int U, bool kPair = false>() {
    if constexpr (kSpan) return &span_tile<P, NK, U, kPair>;
    else return &tile<P, NK, U, kPair>;
  };
  using Fn = decltype(pick.template operator()<8, 1, 3>());
#if CONVGRAPH_ISA_AVX512
  if (paired) return pick.template operator()<8, 1, 3, true>();
  if (sh.vectors == 1) return pick.template operator()<8, 1, 3>();
  if (sh.vectors == 2) return pick.template operator()<6, 2, 2>();
  if (sh.vectors == 3) return pick.template operator()<8, 3, 1>();
  if (sh.vectors == 4) return pick.template operator()<6, 4, 1>();
#elif CONVGRAPH_ISA_AVX2
  if (sh.vectors == 1) return pick.template operator()<6, 1, 2>();
  if (sh.vectors == 2) return pick.template operator()<6, 2, 1>();
  if (sh.vectors == 3) return pick.template operator()<4, 3, 1>();
  if (sh.vectors == 4) return pick.template operator()<3, 4, 1>();
#else
  if (sh.vectors == 2) return pick.template operator()<6, 2, 1>();
#endif
  (void)sh, (void)paired;
  return Fn{nullptr};
}

using RowTileFn = void (*)(const float*, const float*, const i64*, i64, i64, i64, i64, i64, float*, bool);

/// The row tile for filter rows of `kw` taps (AVX-512's one vector of channels; 3, 5 and 7
/// taps), or none.
RowTileFn row_tile_for(i64 kw, bool paired) {
#if CONVGRAPH_ISA_AVX512
  switch (kw) {
    case 3: return paired ? &row_tile<3, true> : &row_tile<3, false>;
    case 5: return paired ? &row_tile<5, true> : &row_tile<5, false>;
    case 7: return paired ? &row_tile<7, true> : &row_tile<7, false>;
    default: break;
  }
#endif
  (void)kw, (void)paired;
  return nullptr;
}

using DwRowTileFn = void (*)(const float* const*, const float*, const i64*, const i64*, i64, float*, bool);

/// Grad weights' row tile for filter rows of `kw` taps at stride 1 or 2 along the row
/// (AVX-512's one vector of channels; 3, 5 and 7 taps) and its filter rows a tile, or none:
/// as many rows as leave the dy window and a broadcast their registers (24, 20 and 21
/// accumulators of 32).
std::pair<DwRowTileFn, i64> dw_row_tile_for(i64 kw, i64 stride, bool paired) {
#if CONVGRAPH_ISA_AVX512
  const auto pick = [&]<int KW, int NR>() -> std::pair<DwRowTileFn, i64> {
    if (stride == 1) return {paired ? &dw_row_tile<KW, NR, 1, true> : &dw_row_tile<KW, NR, 1, false>, NR};
    if (stride == 2) return {paired ? &dw_row_tile<KW, NR, 2, true> : &dw_row_tile<KW, NR, 2, false>, NR};
    return {nullptr, 0};
  };
  switch (kw) {
    case 3: return pick.template operator()<3, 8>();
    case 5: return pick.template operator()<5, 4>();
    case 7: return pick.template operator()<7, 3>();
    default: break;
  }
#endif
  (void)kw, (void)stride, (void)paired;
  return {nullptr, 0};
}

}  // namespace

/// Entry point of this level's channel-vectorised cpu.direct kernels (conv_direct.cpp).
void direct_kvec_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const ConvGeometry g(p);
  const KvecPlan pl(p);
  const KvecShape sh = shape_for(pl);
  // Paired groups (KvecPlan::pair_groups): units of two groups, GU of them with ndu
  // destination channels each, over source positions of F floats (one of each group's).
  const bool paired = pl.paired(kL);
  const i64 GU = paired ? p.G / 2 : p.G, ndu = pl.tile_channels(kL), F = paired ? 2 : 1;
  // Unit gu's lane-order channel u: its group and its channel there (paired lanes alternate).
  const auto lane_owner = [&](i64 gu, i64 u) {
    return paired ? std::pair<i64, i64>{2 * gu + u % 2, u / 2} : std::pair<i64, i64>{gu, u};
  };
  // Blocks of B channels (pixel vectors: all of them, unpadded), tiles of P rows.
  const i64 nkb = pl.pixel_vectors ? 1 : sh.blocks, B = pl.pixel_vectors ? pl.ndst : sh.block(), P = sh.rows;
  const TileFn fn = tile_for<false>(sh, paired);
  const i64 T = pl.taps, Q = pl.nsrc;
  auto* packed = static_cast<float*>(ctx.workspace);
  const auto* w = static_cast<const float*>(t.w);
  const auto* src = static_cast<const float*>(pl.grad_inputs ? t.y : t.x);

  // Tap offsets in the padded source, and the storage index of each logical tap: mirrored
  // for a flipped filter and again for grad inputs (whose taps run backwards). Strided grad
  // inputs lists them phase by phase (each tap reaches one phase), with each phase's part
  // of the destination: the positions it walks, where they land, and its run of taps.
  std::vector<i64> tap_off, tap_w;
  std::vector<Phase> phases;
  const std::array<i64, 3> pitch = {pl.padded[1] * pl.padded[2], pl.padded[2], 1};
  const auto storage = [&](i64 t0, i64 t1, i64 t2) {
    return (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2] + g.wtap(2, t2);
  };
  if (!pl.phased()) {
    phases.push_back({pl.dst, {pl.dst[1] * pl.dst[2], pl.dst[2], 1}, 0, 0, T});
    for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
      for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
        for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
          tap_off.push_back(t0 * pl.dil[0] * pitch[0] + t1 * pl.dil[1] * pitch[1] + pl.column_offset(t2 * pl.dil[2]));
          if (pl.grad_inputs) tap_w.push_back(storage(g.ker[0] - 1 - t0, g.ker[1] - 1 - t1, g.ker[2] - 1 - t2));
          else tap_w.push_back(storage(t0, t1, t2));
        }
  } else {
    const std::array<i64, 3> np = {std::min(pl.pstride[0], pl.dst[0]), std::min(pl.pstride[1], pl.dst[1]),
                                   std::min(pl.pstride[2], pl.dst[2])};
    const std::array<i64, 3> step = {pl.pstride[0] * pl.dst[1] * pl.dst[2], pl.pstride[1] * pl.dst[2], pl.pstride[2]};
    for (i64 f0 = 0; f0 < np[0]; ++f0)
      for (i64 f1 = 0; f1 < np[1]; ++f1)
        for (i64 f2 = 0; f2 < np[2]; ++f2) {
          const i64 f[3] = {f0, f1, f2};
          Phase ph{{pl.phase_extent(0, f0), pl.phase_extent(1, f1), pl.phase_extent(2, f2)}, step,
                   (f0 * pl.dst[1] + f1) * pl.dst[2] + f2, static_cast<i64>(tap_off.size()), 0};
          for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
            for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
              for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
                const i64 t[3] = {t0, t1, t2};
                i64 off = 0;
                bool reaches = true;
                for (std::size_t a = 0; a < 3; ++a) {
                  reaches = reaches && pl.reaches(a, f[a], t[a]);
                  off += (pl.offset(a, f[a], t[a]) + pl.lowpad[a]) * pitch[a];
                }
                if (!reaches) continue;
                tap_off.push_back(off);
                tap_w.push_back(storage(t0, t1, t2));
                ++ph.taps;
              }
          phases.push_back(ph);
        }
    // A tap reaches no phase where its residue is past the destination's extent (a row
    // narrower than the stride). Its entry stays a placeholder, packed but never run: the
    // weights keep T taps a source channel.
    tap_off.resize(static_cast<std::size_t>(T), 0);
    tap_w.resize(static_cast<std::size_t>(T), 0);
  }
  if (paired)
    for (i64& off : tap_off) off *= F;

  // Weights: packed[unit][kb][q][tap][B], zero beyond the last destination channel; a unit
  // is a group, or a pair of them whose channels alternate lane by lane.
  // w is [K][Cg][taps]: destination channel d and source q are (k, c) forward, (c, k) in
  // grad inputs.
  // Packs a run of source channels at a time and stores in order, tap by tap across the
  // lanes: storing lane by lane, a float every B, and working out each lane's owner and row
  // for every tap took 17-18% of a small-image layer's time (Zen 5, 2 threads, 8x384x8x8,
  // 3x1 filter, forward and grad inputs; each weight serves only 512 pixels). Grad inputs'
  // lanes read their rows in place (consecutive lanes, consecutive rows); forward's rows are
  // a whole filter row apart, so each lane's run is first copied to `runs` (reading a tap
  // of every lane in turn thrashed L1 where that stride is a multiple of 4 KiB).
  if (!pl.grad_weights) {
    const i64 qn = pl.grad_inputs ? 1 : std::clamp<i64>(64 / T, 1, Q), nq = (Q + qn - 1) / qn;
    parallel_over(ctx, GU * nkb * nq, [&](i64 begin, i64 end) {
      std::vector<float> runs(static_cast<std::size_t>(pl.grad_inputs ? 0 : B * qn * T));
      std::vector<const float*> from(static_cast<std::size_t>(B));  // pixel vectors: every channel
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 q0 = idx % nq * qn, q1 = std::min(Q, q0 + qn), kb = idx / nq % nkb, gu = idx / nq / nkb;
        const i64 nd = std::min<i64>(B, ndu - kb * B);  // lanes past the last channel: zeros
        for (i64 dd = 0; dd < nd; ++dd) {
          const auto [grp, d] = lane_owner(gu, kb * B + dd);
          const i64 k = pl.grad_inputs ? q0 : d, c = pl.grad_inputs ? d : q0;
          from[dd] = w + ((grp * g.Kg + k) * g.Cg + c) * g.ker_numel;
          if (pl.grad_inputs) continue;
          std::memcpy(runs.data() + dd * qn * T, from[dd], static_cast<std::size_t>((q1 - q0) * T) * sizeof(float));
          from[dd] = runs.data() + dd * qn * T;
        }
        float* out = packed + ((gu * nkb + kb) * Q + q0) * T * B;
        for (i64 q = 0; q < q1 - q0; ++q)
          for (i64 tp = 0; tp < T; ++tp, out += B) {
            const i64 at = q * T + tap_w[static_cast<std::size_t>(tp)];
            for (i64 dd = 0; dd < nd; ++dd) out[dd] = from[dd][at];
            std::fill(out + nd, out + B, 0.0f);
          }
      }
    });
  }

  // The source, zero-padded so every tap of every pixel reads inside it; paired groups'
  // planes interleaved, each position the first group's value then the second's.
  const float* padded = src;
  if (pl.copy_src || paired) {
    auto* buf = reinterpret_cast<float*>(reinterpret_cast<char*>(ctx.workspace) + pl.packed_bytes);
    const auto copy_planes = [&]<int kF>(std::integral_constant<int, kF>) {
      parallel_over(ctx, pl.N * GU * Q, [&](i64 begin, i64 end) {
        for (i64 unit_plane = begin; unit_plane < end; ++unit_plane) {
          // The unit's kF source planes (image n, groups kF * gu + f, channel q), whose rows
          // interleave position by position.
          const i64 q = unit_plane % Q, gu = unit_plane / Q % GU, n = unit_plane / Q / GU;
          const float* in = src + ((n * p.G + kF * gu) * Q + q) * pl.src_numel;
          const i64 group_floats = Q * pl.src_numel;
          float* out = buf + unit_plane * pl.padded_numel * kF;
          // The plane's zeros in one pass, then the source rows: two fills and a copy a
          // row cost more than the copying on short rows (Zen 5, 2 threads, 8x512x14x14,
          // 32 groups: forward 1.02 -> 0.90 ms).
          std::memset(out, 0, static_cast<std::size_t>(pl.padded_numel * kF) * sizeof(float));
          const i64 lo = std::clamp<i64>(pl.lowpad[2], 0, pl.padded[2]);
          const i64 hi = std::clamp<i64>(pl.lowpad[2] + pl.src[2], lo, pl.padded[2]);
          const i64 a0 = std::max<i64>(0, pl.lowpad[0]), a1 = std::min(pl.padded[0], pl.lowpad[0] + pl.src[0]);
          const i64 b0 = std::max<i64>(0, pl.lowpad[1]), b1 = std::min(pl.padded[1], pl.lowpad[1] + pl.src[1]);
          if (hi <= lo) continue;  // no source column inside the padded rows
          for (i64 a = a0; a < a1; ++a)
            for (i64 b = b0; b < b1; ++b) {
              float* o = out + ((a * pl.padded[1] + b) * pl.padded[2] + lo) * kF;
              const float* irow = in + ((a - pl.lowpad[0]) * pl.src[1] + b - pl.lowpad[1]) * pl.src[2] + lo - pl.lowpad[2];
              if (const i64 s = pl.column_phases; s > 1) {  // pixel vectors (kF 1): phase by phase
                float* row = o - lo;
                for (i64 f = 0; f < s; ++f) {
                  const i64 c0 = lo + (f - lo % s + s) % s;  // the phase's first column from lo
                  float* to = row + pl.column_offset(c0);
                  for (i64 c = c0; c < hi; c += s) *to++ = irow[c - lo];
                }
                continue;
              }
              if constexpr (kF == 1) std::memcpy(o, irow, static_cast<std::size_t>(hi - lo) * sizeof(float));
              else
                for (i64 i = 0; i < hi - lo; ++i)
#pragma GCC unroll 2
                  for (i64 f = 0; f < kF; ++f) o[i * kF + f] = irow[f * group_floats + i];
            }
        }
      });
    };
    if (paired) copy_planes(std::integral_constant<int, 2>{});
    else copy_planes(std::integral_constant<int, 1>{});
    // What the pixel-vector tiles' last whole vectors read past the copy: zeros.
    if (pl.pixel_vectors) std::fill_n(buf + pl.N * p.G * Q * pl.padded_numel, kPixelSlack, 0.0f);
    padded = buf;
  }

  const i64 pixels = pl.N * pl.dst_numel;
  const i64 src_channels = Q * p.G;
  const i64 dst_channels = pl.grad_inputs ? g.C : g.K;
  auto* dst = static_cast<float*>(pl.grad_inputs ? t.x : t.y);

  // Pixel vectors: where destination row `row` (of dst[0] x dst[1]) of image n and group grp
  // reads the padded source from, its first tap at offset 0.
  const auto source_row = [&](i64 n, i64 grp, i64 row) {
    const i64 o0 = row / pl.dst[1], o1 = row % pl.dst[1];
    return padded + (n * src_channels + grp * Q) * pl.padded_numel +
           (o0 * pl.stride[0] * pl.padded[1] + o1 * pl.stride[1]) * pl.padded[2];
  };
  if (pl.pixel_vectors && pl.grad_weights) {
    // Tasks: (group, block of kPixelMaxChannels output channels, slice of dy's rows); each
    // sums its slice into its partial sums, a tile of (input channel, tap) rows at a time
    // over all the slice's rows; a last pass adds the slices in order (fixed slices: the
    // same sums whatever the thread count).
    const i64 rows = pl.dst[0] * pl.dst[1], row_len = pl.dst[2], all_rows = pl.N * rows, S = pl.slices;
    const i64 nkbp = (B + kPixelMaxChannels - 1) / kPixelMaxChannels, QT = Q * T;
    auto* partial = packed;  // [slice][group][ndst][Q * T]
    parallel_over(ctx, p.G * nkbp * S, [&](i64 begin, i64 end) {
      std::vector<const float*> dy_rows, x_rows;
      std::vector<i64> roff(static_cast<std::size_t>(QT));
      for (i64 r = 0; r < QT; ++r)
        roff[static_cast<std::size_t>(r)] = r / T * pl.padded_numel + tap_off[static_cast<std::size_t>(r % T)];
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 sl = idx % S, kbp = idx / S % nkbp, grp = idx / S / nkbp;
        const i64 c0 = kbp * kPixelMaxChannels, kb = std::min(kPixelMaxChannels, B - c0);
        const i64 r0 = sl * all_rows / S, r1 = (sl + 1) * all_rows / S;
        dy_rows.clear();
        x_rows.clear();
        for (i64 i = r0; i < r1; ++i) {
          const i64 n = i / rows, row = i % rows;
          dy_rows.push_back(static_cast<const float*>(t.y) + ((n * g.K + grp * B + c0) * pl.dst_numel + row * row_len));
          x_rows.push_back(source_row(n, grp, row));
        }
        float* out = partial + ((sl * p.G + grp) * B + c0) * QT;
        for (i64 k = 0; k < kb; ++k) std::fill_n(out + k * QT, QT, 0.0f);
        const i64 tile = pixel_grad_weights_rows(kb, kL);
        for (i64 r = 0; r < QT; r += tile)
          pixel_tile_for<PixelGradWeightsTiles>(kb, std::min(tile, QT - r))(
              dy_rows.data(), pl.dst_numel, x_rows.data(), r1 - r0, roff.data() + r, row_len, out + r, QT);
      }
    });
    // dw[k][q][tap] = the slices' sums, in slice order.
    auto* dw = static_cast<float*>(t.w);
    parallel_over(ctx, p.G * B, [&](i64 begin, i64 end) {
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 grp = idx / B, k = idx % B;
        float* out = dw + (grp * g.Kg + k) * g.Cg * g.ker_numel;
        for (i64 r = 0; r < QT; ++r) {
          float sum = 0.0f;
          for (i64 sl = 0; sl < S; ++sl) sum += partial[((sl * p.G + grp) * B + k) * QT + r];
          out[r / T * g.ker_numel + tap_w[static_cast<std::size_t>(r % T)]] = sum;
        }
      }
    });
    return;
  }
  if (pl.pixel_vectors) {  // a task per destination row of one image and group
    const i64 rows = pl.dst[0] * pl.dst[1], row_len = pl.dst[2];
    parallel_over(ctx, pl.N * p.G * rows, [&](i64 begin, i64 end) {
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 row = idx % rows, grp = idx / rows % p.G, n = idx / rows / p.G;
        const float* s = source_row(n, grp, row);
        const i64 d0 = (n * dst_channels + grp * B) * pl.dst_numel + row * row_len;
        const float* wg = packed + grp * Q * T * B;
        for (i64 c0 = 0; c0 < B; c0 += kPixelMaxChannels) {
          const i64 kb = std::min(kPixelMaxChannels, B - c0);
          // Whole tiles of np vectors along the row, then one of as many as its rest needs
          // (rows of 56: 48 + 16 positions, not 48 + 48 with 40 thrown away).
          const i64 np = std::min(pixel_vectors_per_tile(kb), (row_len + kL - 1) / kL);
          const auto fn = pixel_tile_for<PixelTiles>(kb, np);
          for (i64 j = 0; j < row_len; j += np * kL) {
            const i64 rest = (row_len - j + kL - 1) / kL;
            (rest < np ? pixel_tile_for<PixelTiles>(kb, rest) : fn)(s + j, wg + c0, B, tap_off.data(), T, Q,
                                                                   pl.padded_numel, dst + d0 + c0 * pl.dst_numel + j,
                                                                   pl.dst_numel, row_len - j);
          }
          if (pl.grad_inputs || t.epilogue.empty()) continue;
          for (i64 kk = 0; kk < kb; ++kk) {
            const i64 at = d0 + (c0 + kk) * pl.dst_numel;
            conv_epilogue_run(t.epilogue, dst + at, at, grp * B + c0 + kk, row_len);
          }
        }
      }
    });
    return;
  }
  // Walks flat pixels (image n, position r = (o0, o1, o2)) without divisions, which would
  // cost as much as a small layer's arithmetic, and with offsets kept up as it goes (a
  // C = 1 layer's per-pixel multiplies cost an eighth of its time): `src` is the offset of
  // the pixel's first tap in the padded source, `dst` of its value in the destination,
  // images src_image and dst_image floats apart.
  // A phase's pixels (all of them but for strided grad inputs) are those of `ph.extent`.
  struct PixelWalk {
    const KvecPlan& pl;
    const Phase& ph;
    i64 src_image, dst_image, o0, o1, o2;
    i64 image_src, image_dst;  // where the pixel's image starts in the source and destination
    i64 src, dst;
    PixelWalk(const KvecPlan& plan, const Phase& phase, i64 pix, i64 src_image_floats, i64 dst_image_floats)
        : pl(plan), ph(phase), src_image(src_image_floats), dst_image(dst_image_floats) {
      const i64 numel = ph.extent[0] * ph.extent[1] * ph.extent[2];
      const i64 n = pix / numel, r = pix % numel;
      o2 = r % ph.extent[2], o1 = r / ph.extent[2] % ph.extent[1], o0 = r / ph.extent[2] / ph.extent[1];
      image_src = n * src_image, image_dst = n * dst_image;
      src = image_src + row_base() + o2 * pl.stride[2];
      dst = image_dst + dst_row_base() + o2 * ph.step[2];
    }
    i64 row_base() const { return (o0 * pl.stride[0] * pl.padded[1] + o1 * pl.stride[1]) * pl.padded[2]; }
    i64 dst_row_base() const { return ph.first + o0 * ph.step[0] + o1 * ph.step[1]; }
    void next() {
      if (++o2 < ph.extent[2]) {
        src += pl.stride[2];
        dst += ph.step[2];
        return;
      }
      o2 = 0;
      if (++o1 == ph.extent[1]) {
        o1 = 0;
        if (++o0 == ph.extent[0]) o0 = 0, image_src += src_image, image_dst += dst_image;
      }
      src = image_src + row_base();
      dst = image_dst + dst_row_base();
    }
    /// Positions left in the current row, this one included.
    i64 row_left() const { return ph.extent[2] - o2; }
    /// Moves m positions on, 1 <= m <= row_left() (to the next row's first after the last).
    void advance(i64 m) {
      o2 += m - 1;
      src += (m - 1) * pl.stride[2];
      dst += (m - 1) * ph.step[2];
      next();
    }
  };
  const i64 src_image = Q * GU * pl.padded_numel;  // source positions (of F floats) an image

  if (pl.grad_weights) {
    // Tile rows are (input channel, tap) pairs r = q * T + t; the last tile repeats its last.
    // Row tiles (dw_row_tile, one vector of channels at stride 1 or 2) take NR whole filter rows
    // of KW taps instead, KW rows each; their pointers are the filter rows' first taps.
    const i64 KW = pl.ker[2];
    const std::pair<DwRowTileFn, i64> dw_row = sh.vectors == 1 && pl.dil[2] == 1
                                                   ? dw_row_tile_for(KW, pl.stride[2], paired)
                                                   : std::pair<DwRowTileFn, i64>{nullptr, 0};
    const DwRowTileFn row_fn = dw_row.first;  // not structured bindings: clang 14's lambdas cannot capture them
    const i64 NR = dw_row.second;
    const i64 R = Q * T, rows_a_tile = row_fn != nullptr ? NR * KW : P, ntr = (R + rows_a_tile - 1) / rows_a_tile;
    const i64 pointers = row_fn != nullptr ? NR : P, step = row_fn != nullptr ? KW : 1;
    // Skipping the pairs that read padding (KvecPlan::skip_padding_pairs), the rows go tap
    // by tap, r = t * Q + q, so a tile takes one tap (but where it straddles two), and each
    // dy chunk's pixels are sorted by their TapClasses: the pixels that read a tap are then
    // a run of the chunk for each pair of classes along the outer axes.
    const bool skip_pairs = row_fn == nullptr && pl.skip_padding_pairs();
    const auto row_at = [&](i64 q, i64 tp) { return skip_pairs ? tp * Q + q : q * T + tp; };
    std::vector<i64> row_off(static_cast<std::size_t>(ntr * pointers));
    for (i64 i = 0; i < ntr * pointers; ++i) {
      const i64 rr = std::min(i * step, R - step), q = skip_pairs ? rr % Q : rr / T, tp = skip_pairs ? rr / Q : rr % T;
      row_off[static_cast<std::size_t>(i)] = q * pl.padded_numel * F + tap_off[static_cast<std::size_t>(tp)];
    }
    const TapClasses classes(pl);
    const i64 nkeys = classes.count(0) * classes.count(1) * classes.count(2);
    const i64 S = pl.slices, per = (pixels + S - 1) / S;
    // The partial sums hold row r at r * B. Row tiles round R up to a multiple of 24, 20 or
    // 21 where the plan rounds it to 24 (KvecPlan::tile_rows); that fits, as their B is a
    // quarter of the kKvecMaxBlock floats the plan gives a row.
    const i64 tile_floats = rows_a_tile * B;
    auto partial_at = [&](i64 gu, i64 kb, i64 s) { return packed + ((gu * nkb + kb) * S + s) * ntr * tile_floats; };
    // Small layers have fewer (group, block, slice) units than threads (8x8 images: one
    // slice); their tile rows are then split into spans, a task each (every span re-reads
    // the dy chunks, so a span keeps at least 4 tiles). Each partial sum is the same
    // whatever the split, so results do not depend on the thread count.
    const i64 units = GU * nkb * S, threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
    const i64 spans = std::clamp<i64>((4 * threads + units - 1) / units, 1, std::max<i64>(1, ntr / 4));
    parallel_over(ctx, units * spans, [&](i64 begin, i64 end) {
      alignas(64) float dyt[kChunkPixels * kKvecMaxBlock];  // dy chunk as [pixel][output channel]
      i64 dy_off[kChunkPixels], x_off[kChunkPixels], x_runs[kChunkPixels + 1];
      // skip_pairs: the chunk's pixels sorted by class (key), and where each key's run starts
      std::vector<float> sorted(static_cast<std::size_t>(skip_pairs ? kChunkPixels * kKvecMaxBlock : 0));
      float* const dy_sorted = sorted.data();
      i64 key[kChunkPixels], x_sorted[kChunkPixels];
      std::vector<i64> key_start(static_cast<std::size_t>(skip_pairs ? nkeys + 1 : 0));
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 span = idx % spans, unit = idx / spans;
        const i64 s = unit % S, kb = unit / S % nkb, gu = unit / S / nkb;
        const i64 tr0 = span * ntr / spans, tr1 = (span + 1) * ntr / spans, ntiles = tr1 - tr0;
        const i64 d0 = kb * B, nd = std::min<i64>(B, ndu - d0);
        float* part = partial_at(gu, kb, s);
        const float* xg = padded + gu * Q * pl.padded_numel * F;
        const i64 lo = std::min(pixels, s * per), hi = std::min(pixels, lo + per);
        if (lo == hi)  // an empty slice adds zeros
          std::fill(part + tr0 * tile_floats, part + tr1 * tile_floats, 0.0f);
        for (i64 c0 = lo; c0 < hi; c0 += kChunkPixels) {
          const i64 m = std::min(kChunkPixels, hi - c0);
          PixelWalk at(pl, phases[0], c0, src_image, g.K * pl.dst_numel);
          for (i64 j = 0; j < m; ++j, at.next()) {
            dy_off[j] = at.dst;
            x_off[j] = at.src * F;
            if (skip_pairs)
              key[j] = (classes.of[0][static_cast<std::size_t>(at.o0)] * classes.count(1) +
                        classes.of[1][static_cast<std::size_t>(at.o1)]) *
                           classes.count(2) +
                       classes.of[2][static_cast<std::size_t>(at.o2)];
          }
          i64 nxr = 0;  // row tiles: the chunk's runs of sources a stride apart, once for every tile
          for (i64 j0 = 0, j1; j0 < m && row_fn != nullptr; j0 = j1) {
            j1 = j0 + 1;
            while (j1 < m && x_off[j1] == x_off[j1 - 1] + pl.stride[2] * F) ++j1;
            x_runs[nxr++] = j0;
            x_runs[nxr] = j1;
          }
          const float* dyk = static_cast<const float*>(t.y) + (gu * ndu + d0) * pl.dst_numel;
          // Run by run (pixels consecutive in one image), whole blocks through registers
          // and the rest a float at a time. A chunk that crossed an image went all one float
          // at a time: a third of a 14x14 layer's chunks, about 5% of rx_g32_14's grad
          // weights time in `perf` (Zen 5).
          for (i64 j0 = 0, j1; j0 < m; j0 = j1) {
            j1 = j0 + 1;
            while (j1 < m && dy_off[j1] == dy_off[j1 - 1] + 1) ++j1;
            const auto [dv, jv] = transpose_blocks(dyk + dy_off[j0], pl.dst_numel, dyt + j0 * B, B, nd, j1 - j0);
            for (i64 dd = 0; dd < nd; ++dd) {
              const float* row = dyk + dd * pl.dst_numel;
              for (i64 j = j0 + (dd < dv ? jv : 0); j < j1; ++j) dyt[j * B + dd] = row[dy_off[j]];
            }
          }
          for (i64 dd = nd; dd < B; ++dd)  // lanes past the last channel: zeros, never stored
            for (i64 j = 0; j < m; ++j) dyt[j * B + dd] = 0.0f;
          if (paired) permute_pairs<false>(dyt, m);
          if (skip_pairs) {  // counting sort by key
            std::fill(key_start.begin(), key_start.end(), 0);
            for (i64 j = 0; j < m; ++j) ++key_start[static_cast<std::size_t>(key[j] + 1)];
            std::partial_sum(key_start.begin(), key_start.end(), key_start.begin());
            for (i64 j = 0; j < m; ++j) {
              const i64 to = key_start[static_cast<std::size_t>(key[j])]++;
              x_sorted[to] = x_off[j];
              std::memcpy(dy_sorted + to * B, dyt + j * B, static_cast<std::size_t>(B) * sizeof(float));
            }
            std::copy_backward(key_start.begin(), key_start.end() - 1, key_start.end());  // back to the starts
            key_start[0] = 0;
          }
          // The next chunk's dy (its nd rows of pixels, when it continues this image) is
          // fetched during this chunk's tiles: the transpose above read nd rows at once,
          // more streams than the hardware prefetchers follow.
          const i64 next_m = std::min(kChunkPixels, hi - c0 - m);
          const bool ahead = next_m > 0 && dy_off[m - 1] - dy_off[0] == m - 1 &&
                             dy_off[0] % pl.dst_numel + m + next_m <= pl.dst_numel;
          // skip_pairs: tile tr over the sorted pixels that read its tap inside the source, a
          // run for each pair of classes along axes 0 and 1 (runs that meet joined); a tile
          // straddling two taps runs them all.
          const auto run_reading_pixels = [&](i64 tr, const float* const* rows, float* io, bool init) {
            const i64 tp = tr * P / Q;
            if (tp != (std::min(R, tr * P + P) - 1) / Q) {
              fn(rows, dy_sorted, x_sorted, m, m, 0, 1, 0, io, init);
              return;
            }
            const i64 t2 = tp % pl.ker[2], t1 = tp / pl.ker[2] % pl.ker[1], t0 = tp / pl.ker[2] / pl.ker[1];
            const auto r0 = classes.reading(0, t0), r1 = classes.reading(1, t1), r2 = classes.reading(2, t2);
            i64 from = -1, to = -1;  // the run being joined (none yet)
            const auto flush = [&] {
              if (from < 0 && !init) return;  // no pixel reads the tap: nothing to add
              fn(rows, dy_sorted + std::max<i64>(from, 0) * B, x_sorted + std::max<i64>(from, 0), m, to - from, 0, 1, 0,
                 io, init);
              init = false;
            };
            for (i64 a0 = r0[0]; a0 < r0[1]; ++a0)
              for (i64 a1 = r1[0]; a1 < r1[1] && r2[0] < r2[1]; ++a1) {
                const auto k = static_cast<std::size_t>((a0 * classes.count(1) + a1) * classes.count(2));
                const i64 a = key_start[k + static_cast<std::size_t>(r2[0])], b = key_start[k + static_cast<std::size_t>(r2[1])];
                if (a == b) continue;
                if (a != to && from >= 0) flush();
                if (a != to) from = a;
                to = b;
              }
            flush();
          };
          for (i64 tr = tr0; tr < tr1; ++tr) {
            if (ahead)
              for (i64 dd = (tr - tr0) * nd / ntiles; dd < (tr - tr0 + 1) * nd / ntiles; ++dd)
                prefetch_span(dyk + dd * pl.dst_numel + dy_off[0] + m, next_m);
            const float* rows[kMaxP];
            for (i64 r = 0; r < pointers; ++r) rows[r] = xg + row_off[static_cast<std::size_t>(tr * pointers + r)];
            float* const io = part + tr * tile_floats;
            if (row_fn != nullptr) row_fn(rows, dyt, x_off, x_runs, nxr, io, c0 == lo);
            else if (skip_pairs) run_reading_pixels(tr, rows, io, c0 == lo);
            else fn(rows, dyt, x_off, m, m, 0, 1, 0, io, c0 == lo);
          }
        }
      }
    });
    // dw[k][q][tap] = the slices' partial sums, added in slice order, for a run of source
    // channels of a block at a time: their rows summed as vectors into `sums`, in dw's
    // order, then stored to each of the block's output channels as one run (transposed
    // through registers). Stored a float a row, each a filter apart, the pass took 47% of a
    // 1-D 1024 -> 1024-channel layer's grad weights (5 taps over 400 pixels; Zen 5, 2
    // threads: 38 ms). Paired groups' lanes alternate between the unit's two groups, so
    // they go a float at a time.
    auto* dw = static_cast<float*>(t.w);
    const i64 qn = std::clamp<i64>(std::min(256 / T, (Q + 3) / 4), 1, Q), nqn = (Q + qn - 1) / qn;  // 4+ tasks a block
    parallel_over(ctx, GU * nkb * nqn, [&](i64 begin, i64 end) {
      std::vector<float> sums(static_cast<std::size_t>(qn * T * B));
      for (i64 idx = begin; idx < end; ++idx) {
        const i64 q0 = idx % nqn * qn, q1 = std::min(Q, q0 + qn), kb = idx / nqn % nkb, gu = idx / nqn / nkb;
        const i64 d0 = kb * B, nd = std::min<i64>(B, ndu - d0);
        for (i64 q = q0; q < q1; ++q)
          for (i64 tp = 0; tp < T; ++tp) {
            float* sum = sums.data() + ((q - q0) * T + tap_w[static_cast<std::size_t>(tp)]) * B;
            std::fill(sum, sum + B, 0.0f);
            for (i64 sl = 0; sl < S; ++sl) {
              const float* row = partial_at(gu, kb, sl) + row_at(q, tp) * B;
              for (i64 dd = 0; dd < B; ++dd) sum[dd] += row[dd];
            }
          }
        const i64 run = (q1 - q0) * T, filter = g.Cg * g.ker_numel;
        i64 jv = 0, dv = 0;  // positions and channels stored as whole blocks
        if (!paired) std::tie(jv, dv) = transpose_blocks(sums.data(), B, dw + (gu * g.Kg + d0) * filter + q0 * T, filter, run, nd);
        for (i64 dd = 0; dd < nd; ++dd) {
          const auto [grp, k] = lane_owner(gu, d0 + dd);
          float* out = dw + (grp * g.Kg + k) * filter + q0 * T;
          for (i64 j = dd < dv ? jv : 0; j < run; ++j) out[j] = sums[static_cast<std::size_t>(j * B + dd)];
        }
      }
    });
    return;
  }

  // A unit's tiles hold kTiles x kAcc vectors whatever the shape (more tiles of fewer rows
  // or channels), so its buffers are the same size at every shape.
  const i64 unit_tiles = kTiles * kAcc / (P * sh.vectors), unit_pixels = unit_tiles * P;
  // Strided grad inputs: the phases along the last axis (`segs` of them, consecutive in
  // `phases`) interleave in every destination row. A unit runs them all over the same
  // positions of their grid, a segment of its tiles each, and stores each row whole
  // (phase by phase, every store was a float of its own to a line another unit wrote
  // too). They walk the first phase's grid, the widest; a position past a narrower phase's
  // end is a ghost: computed from its row neighbour's source, never stored (dst_off -1).
  const i64 nphases = static_cast<i64>(phases.size());
  const i64 segs = nphases > 1 && pl.pstride[2] > 1 && unit_tiles >= std::min(pl.pstride[2], pl.dst[2])
                       ? std::min(pl.pstride[2], pl.dst[2])
                       : 1;
  const i64 nsets = nphases / segs, seg_pixels = segs > 1 ? unit_pixels / segs / P * P : unit_pixels;
  // Unit u is pixel run u / nsets of phase set u % nsets: the sets' runs of one region of
  // the destination go to one thread together (in parallel_for's chunks), which then writes
  // whole cache lines; threads storing the phases of one line at once (even and odd
  // positions) passed it back and forth (no gain from the second thread).
  i64 regions = 0;
  for (const Phase& ph : phases) regions = std::max(regions, (pl.N * ph.numel() + seg_pixels - 1) / seg_pixels);
  const i64 ngroups = regions * nsets;
  // Source channels per chunk: the chunk's weights (at most kChunkBytes) and the source
  // window a unit's taps read in each of its channels both stay in L1, and a tile's
  // broadcasts touch at most kChunkPages pages (one per channel once planes exceed a page),
  // so the DTLB holds them (1x1 layers on 56x56 planes ran 3x slower without this cap).
  // The window is what the first unit reads: the union over taps of its pixels' extent
  // (first pixel to last, as if its images' planes lay back to back) moved by the tap's
  // offset. Tall filters on narrow rows read many rows (Zen 3, 1 thread, 4x192x17x17 with
  // a 7x1 filter, 27 channels a chunk, weights and windows 48 KiB: 8.0 -> 6.5-6.6 ms at
  // 17); taps a plane apart read a strip each, not the planes between (a 5x1x1 filter on
  // 28x28 planes: one span from the first tap to the last made 3 channels a chunk, whose
  // accumulators were stored every 15 steps). A unit's segments read about the same
  // window, each over seg_pixels positions.
  const i64 last = std::min(seg_pixels, pl.N * phases[0].numel()) - 1;
  const i64 extent = F * PixelWalk(pl, phases[0], last, pl.padded_numel, 0).src + F;
  i64 window = 0;
  {
    std::vector<i64> starts = tap_off;
    std::sort(starts.begin(), starts.end());
    i64 reach = starts.front();
    for (const i64 at : starts) {
      window += std::max<i64>(0, at + extent - std::max(at, reach));
      reach = std::max(reach, at + extent);
    }
  }
  // The weights a tile reads per source channel: a phase's taps only (its run of the T
  // packed ones). Sized by all T, a 3x3x3 filter's 8 phases at stride 2 (1-8 taps each) got
  // 3 channels a chunk: 3-24 reduction steps between loading and storing 24 accumulators.
  i64 run_taps = 1;
  for (const Phase& ph : phases) run_taps = std::max(run_taps, ph.taps);
  const i64 weights = run_taps * B * static_cast<i64>(sizeof(float));
  i64 qc = std::clamp<i64>(cpu_cache_sizes().l1d / (weights + window * static_cast<i64>(sizeof(float))), 1,
                           std::max<i64>(1, kChunkBytes / weights));
  if (pl.padded_numel * static_cast<i64>(sizeof(float)) > 4096) qc = std::min(qc, kChunkPages);
  // Taps whose reads all land in the zero padding are skipped: each tile runs the span of
  // tap indices covering its pixels' in-source taps (axis by axis, tables per coordinate).
  // A valid layer's input gradient (a full correlation of dy) reads mostly padding.
  // Where every pixel reads all its taps inside the source (valid layers), each tile runs
  // them all and the per-pixel look-ups are skipped (a twentieth of a C = 1 layer's time).
  // Phases run all their taps over the zero-padded copy (a few per pixel). So do tiles
  // where the padding's taps are too few to pay for the look-ups: tap_fraction() is then 1
  // (KvecPlan::kSkippedTapsWorthLookUps).
  const TapClasses classes(pl);  // the tables: each coordinate's tap range
  bool every_tap = true;  // every coordinate reads all its taps inside the source
  for (std::size_t a = 0; a < 3; ++a)
    every_tap = every_tap && classes.count(a) == 1 && classes.taps[a][0] == std::array<i64, 2>{0, pl.ker[a]};
  every_tap = every_tap || pl.phased() || pl.tap_fraction() == 1.0;
  // Column classes (KvecPlan::skip_columns): runs of columns whose tap ranges along the row
  // are the same, numbered left to right. Each unit takes its pixels class by class (row
  // by row within a class), so most tiles hold one class and run each tap row over the
  // columns it reads: ASPP's left, middle and right columns.
  const bool skip_columns = !every_tap && pl.skip_columns();
  const SpanTileFn span_fn = skip_columns ? tile_for<true>(sh, paired) : nullptr;
  const std::vector<i64>& column_class = classes.of[2];
  const i64 nclasses = classes.count(2);
  // A unit's pixel set-up (source offsets, destination offsets, tap spans, its runs of
  // pixels in one image) serves a range of (group, channel block) pairs: as many as leave
  // 16 units a thread. ResNeXt's 32 groups of 8 channels made it once per group, for 72
  // reduction steps a tile: half the time went outside the tiles (Zen 3, 1 thread,
  // 8x256x28x28, 3x3, 32 groups; forward 7.4 -> 6.4 ms, grad inputs 7.0 -> 6.4 with this
  // and the run-by-run store below). Each output is the same sum however the pairs are split.
  const i64 threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  // A large destination (stream_destination) has its whole vector blocks streamed past the
  // caches (resnet_stem forward 10.7 -> 9.7 ms, Zen 4, 2 threads), where every plane starts
  // a cache line, so each block's rows do. Not with an epilogue, which reads them back, nor
  // with segments: their runs are single rows, which start a line only now and then, so a
  // line got a streamed part and a cached one, and the cached rows went without the
  // prefetch below (ResNeXt's stride-2 grad inputs, 25.7 MB of dx, Zen 5, 2 threads:
  // 3.1 -> 2.35 ms).
  const i64 dst_bytes = g.N * dst_channels * pl.dst_numel * i64{sizeof(float)};
  const bool stream_dst = t.epilogue.empty() && segs == 1 && pl.dst_numel * i64{sizeof(float)} % 64 == 0 &&
                          reinterpret_cast<std::uintptr_t>(dst) % 64 == 0 && stream_destination(dst_bytes);
  // Strided grad inputs shares its pixel set-up over groups likewise: that set-up (phases,
  // segments, ghosts) costs more a pixel, and a phase's reduction is short (ResNeXt's
  // stride-2 layer, 32 groups of 8 channels: 1-4 taps of 8 channels). One group a unit made
  // it 2.2x slower (Zen 3, 8x256x56x56, 3x3, stride 2, 32 groups: 28 -> 12.6 ms on 1
  // thread, 12.2 -> 9.2 on 2).
  const i64 blocks = GU * nkb;
  i64 per_unit = blocks;  // (group, block) pairs a unit runs
  while (per_unit > 1 && (blocks + per_unit - 1) / per_unit * ngroups < 16 * threads) per_unit = (per_unit + 1) / 2;
  const i64 nbu = (blocks + per_unit - 1) / per_unit;
  // Row tiles: one vector of channels, tiles of half their pixels, consecutive positions
  // (never phased, so never in segments).
  const RowTileFn row_fn = sh.vectors == 1 && 2 * P == kRowPixels && !pl.phased() && pl.stride[2] == 1 &&
                                   pl.dil[2] == 1
                               ? row_tile_for(pl.ker[2], paired)
                               : nullptr;
  parallel_over(ctx, nbu * ngroups, [&](i64 begin, i64 end) {
    alignas(64) float acc[kTiles * kAcc * kL];
    alignas(64) float stage[kTiles * kAcc * kL];  // acc's pixels reordered: segments interleaved
    const float* bases[kTiles * kAcc];
    i64 dst_off[kTiles * kAcc], tap0[kTiles * kAcc], ntap[kTiles * kAcc];
    i64 row_tap0[kTiles * kAcc], row_count[kTiles * kAcc];  // row tiles: first tap, tap rows (-1: none)
    constexpr i64 kMaxRuns = kTiles * kAcc / 8;  // runs of 8 pixels on average at least
    i64 run_at[kMaxRuns + 1];  // the unit's runs (run_end), by their first pixel
    i64 run_src[kMaxRuns], run_len[kMaxRuns];  // each run's first pixel row to store, and count
    // skip_columns: each pixel's coordinates, and each tile's tap ranges per axis.
    std::array<i64, 3> pixel_at[kTiles * kAcc], span_lo[kTiles * kAcc], span_hi[kTiles * kAcc];
    std::vector<i64> class_next(static_cast<std::size_t>(nclasses + 1));
    // A tile's taps: per axis the union [lo, hi) of its pixels' in-source ranges (widen,
    // pixel by pixel), as one span in flat order from the first to the last (set_span).
    const auto widen = [&](std::array<i64, 3>& lo, std::array<i64, 3>& hi, const std::array<i64, 3>& o) {
      for (std::size_t a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], classes.range(a, o[a])[0]);
        hi[a] = std::max(hi[a], classes.range(a, o[a])[1]);
      }
    };
    const auto set_span = [&](i64 i, const std::array<i64, 3>& lo, const std::array<i64, 3>& hi) {
      const auto flat = [&](i64 t0, i64 t1, i64 t2) { return (t0 * pl.ker[1] + t1) * pl.ker[2] + t2; };
      const bool none = lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2];
      tap0[i] = none ? 0 : flat(lo[0], lo[1], lo[2]);
      ntap[i] = none ? 0 : flat(hi[0] - 1, hi[1] - 1, hi[2] - 1) + 1 - tap0[i];
    };
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 unit = idx % ngroups, bu = idx / ngroups;
      const Phase& ph = phases[static_cast<std::size_t>(unit % nsets * segs)];
      const i64 pix0 = unit / nsets * seg_pixels;
      if (pix0 >= pl.N * ph.numel()) continue;  // a phase with fewer positions than others
      const i64 npix = std::min(seg_pixels, pl.N * ph.numel() - pix0);
      const i64 seg_tiles = (npix + P - 1) / P, seg_stride = seg_tiles * P, ntiles = segs * seg_tiles;
      // A short last tile of a segment repeats its last pixel, computed but not stored.
      // Where the tiles need no tap spans and there are no ghosts (one segment, and no
      // padded layer's look-ups), the offsets go row by row in a loop of their own: the
      // walk below, field by field through memory in this large function, took a fifth of
      // a C = 1 layer's time (Zen 3, 1 thread, 8x1x64x64 -> 32, 5x5).
      const bool by_rows = segs == 1 && every_tap;
      if (by_rows) {
        PixelWalk at(pl, ph, pix0, src_image, dst_channels * pl.dst_numel);
        const i64 s2 = pl.stride[2], d2 = ph.step[2];
        for (i64 j = 0; j < npix;) {
          const i64 m = std::min(npix - j, at.row_left()), src0 = at.src, dst0 = at.dst;
          for (i64 k = 0; k < m; ++k) {
            bases[j + k] = padded + F * (src0 + k * s2);
            dst_off[j + k] = dst0 + k * d2;
          }
          j += m;
          at.advance(m);
        }
        std::fill(bases + npix, bases + ntiles * P, bases[npix - 1]);
        std::fill(tap0, tap0 + ntiles, ph.tap0);
        std::fill(ntap, ntap + ntiles, ph.taps);
      }
      if (skip_columns) {  // one segment, no ghosts: pixels placed class by class
        std::fill(class_next.begin(), class_next.end(), 0);
        PixelWalk count(pl, ph, pix0, src_image, dst_channels * pl.dst_numel);
        for (i64 j = 0; j < npix; ++j, count.next())
          ++class_next[static_cast<std::size_t>(column_class[static_cast<std::size_t>(count.o2)] + 1)];
        std::partial_sum(class_next.begin(), class_next.end(), class_next.begin());
        PixelWalk at(pl, ph, pix0, src_image, dst_channels * pl.dst_numel);
        for (i64 j = 0; j < npix; ++j, at.next()) {
          const i64 to = class_next[static_cast<std::size_t>(column_class[static_cast<std::size_t>(at.o2)])]++;
          bases[to] = padded + F * at.src;
          dst_off[to] = at.dst;
          pixel_at[to] = {at.o0, at.o1, at.o2};
        }
        std::fill(bases + npix, bases + ntiles * P, bases[npix - 1]);
        for (i64 i = 0; i < ntiles; ++i) {
          span_lo[i] = {pl.ker[0], pl.ker[1], pl.ker[2]}, span_hi[i] = {0, 0, 0};
          for (i64 j = i * P; j < std::min(npix, (i + 1) * P); ++j) widen(span_lo[i], span_hi[i], pixel_at[j]);
          set_span(i, span_lo[i], span_hi[i]);
        }
      }
      for (i64 sg = 0, i = 0; sg < segs && !by_rows && !skip_columns; ++sg) {
        const Phase& phs = phases[static_cast<std::size_t>(unit % nsets * segs + sg)];
        Phase grid = phs;
        grid.extent[2] = ph.extent[2];
        PixelWalk at(pl, grid, pix0, src_image, dst_channels * pl.dst_numel);
        for (i64 j = sg * seg_stride; i < (sg + 1) * seg_tiles; ++i) {
          std::array<i64, 3> lo = {pl.ker[0], pl.ker[1], pl.ker[2]}, hi = {0, 0, 0};
          for (i64 r = 0; r < P; ++r, ++j) {
            if (j >= sg * seg_stride + npix) {
              bases[j] = bases[sg * seg_stride + npix - 1];
              continue;
            }
            if (at.o2 >= phs.extent[2]) {  // a ghost (never in the first segment)
              bases[j] = padded + F * (at.src - pl.stride[2]);  // its row neighbour, in this phase
              dst_off[j] = -1;
              at.next();
              continue;
            }
            bases[j] = padded + F * at.src;
            dst_off[j] = at.dst;
            if (!every_tap) widen(lo, hi, {at.o0, at.o1, at.o2});
            at.next();
          }
          if (every_tap) tap0[i] = phs.tap0, ntap[i] = phs.taps;
          else set_span(i, lo, hi);
        }
      }
      // Two tiles whose pixels lie in one row run as a row tile, over whole rows of taps
      // covering both tiles' spans (the extra taps read the zero padding). Rows of 28 put
      // 16 of each 28 pixels in row tiles, rows of 56 48.
      std::fill(row_count, row_count + ntiles, -1);
      for (i64 i = 0; i + 1 < ntiles && row_fn != nullptr; ++i) {
        bool one_row = true;
        for (i64 k = 1; k < kRowPixels && one_row; ++k) one_row = bases[i * P + k] == bases[i * P] + k * F;
        if (!one_row) continue;
        const i64 kw = pl.ker[2];
        i64 lo = T, hi = 0;
        for (i64 e = i; e < i + 2; ++e)
          if (ntap[e] > 0) lo = std::min(lo, tap0[e]), hi = std::max(hi, tap0[e] + ntap[e]);
        row_tap0[i] = lo < hi ? lo / kw * kw : 0;
        row_count[i] = lo < hi ? (hi + kw - 1) / kw - lo / kw : 0;
        ++i;  // the row tile's second tile
      }
      // The unit's runs: pixels consecutive in an image's planes; with segments, the first
      // segment's pixels `segs` apart (the segments interleave into consecutive floats).
      // More than kMaxRuns (rows only a few positions wide; strided grad inputs not split
      // into segments) are stored channel by channel, pixel by pixel, and not prefetched.
      const auto run_end = [&](i64 j) {  // the end of the run from pixel j
        do ++j;
        while (j < npix && dst_off[j] == dst_off[j - 1] + segs);
        return j;
      };
      i64 nruns = 0, covered = 0;
      for (; covered < npix && nruns < kMaxRuns; covered = run_end(covered)) run_at[nruns++] = covered;
      run_at[nruns] = covered;
      const bool by_runs = covered == npix, prefetch_dst = by_runs && !stream_dst;
      // Segments interleave run by run into `stage`, less a run's trailing ghosts.
      for (i64 r = 0, at = 0; r < nruns; ++r) {
        const i64 len = run_at[r + 1] - run_at[r];
        run_src[r] = segs > 1 ? at : run_at[r];
        run_len[r] = len * segs;
        while (dst_off[(run_len[r] - 1) % segs * seg_stride + run_at[r] + (run_len[r] - 1) / segs] < 0) --run_len[r];
        at += len * segs;
      }
      for (i64 blk = bu * per_unit; blk < std::min(blocks, (bu + 1) * per_unit); ++blk) {
        const i64 gu = blk / nkb, kb = blk % nkb;
        const i64 d0 = kb * B;
        const i64 nd = std::min<i64>(B, ndu - d0);
        const float* wb = packed + (gu * nkb + kb) * Q * T * B;
        const i64 group_offset = gu * Q * pl.padded_numel * F;  // bases are unit 0's
        const float* rows[kMaxP];
        float* const dst_block = dst + (gu * ndu + d0) * pl.dst_numel;  // the block's first plane
        for (i64 q0 = 0; q0 < Q; q0 += qc)
          for (i64 i = 0; i < ntiles; ++i) {
            // The block's destination lines are fetched for writing while its tiles run
            // (a share per tile, in the first chunk): the transposed store below then
            // hits in cache instead of stalling on one miss per line of nd planes.
            if (q0 == 0 && prefetch_dst)
              for (i64 dd = i * nd / ntiles; dd < (i + 1) * nd / ntiles; ++dd)
                for (i64 r = 0; r < nruns; ++r)
                  prefetch_span<true, 3>(dst_block + dd * pl.dst_numel + dst_off[run_at[r]], run_len[r]);
            if (i > 0 && row_count[i - 1] >= 0) continue;  // run with the tile before it
            if (row_count[i] >= 0) {
              row_fn(bases[i * P] + group_offset, wb + row_tap0[i] * B, tap_off.data() + row_tap0[i], T, row_count[i],
                     q0, std::min(Q, q0 + qc), pl.padded_numel * F, acc + i * P * B, q0 == 0);
              continue;
            }
            for (i64 r = 0; r < P; ++r) rows[r] = bases[i * P + r] + group_offset;
            const auto& lo = span_lo[i];
            const auto& hi = span_hi[i];
            if (skip_columns && ntap[i] > 0 && (lo[2] > 0 || hi[2] < pl.ker[2])) {  // each tap row's columns
              for (i64 t0 = lo[0]; t0 < hi[0]; ++t0) {
                const i64 first = (t0 * pl.ker[1] + lo[1]) * pl.ker[2] + lo[2];
                span_fn(rows, wb + first * B, tap_off.data() + first, T, hi[2] - lo[2], hi[1] - lo[1], pl.ker[2], q0,
                        std::min(Q, q0 + qc), pl.padded_numel * F, acc + i * P * B, q0 == 0 && t0 == lo[0]);
              }
              continue;
            }
            fn(rows, wb + tap0[i] * B, tap_off.data() + tap0[i], T, ntap[i], q0, std::min(Q, q0 + qc),
               pl.padded_numel * F, acc + i * P * B, q0 == 0);
          }
        if (paired) permute_pairs<true>(acc, ntiles * P);
        // Transposed store, run by run: each destination channel's pixels are contiguous
        // within an image. `out` holds the run's pixels in order (acc, or stage where
        // segments interleave): pixel j's channel dd is at j * B + dd.
        // Whole blocks go through registers; the rest one channel at a time, so the stores
        // run along one output plane (strided loads from L1 are cheap; stores spread over
        // 16-64 planes stalled on their misses).
        const float* out = acc;
        if (segs > 1 && by_runs) {
          // Rows of NV whole vectors, a constant size (a loop over B called memcpy per row).
          const auto reorder = [&]<int NV>(std::integral_constant<int, NV>) {
            for (i64 r = 0; r < nruns; ++r)
              for (i64 j = run_at[r], to = run_src[r]; j < run_at[r + 1]; ++j)
                for (i64 sg = 0; sg < segs; ++sg, ++to)
                  std::memcpy(stage + to * B, acc + (sg * seg_stride + j) * B, NV * kL * sizeof(float));
          };
          switch (sh.vectors) {
            case 1: reorder(std::integral_constant<int, 1>{}); break;
            case 2: reorder(std::integral_constant<int, 2>{}); break;
            case 3: reorder(std::integral_constant<int, 3>{}); break;
            default: reorder(std::integral_constant<int, 4>{}); break;
          }
          out = stage;
        }
        for (i64 r = 0; r < nruns && by_runs; ++r) {
          const i64 j0 = run_src[r], len = run_len[r];
          float* const run = dst_block + dst_off[run_at[r]];
          i64 jv = 0, dv = 0;  // pixels and channels stored as whole blocks
          if (stream_dst && reinterpret_cast<std::uintptr_t>(run) % 64 == 0)
            std::tie(jv, dv) = transpose_blocks<true>(out + j0 * B, B, run, pl.dst_numel, len, nd);
          else
            std::tie(jv, dv) = transpose_blocks(out + j0 * B, B, run, pl.dst_numel, len, nd);
          for (i64 dd = 0; dd < nd; ++dd)
            for (i64 j = dd < dv ? jv : 0; j < len; ++j) run[dd * pl.dst_numel + j] = out[(j0 + j) * B + dd];
        }
        for (i64 dd = 0; dd < nd && !by_runs; ++dd) {
          float* const plane = dst_block + dd * pl.dst_numel;
          const float* col = acc + dd;
          for (i64 sg = 0; sg < segs; ++sg)
            for (i64 j = sg * seg_stride; j < sg * seg_stride + npix; ++j)
              if (dst_off[j] >= 0) plane[dst_off[j]] = col[j * B];
        }
        if (pl.grad_inputs || t.epilogue.empty()) continue;
        for (i64 dd = 0; dd < nd; ++dd) {  // the epilogue on each run
          const i64 ch = gu * ndu + d0 + dd;
          for (i64 j = 0, e; j < npix; j = e) {
            e = run_end(j);
            const i64 at = ch * pl.dst_numel + dst_off[j];
            conv_epilogue_run(t.epilogue, dst + at, at, ch, e - j);
          }
        }
      }
    }
    if (stream_dst) _mm_sfence();
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
