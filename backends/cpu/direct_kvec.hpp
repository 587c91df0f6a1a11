#pragma once
// Private to backends/cpu: the plan of cpu.direct's channel-vectorised path
// (kernels/direct_kvec.cpp), shared by the algorithm (workspace size, applicability) and
// the kernels, so both see the same layout.
//
// The path computes forward and grad inputs as one correlation:
//   dst[n][c][o] = sum_q sum_t wpk[c][q][t] * src[n][q][o * stride + tap(t)]
// over a zero-padded copy of the source (skipped when no padding is needed), with the
// weights packed once per call as [group][channel block][q][tap][kMaxBlock lanes] so a
// vector of destination channels loads contiguously. Forward: src = x, dst = y, q = input
// channel. Grad inputs: src = dy, dst = dx, q = output channel, taps mirrored, and the
// low padding (ker - 1) * dil - pad (the transposed convolution at stride 1). Strided grad
// inputs runs one such correlation per phase of dx (its coordinates mod the stride) over
// the taps that reach that phase: a stride-2 3x3 layer's four phases take 4, 2, 2 and 1.
// Grad weights reuses the same tile with the roles turned: the reduction runs over output
// pixels, the tile's rows are (input channel, tap) pairs, and the vector operand is a
// chunk of dy transposed to [pixel][output channel]; fixed slices of the pixels (however
// many threads run them) sum into partial results that a last pass adds in order.
// Half a vector of destination channels a group (8 with AVX-512: ResNeXt's groups) in an
// even number of groups runs the groups in pairs (pair_groups): one vector holds both
// groups' channels, lanes alternating between them, over a copy of the source whose pairs
// of group planes interleave position by position, so one 64-bit broadcast gives each
// half of the lanes its own group's source value (grad weights: its x, beside dy chunks
// whose two groups' channels alternate likewise).
// Fewer than kKvecMinChannels destination channels turn the vectors around (pixel_vectors):
// forward and grad inputs hold a row's consecutive positions in the vectors and broadcast
// the weights; grad weights holds positions of dy and x rows and sums the lanes at the end.
// Forward and grad weights take them with more channels too where the (source channel, tap)
// rows are few and the output rows long (kPixelForwardMaxRows). At a stride along the rows
// the source copy holds each row's columns phase by phase (KvecPlan::column_offset).
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "backends/cpu/conv_geometry.hpp"

namespace convgraph::cpu {

/// Destination channels per packed block at most: the widest level's register block (4 x 16
/// floats). Each level packs blocks of `vectors` x its lanes (kvec_shape), whose padded
/// channel count never exceeds ndst rounded up to this, so the packed size bounds them all.
inline constexpr i64 kKvecMaxBlock = 64;
/// Fewest destination channels per group worth vectorising over: one AVX2 vector (half an
/// AVX-512 one, whose zero lanes still beat the row engine's short position vectors there).
/// Zen 3, 2 threads, ResNeXt-like 8 channels a group (8x64x28x28, 3x3, 8 groups): forward
/// 2.17 -> 0.91 ms, grad inputs 2.30 -> 0.91, grad weights 2.84 -> 0.73 (Winograd's 1.21).
/// Below it the tiles vectorise positions instead (pixel_vectors_per_tile).
inline constexpr i64 kKvecMinChannels = 8;
/// Rows of a tile at most: output pixels (forward, grad inputs) or (channel, tap) pairs
/// (grad weights). Every level's row counts divide it.
inline constexpr i64 kKvecMaxTileRows = 24;

/// A level's register block for ndst destination channels: rows x vectors x split
/// accumulators of `lanes` floats, in blocks of vectors x lanes channels. `split` sums
/// alternate reduction steps (taps, or pixels for grad weights) into separate accumulators,
/// so few channels keep enough independent FMAs in flight while a tile's rows (each a
/// source pointer) still fit the general registers: AVX-512 has 8 pixels x 16 channels x 3,
/// 6 x 32 x 2, 8 x 48 and 6 x 64; AVX2 6 x 8 x 2, 6 x 16, 4 x 24 and (grad weights) 3 x 32.
/// More channels are split into blocks of equal width (80 channels: two blocks of 48, not
/// 64 + 16).
struct KvecShape {
  i64 lanes = 16, vectors = 1, rows = 8, split = 1, blocks = 1;
  i64 block() const { return lanes * vectors; }
  i64 padded() const { return blocks * block(); }  ///< channels including the zero lanes
};
/// A level's register budget, by its vector width in floats (`lanes`): vectors of
/// destination channels per block at most, and accumulator vectors. 16 / 4 / 24 (AVX-512,
/// 32 registers), 8 / 4 / 12 (AVX2) and 4 / 2 / 12 (baseline SSE, 16 registers). The
/// kernels (kernels/direct_kvec.cpp) and the cost model (conv_direct.cpp) both read it here.
constexpr i64 kvec_max_vectors(i64 lanes) { return lanes >= 8 ? 4 : 2; }
constexpr i64 kvec_accumulators(i64 lanes) { return lanes == 16 ? 24 : 12; }
constexpr i64 kvec_registers(i64 lanes) { return lanes == 16 ? 32 : 16; }
/// Rows: 8 or 6 where they fill the accumulators, else as many as do (4 x 3 and 3 x 4 of 12).
/// Forward and grad inputs keep a block's weight vectors in the registers the accumulators
/// and a broadcast leave (AVX2: 3 of 16), taking the widest such block unless one vector
/// narrower pads fewer lanes: AVX2's 3 x 4 read its fourth weight vector from memory in each
/// of its 3 rows' FMAs. Zen 3, 2 threads, against 3 x 4: 384 channels as 4 x 3 0.77x the
/// time, 64 and 128 as 6 x 2 0.92x and 0.85x, 32 as 6 x 2 0.94x. Grad weights keeps 3 x 4
/// (6 x 2 took 1.04x and 1.09x its time on 64 and 128 channels, 0.96x on 384; 4 x 3
/// 1.08-1.23x).
inline KvecShape kvec_shape(i64 ndst, i64 lanes, bool grad_weights) {
  const i64 accumulators = kvec_accumulators(lanes);
  const i64 nvec = (ndst + lanes - 1) / lanes;
  const auto blocked = [&](i64 max_vectors) {
    KvecShape s;
    s.lanes = lanes;
    s.blocks = (nvec + max_vectors - 1) / max_vectors;
    s.vectors = (nvec + s.blocks - 1) / s.blocks;
    s.rows = accumulators % (8 * s.vectors) == 0   ? 8
             : accumulators % (6 * s.vectors) == 0 ? 6
                                                   : accumulators / s.vectors;
    s.split = accumulators / (s.rows * s.vectors);
    return s;
  };
  const i64 in_registers = kvec_registers(lanes) - accumulators - 1;
  if (!grad_weights && in_registers < kvec_max_vectors(lanes)) {
    const KvecShape wide = blocked(in_registers), narrow = blocked(in_registers - 1);
    return wide.padded() <= narrow.padded() ? wide : narrow;
  }
  return blocked(kvec_max_vectors(lanes));
}

/// Fewer destination channels (1-7: heads and RGB outputs, the grad inputs of a C = 3 first
/// layer) vectorise positions instead, along rows whose last axis has stride 1: a tile is kb
/// channels (at most 4, more in blocks) x this many vectors of consecutive positions, each
/// tap one vector load per FMA column and kb broadcast weights, the smaller side held in
/// registers and the other streamed through one (10-16 of 16 registers).
constexpr i64 pixel_vectors_per_tile(i64 kb) { return kb <= 1 ? 8 : kb == 2 ? 6 : kb == 3 ? 4 : 3; }
/// Grad weights' tiles: kb output channels x this many (input channel, tap) rows of
/// accumulators beside kb dy vectors, one x vector and the tail's mask, at most 8: with 16
/// registers 8, 5, 3, 2; AVX-512's 32 take 8, 8, 8, 6. Each tile reads the slice's dy rows
/// once, so fewer rows read them more often: ResNeXt's 4-channel groups (8x256x28x28, 3x3,
/// 64 groups; Zen 5, 2 threads) went 1.7 -> 1.3 ms at 6 rows against 2.
constexpr i64 pixel_grad_weights_rows(i64 kb, i64 lanes) {
  if (kvec_registers(lanes) >= 32) return kb <= 3 ? 8 : 6;
  return kb <= 1 ? 8 : kb == 2 ? 5 : kb == 3 ? 3 : 2;
}
inline constexpr i64 kPixelMaxChannels = 4;
/// Forward and grad weights with at most these many (source channel, tap) rows take the
/// pixel-vector tiles whatever their channel count, where the output rows hold at least
/// kPixelMinRow positions: the channel-vectorised tile runs so short a reduction that its
/// transposed stores (grad weights: transposing all of dy) cost more than the FMAs. Zen 5,
/// 2 threads, against that tile. Forward: 4x1x96x96 -> 64, 3x3 0.90 -> 0.22 ms; 4x1x64x64
/// -> 64, 5x5 0.46 -> 0.22; 8x2x128x128 -> 32, 3x3 at stride 2 0.29 -> 0.19; 2x1x16000 ->
/// 512, 10 taps at stride 5 0.73 -> 0.39; RGB 3x3 (27 rows) the same or slower. Grad
/// weights: 16x1x8192 -> 16, 3 taps 0.72 -> 0.09; that wav2vec layer 0.73 -> 0.38;
/// 8x1x112x112 -> 32, 3x3 0.59 -> 0.32-0.42; 18-27 rows at stride 1 1.1-1.4x faster but
/// at stride 2 1.2x slower. Rows of 28 and 14 ran 1.2-3x slower.
inline constexpr i64 kPixelForwardMaxRows = 25;
inline constexpr i64 kPixelGradWeightsMaxRows = 16;
inline constexpr i64 kPixelMinRow = 48;
/// Floats past the padded copy that the last tile's whole vectors may read (never used).
inline constexpr i64 kPixelSlack = 8 * 16;

/// Grad weights: at most this many pixel slices, and at most this many bytes of partial sums.
inline constexpr i64 kKvecMaxSlices = 16;
inline constexpr i64 kKvecPartialBytes = i64{8} << 20;

struct KvecPlan {
  bool usable = false;
  bool grad_inputs = false, grad_weights = false;
  bool copy_src = false;          ///< the source needs a zero-padded copy
  std::array<i64, 3> dst{}, src{}, padded{}, lowpad{}, stride{}, dil{}, ker{};
  /// Strided grad inputs: dx splits into phases (its coordinates' residues mod pstride), each
  /// a stride-1 correlation of dy with the taps that reach it; pstride is 1 otherwise.
  std::array<i64, 3> pstride{1, 1, 1}, pad{};
  i64 phases = 1;
  bool pixel_vectors = false;  ///< positions in the vectors (few channels, or few taps' rows)
  /// Pixel vectors at stride s along the rows: each padded row is s equal runs, run f
  /// holding the columns f, f + s, ... (column_offset); 1 otherwise.
  i64 column_phases = 1;
  /// kKvecMinChannels destination channels in an even number of groups: a level whose
  /// vectors hold twice that runs the groups in pairs (paired()).
  bool pair_groups = false;
  i64 N = 0, G = 1, nsrc = 0, ndst = 0, nblocks = 0, taps = 0;
  i64 slices = 1, tile_rows = 0;  ///< grad weights: pixel slices, (channel, tap) rows at most
  i64 dst_numel = 0, src_numel = 0, padded_numel = 0;
  std::size_t packed_bytes = 0, src_bytes = 0, workspace = 0;

  explicit KvecPlan(const ConvProblem& p) {
    if (p.dtype != DType::float32 || p.compute != DType::float32) return;
    const ConvGeometry g(p);
    grad_inputs = p.direction == ConvDirection::grad_inputs;
    grad_weights = p.direction == ConvDirection::grad_weights;
    N = g.N, G = g.G;
    nsrc = grad_inputs ? g.Kg : g.Cg;
    ndst = grad_inputs ? g.Cg : g.Kg;
    const i64 pixel_max_rows = p.direction == ConvDirection::forward ? kPixelForwardMaxRows
                               : grad_weights                          ? kPixelGradWeightsMaxRows
                                                                       : 0;
    pixel_vectors = ndst < kKvecMinChannels || (nsrc * g.ker_numel <= pixel_max_rows && g.out[2] >= kPixelMinRow);
    ker = g.ker, dil = g.dil;
    taps = g.ker_numel;
    // A 1x1 filter is a plain GEMM (cpu.corrmm needs no column matrix for it), 2-4x faster
    // than this path, whose per-output transposed store is then amortised over few taps.
    if (taps == 1) return;
    for (std::size_t a = 0; a < 3; ++a) {
      pad[a] = g.pad[a];
      if (grad_inputs && g.stride[a] != 1) {
        if (pixel_vectors) return;
        // Phase f's taps t read dy at m + offset(a, f, t) for its m-th position; the copy is
        // padded low and high to cover every phase's reads.
        dst[a] = g.in[a], src[a] = g.out[a], stride[a] = 1, pstride[a] = g.stride[a];
        i64 lo = 0, hi = 0;
        for (i64 f = 0; f < std::min(pstride[a], dst[a]); ++f)
          for (i64 t = 0; t < ker[a]; ++t)
            if (reaches(a, f, t)) {
              lo = std::min(lo, offset(a, f, t));
              hi = std::max(hi, phase_extent(a, f) - 1 + offset(a, f, t));
            }
        lowpad[a] = -lo;
        padded[a] = hi + 1 - lo;
        copy_src = true;
        phases *= std::min(pstride[a], dst[a]);
        continue;
      }
      if (grad_inputs) {
        dst[a] = g.in[a], src[a] = g.out[a], stride[a] = 1;
        lowpad[a] = (g.ker[a] - 1) * g.dil[a] - g.pad[a];
        if (lowpad[a] < 0) return;  // padding wider than the kernel: outputs beyond the input
      } else {
        dst[a] = g.out[a], src[a] = g.in[a], stride[a] = g.stride[a];
        lowpad[a] = g.pad[a];
      }
      // The extent the outputs read, which the (padded) source must cover.
      padded[a] = (dst[a] - 1) * stride[a] + (ker[a] - 1) * dil[a] + 1;
      if (lowpad[a] != 0 || padded[a] > src[a]) copy_src = true;
    }
    if (pixel_vectors) {
      copy_src = true;  // its last tile's vectors may read past the source
      // Strided rows: the copy holds each row's columns phase by phase (column_offset), so
      // a vector's positions, a stride apart in the source, read consecutive floats.
      column_phases = stride[2];
      padded[2] = (padded[2] + column_phases - 1) / column_phases * column_phases;
    }
    pair_groups = !pixel_vectors && ndst == kKvecMinChannels && G % 2 == 0;
    if (!copy_src) padded = src;  // read the source in place, with its own row lengths
    dst_numel = dst[0] * dst[1] * dst[2];
    src_numel = src[0] * src[1] * src[2];
    padded_numel = padded[0] * padded[1] * padded[2];
    nblocks = (ndst + kKvecMaxBlock - 1) / kKvecMaxBlock;
    if (grad_weights && pixel_vectors) {  // a slice's sums: [slice][group][ndst][(channel, tap)]
      const i64 rows = N * dst[0] * dst[1];
      const i64 slice_bytes = G * ndst * nsrc * taps * static_cast<i64>(sizeof(float));
      slices = std::clamp<i64>(std::min((rows + 15) / 16, kKvecPartialBytes / slice_bytes), 1, kKvecMaxSlices);
      packed_bytes = static_cast<std::size_t>(slices * slice_bytes);
    } else if (grad_weights) {  // partial sums of every slice instead of packed weights
      // Rows padded to whole tiles of any level's row count (each divides kKvecMaxTileRows).
      tile_rows = (nsrc * taps + kKvecMaxTileRows - 1) / kKvecMaxTileRows * kKvecMaxTileRows;
      const i64 slice_bytes = G * nblocks * tile_rows * kKvecMaxBlock * static_cast<i64>(sizeof(float));
      const i64 pixels = N * dst_numel;
      slices = std::clamp<i64>(std::min((pixels + 1023) / 1024, kKvecPartialBytes / slice_bytes), 1, kKvecMaxSlices);
      packed_bytes = static_cast<std::size_t>(slices * slice_bytes);
    } else {
      packed_bytes = static_cast<std::size_t>(G * nblocks * kKvecMaxBlock * nsrc * taps) * sizeof(float);
    }
    packed_bytes = (packed_bytes + 63) / 64 * 64;
    const i64 slack = pixel_vectors ? kPixelSlack : 0;
    const bool copied = copy_src || pair_groups;  // paired levels always copy (interleaving)
    src_bytes = copied ? static_cast<std::size_t>(N * G * nsrc * padded_numel + slack) * sizeof(float) : 0;
    workspace = packed_bytes + src_bytes;
    usable = workspace <= p.workspace_limit;
  }

  /// Whether a level with `lanes` floats a vector runs the groups in pairs (pair_groups),
  /// always over the interleaved copy; and the destination channels its tiles then hold.
  bool paired(i64 lanes) const { return pair_groups && lanes == 2 * ndst; }
  i64 tile_channels(i64 lanes) const { return paired(lanes) ? 2 * ndst : ndst; }

  /// Where padded column c of a row lies in the copy's row (column_phases).
  i64 column_offset(i64 c) const {
    return column_phases == 1 ? c : c % column_phases * (padded[2] / column_phases) + c / column_phases;
  }

  /// Phased (strided grad inputs): some pstride > 1. `phases` may still be 1 (every strided
  /// axis no wider than its stride: dx's only phase along it is 0).
  bool phased() const { return pstride != std::array<i64, 3>{1, 1, 1}; }

  /// Strided grad inputs: dx coordinate i on axis a is in phase i mod pstride; phase f's m-th
  /// position gets tap t from dy[m + offset(a, f, t)] where reaches(a, f, t).
  bool reaches(std::size_t a, i64 f, i64 t) const {
    const i64 r = (f + pad[a] - t * dil[a]) % pstride[a];
    return r == 0;
  }
  i64 offset(std::size_t a, i64 f, i64 t) const { return floor_div(f + pad[a] - t * dil[a], pstride[a]); }
  /// Positions of phase f along axis a.
  i64 phase_extent(std::size_t a, i64 f) const { return f < dst[a] ? (dst[a] - f + pstride[a] - 1) / pstride[a] : 0; }

  /// Forward and grad inputs: the taps [lo, hi) along axis a that read inside the source
  /// (not its zero padding) for destination coordinate o. The kernels skip the rest.
  std::array<i64, 2> tap_range(std::size_t a, i64 o) const {
    const i64 first = lowpad[a] - o * stride[a];
    return taps_inside(first, first + src[a] - 1, dil[a], ker[a]);
  }
  /// The fraction of the taps along axis a that read inside the source, over its positions.
  double axis_tap_fraction(std::size_t a) const {
    i64 sum = 0;
    for (i64 o = 0; o < dst[a]; ++o) {
      const std::array<i64, 2> r = tap_range(a, o);
      sum += r[1] - r[0];
    }
    return static_cast<double>(sum) / static_cast<double>(dst[a] * ker[a]);
  }
  /// Whether forward and grad inputs group each unit's pixels by the taps their columns
  /// read (skip_columns in the kernels): where the padding columns would be at least
  /// kPaddingSkipFraction of the taps of filters with several tap rows. A tile's taps are
  /// one span in flat order, so its pixels share the skipped rows but not the skipped
  /// columns: ASPP's 3x3 at dilation 6 on 28x28 reads padding in 12 of 28 columns.
  static constexpr double kPaddingSkipFraction = 0.1;
  bool skip_columns() const {
    if (grad_weights || pixel_vectors || phased() || ker[2] == 1 || ker[0] * ker[1] == 1) return false;
    return 1.0 - axis_tap_fraction(2) >= kPaddingSkipFraction;
  }
  /// The fraction of (pixel, tap) pairs that read inside the source.
  double pair_fraction() const { return axis_tap_fraction(0) * axis_tap_fraction(1) * axis_tap_fraction(2); }
  /// Whether grad weights skips the (pixel, tap) pairs that read padding (its tiles then
  /// take one tap each, over the pixels reading it, sorted by TapClasses): where they are
  /// at least kPaddingSkipFraction of all, on rows dilated (dilation 1 along the rows runs
  /// row tiles, which take whole filter rows, at AVX-512), with at least
  /// kSkipPairsMinChannels input channels (a tile straddling two taps runs every pixel;
  /// with 32 channels a tap, at most one of its 4-6 tiles does). ASPP's 3x3 at dilation 6
  /// on 28x28: 26%.
  static constexpr i64 kSkipPairsMinChannels = 32;
  bool skip_padding_pairs() const {
    return grad_weights && !pixel_vectors && dil[2] > 1 && nsrc >= kSkipPairsMinChannels &&
           1.0 - pair_fraction() >= kPaddingSkipFraction;
  }
  /// A pixel's tap-span look-ups cost about as much as this many reduction steps of its
  /// tile: forward and grad inputs skip no tap where the skipped (source channel, tap)
  /// steps a pixel would be fewer.
  static constexpr double kSkippedTapsWorthLookUps = 8;
  /// The fraction of the taps the kernels run: along the outermost axis with more than one
  /// tap (a tile's pixels mostly share its coordinate), those reading inside the source,
  /// and along the columns too where the kernels skip them (skip_columns).
  /// A valid layer's input gradient (LeNet's conv2: 5x5 over 8x8 dy for 12x12 dx) runs 2/3.
  double tap_fraction() const {
    if (skip_padding_pairs()) return pair_fraction();
    if (grad_weights || pixel_vectors) return 1.0;  // pixel vectors run every tap
    if (phased()) return 1.0 / static_cast<double>(phases);  // each tap reaches one phase at most
    const double columns = skip_columns() ? axis_tap_fraction(2) : 1.0;
    double run = 1.0;
    for (std::size_t a = 0; a < 3; ++a)
      if (ker[a] > 1) {
        run = axis_tap_fraction(a) * (a < 2 ? columns : 1.0);
        break;
      }
    return (1.0 - run) * static_cast<double>(taps * nsrc) < kSkippedTapsWorthLookUps ? 1.0 : run;
  }
};

/// Destination positions grouped, axis by axis, into classes of equal in-source tap ranges
/// (KvecPlan::tap_range), numbered in coordinate order: ASPP's 28 columns make three (the
/// left six skip the first tap, the right six the last). Both ends of the range fall as
/// the coordinate grows, so a class is a run of coordinates, and the positions reading tap
/// t along axis a are a run of classes, reading(a, t).
struct TapClasses {
  std::array<std::vector<i64>, 3> of;                   ///< each coordinate's class
  std::array<std::vector<std::array<i64, 2>>, 3> taps;  ///< each class's tap range

  explicit TapClasses(const KvecPlan& pl) {
    for (std::size_t a = 0; a < 3; ++a)
      for (i64 o = 0; o < pl.dst[a]; ++o) {
        const std::array<i64, 2> r = pl.tap_range(a, o);
        if (taps[a].empty() || taps[a].back() != r) taps[a].push_back(r);
        of[a].push_back(count(a) - 1);
      }
  }
  i64 count(std::size_t a) const { return static_cast<i64>(taps[a].size()); }
  /// The tap range of coordinate o along axis a (KvecPlan::tap_range).
  const std::array<i64, 2>& range(std::size_t a, i64 o) const {
    return taps[a][static_cast<std::size_t>(of[a][static_cast<std::size_t>(o)])];
  }
  /// The classes [first, last) along axis a whose positions read tap t inside the source.
  std::array<i64, 2> reading(std::size_t a, i64 t) const {
    i64 first = count(a), last = 0;
    for (i64 c = 0; c < count(a); ++c)
      if (taps[a][static_cast<std::size_t>(c)][0] <= t && t < taps[a][static_cast<std::size_t>(c)][1])
        first = std::min(first, c), last = c + 1;
    return first < last ? std::array<i64, 2>{first, last} : std::array<i64, 2>{0, 0};
  }
};

}  // namespace convgraph::cpu
