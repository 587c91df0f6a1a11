// "cpu.depthwise": grouped convolutions with one input channel per group (C/G == 1, groups
// > 1, any channel multiplier K/G), every rank, kernel, stride, dilation, padding and flip, all three
// directions, float32 and float64. No workspace.
//
// Every direction is built on one plane-sized step: copy a source plane into a small
// zero-padded buffer (thread-local, L1/L2 sized for common layers), laid out so that every
// tap of an output vector is one contiguous, unconditional vector load:
//   * axes 0 and 1 are padded to exactly the extent the taps read;
//   * axis 2 is split into `stride` phases (element q of the padded row goes to phase q % s
//     at index q / s), so a strided tap still reads consecutive elements, and each phase is
//     long enough for the output row rounded up to whole vectors (the spare lanes read zeros
//     or real data, always finite, and are never stored).
// Forward correlates the buffer of x with the filter. Grad inputs is the same correlation on
// dy upsampled by the stride (zeros between samples), padded by dilated-extent - 1 - pad, with
// the filter reversed on every axis, summed over the channel multiplier. Grad weights
// multiplies dy vectors with the shifted buffer of x and reduces over batch and space.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/conv_geometry.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"
#include "backends/cpu/kernels/native_vec.hpp"
#include "backends/cpu/kernels/prefetch.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

// GCC vector extensions of the level's register width (a vector_size attribute on a
// template parameter is ignored, so the two types are spelled out). A generic vector wider
// than the registers is lowered through the stack: 64-byte vectors made AVX2 5x slower.
inline constexpr int kVecBytes = CONVGRAPH_ISA_VECTOR_BYTES;
using VecF = float __attribute__((vector_size(kVecBytes)));
using VecD = double __attribute__((vector_size(kVecBytes)));
template <class T>
using Vec = std::conditional_t<std::is_same_v<T, float>, VecF, VecD>;
template <class T>
inline constexpr i64 kVL = static_cast<i64>(kVecBytes / sizeof(T));  // lanes per vector

template <class T>
inline void load(Vec<T>& v, const T* p) { std::memcpy(&v, p, sizeof(v)); }

/// n vectors, 64-byte aligned and zeroed. Not a std::vector<Vec<T>>: that template instance
/// would be shared with the other levels' copies of this file, and the alignment of a
/// 64-byte vector type differs between levels (16 without AVX-512), see isa_begin.hpp.
template <class T>
class VectorArray {
 public:
  // aligned_alloc needs a size that is a multiple of the alignment (vectors are 16-64 bytes).
  explicit VectorArray(i64 n)
      : n_(n), p_(static_cast<Vec<T>*>(std::aligned_alloc(64, (sizeof(Vec<T>) * static_cast<std::size_t>(std::max<i64>(n, 1)) + 63) / 64 * 64))) {
    if (p_ == nullptr) throw MemoryError(msg("cpu.depthwise: cannot allocate ", n, " accumulator vectors"));
    clear();
  }
  ~VectorArray() { std::free(p_); }
  VectorArray(const VectorArray&) = delete;
  VectorArray& operator=(const VectorArray&) = delete;
  void clear() { std::memset(static_cast<void*>(p_), 0, sizeof(Vec<T>) * static_cast<std::size_t>(n_)); }
  Vec<T>* data() { return p_; }
  Vec<T>& operator[](std::size_t i) { return p_[i]; }

 private:
  i64 n_;
  Vec<T>* p_;
};

/// One output vector: where its first tap reads in the buffer, where it goes, how many of its
/// lanes are real positions.
struct Slot {
  i64 in, out, lanes;
};

/// The correlation out[o] = sum_t w[t] * src[o * s + t * d - pad] on one plane, with src the
/// virtual signal "src_plane upsampled by `up`" (sample v is src[v / up] when v % up == 0).
struct PlaneGeom {
  i64 out[3], s[3], d[3], ker[3], pad[3], src_len[3], up[3];
  i64 L0 = 1, L1 = 1, Lp = 1;  // buffer extents: axis 0, axis 1, one phase of axis 2
  i64 row = 1, plane = 1;      // elements per buffer row (s2 phases) and per buffer plane
  i64 Wr = 1;                  // output row rounded up to whole vectors
  /// Wide rows (short 2-D rows at stride 1, forward and grad inputs): an output vector spans
  /// rows. Buffer rows are then exactly as long as the taps read (no rounding), so output
  /// (o1, j) and its taps sit at o1 * row + j + offset in one flat run; the lanes at j >=
  /// out[2] are junk, computed into a scratch plane of out[1] * row and dropped when it is
  /// copied out. 7x7 planes: 4 vectors instead of 7 a 3x3 plane.
  bool wide = false;

  /// allow_wide: the caller handles wide rows (make_slots, then copy_wide_rows).
  template <class T>
  void finish(bool allow_wide = false) {
    constexpr i64 L = kVL<T>;
    Wr = (out[2] + L - 1) / L * L;
    L0 = (out[0] - 1) * s[0] + (ker[0] - 1) * d[0] + 1;
    L1 = (out[1] - 1) * s[1] + (ker[1] - 1) * d[1] + 1;
    const i64 tight = out[2] + (ker[2] - 1) * d[2];  // a wide row: what its taps read
    wide = allow_wide && out[0] == 1 && out[1] > 1 && s[1] == 1 && s[2] == 1 &&
           (out[1] * tight + L - 1) / L * 8 <= out[1] * (Wr / L) * 7;  // an eighth fewer vectors
    Lp = wide ? tight : Wr + (ker[2] - 1) * d[2] / s[2] + 1;
    row = s[2] * Lp;
    // Wide: the last vector's taps read up to (ker[2] - 1) * d[2] + L - 1 past the rows.
    plane = L0 * L1 * row + (wide ? (ker[2] - 1) * d[2] + L : 0);
  }
  /// Elements of the scratch plane wide rows are computed into (+ 16: the last vector's junk
  /// lanes, at most a vector).
  i64 wide_numel() const { return wide ? out[1] * row + 16 : 0; }
  i64 out_numel() const { return out[0] * out[1] * out[2]; }
  i64 src_numel() const { return src_len[0] * src_len[1] * src_len[2]; }
  /// Buffer offset of tap (t0, t1, t2) relative to its output vector's base.
  i64 tap_offset(i64 t0, i64 t1, i64 t2) const {
    const i64 q = t2 * d[2];
    return t0 * d[0] * L1 * row + t1 * d[1] * row + (q % s[2]) * Lp + q / s[2];
  }
  /// Virtual sample v of axis a as a source index, or -1 where it is padding or a gap.
  i64 source(int a, i64 v) const {
    if (v < 0) return -1;
    if (up[a] == 1) return v < src_len[a] ? v : -1;  // no division: this runs once per buffer row
    if (v % up[a] != 0) return -1;
    const i64 i = v / up[a];
    return i < src_len[a] ? i : -1;
  }
};

/// Forward geometry: x is read directly.
PlaneGeom forward_geom(const ConvGeometry& g) {
  PlaneGeom pg;
  for (int a = 0; a < 3; ++a) {
    pg.out[a] = g.out[a], pg.s[a] = g.stride[a], pg.d[a] = g.dil[a], pg.ker[a] = g.ker[a];
    pg.pad[a] = g.pad[a], pg.src_len[a] = g.in[a], pg.up[a] = 1;
  }
  return pg;
}

/// Grad-inputs geometry: dy upsampled by the stride, stride 1, the complementary padding.
PlaneGeom grad_inputs_geom(const ConvGeometry& g) {
  PlaneGeom pg;
  for (int a = 0; a < 3; ++a) {
    pg.out[a] = g.in[a], pg.s[a] = 1, pg.d[a] = g.dil[a], pg.ker[a] = g.ker[a];
    pg.pad[a] = (g.ker[a] - 1) * g.dil[a] - g.pad[a], pg.src_len[a] = g.out[a], pg.up[a] = g.stride[a];
  }
  return pg;
}

/// Zeroes a buffer's padding and gaps. They sit at the same places for every plane of a run,
/// so a thread does this once per chunk and copy_plane then writes only the samples.
template <class T>
void clear_buffer(const PlaneGeom& pg, T* buf) {
  std::fill(buf, buf + pg.plane, T(0));
}

/// dst[j] = src[j * s] for j < n: stride 2 (the common strided layer) with the stride known
/// to the compiler, which then vectorises it (a scalar loop per element was most of
/// mobilenet_dw_s2's forward time).
template <class T>
void copy_strided(T* __restrict dst, const T* __restrict src, i64 n, i64 s) {
  if (s == 2) {
    for (i64 j = 0; j < n; ++j) dst[j] = src[2 * j];
    return;
  }
  for (i64 j = 0; j < n; ++j) dst[j] = src[j * s];
}

/// Stores the first `lanes` lanes of v (masked with AVX-512, else lane by lane).
template <class T>
inline void store(T* dst, const Vec<T>& v, i64 lanes) {
  if (lanes == kVL<T>) {
    std::memcpy(dst, &v, sizeof(v));
    return;
  }
#if CONVGRAPH_ISA_AVX512
  if constexpr (std::is_same_v<T, float>)
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << lanes) - 1), reinterpret_cast<const __m512&>(v));
  else
    _mm512_mask_storeu_pd(dst, static_cast<__mmask8>((1u << lanes) - 1), reinterpret_cast<const __m512d&>(v));
#else
  alignas(64) T tmp[kVL<T>];
  std::memcpy(tmp, &v, sizeof(v));
  for (i64 l = 0; l < lanes; ++l) dst[l] = tmp[l];
#endif
}

/// Loads the first `lanes` lanes from src, zero in the others (never reads past them).
template <class T>
inline void load_first(Vec<T>& v, const T* src, i64 lanes) {
  if (lanes == kVL<T>) {
    load(v, src);
    return;
  }
#if CONVGRAPH_ISA_AVX512
  if constexpr (std::is_same_v<T, float>)
    reinterpret_cast<__m512&>(v) = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1), src);
  else
    reinterpret_cast<__m512d&>(v) = _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << lanes) - 1), src);
#elif CONVGRAPH_ISA_AVX2
  // A masked load: a lane is read where its mask element's sign bit is set, i.e. index < lanes.
  // (A scalar copy through the stack stalled store forwarding on every row's last vector.)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    reinterpret_cast<__m256&>(v) = _mm256_maskload_ps(src, mask);
  } else {
    const __m256i mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(lanes), _mm256_setr_epi64x(0, 1, 2, 3));
    reinterpret_cast<__m256d&>(v) = _mm256_maskload_pd(src, mask);
  }
#else
  alignas(64) T tmp[kVL<T>] = {};
  for (i64 l = 0; l < lanes; ++l) tmp[l] = src[l];
  load(v, tmp);
#endif
}

/// Lanes First, First + 2, First + 4, ... of a and b laid end to end (the even or the odd ones).
template <int First, std::size_t... I>
inline Vec<float> every_other(Vec<float> a, Vec<float> b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (First + 2 * static_cast<int>(I))...);
}

/// One source row at stride 2 into its buffer row's two phases (phase r, index j: source
/// 2j + r - pad, zero outside the row): each pair of source vectors, loaded masked to the
/// row, is split into its even and odd lanes. Element by element, with the phases' bounds
/// found per row, it was 58% of a 5x5 stride-2 layer's time (EfficientNet's 28x28 x 240
/// channels).
void copy_row_stride2(const PlaneGeom& pg, const float* sr, float* dst) {
  constexpr i64 L = kVL<float>;
  using V = Vec<float>;
  constexpr auto lanes = std::make_index_sequence<L>{};
  const i64 n = pg.src_len[2];
  const i64 end = std::min(pg.Lp, (n + pg.pad[2] + 1) / 2);  // past it both phases hold zeros
  for (i64 j = 0; j < end; j += L) {
    const i64 x = 2 * j - pg.pad[2];  // the source index of lane 0 of a
    const V a = loadn_part(sr + x, -x, n - x), b = loadn_part(sr + x + L, -x - L, n - x - L);
    const i64 count = std::min(L, pg.Lp - j);
    store(dst + j, every_other<0>(a, b, lanes), count);
    store(dst + pg.Lp + j, every_other<1>(a, b, lanes), count);
  }
}

/// Copies one source plane's samples into a buffer cleared by clear_buffer.
template <class T>
void copy_plane(const PlaneGeom& pg, const T* src, T* buf) {
  const i64 s2 = pg.s[2];
  const bool plain = s2 == 1 && pg.up[2] == 1;
  // Plain rows: buffer element j holds source j - pad, for j in [lo, hi).
  const i64 lo = std::clamp<i64>(pg.pad[2], 0, pg.Lp);
  const i64 hi = std::clamp<i64>(pg.pad[2] + pg.src_len[2], lo, pg.Lp);
  for (i64 p0 = 0; p0 < pg.L0; ++p0) {
    const i64 i0 = pg.source(0, p0 - pg.pad[0]);
    if (i0 < 0) continue;
    for (i64 p1 = 0; p1 < pg.L1; ++p1) {
      const i64 i1 = pg.source(1, p1 - pg.pad[1]);
      if (i1 < 0) continue;
      T* dst = buf + (p0 * pg.L1 + p1) * pg.row;
      const T* sr = src + (i0 * pg.src_len[1] + i1) * pg.src_len[2];
      if (plain) {
        T* d = dst + lo;
        const T* sp = sr + (lo - pg.pad[2]);
        const i64 n = hi - lo;
        if (n >= kVL<T>) {
          // Whole vectors, the last one overlapping its neighbour (same values): no scalar
          // tail, which cost more than the vectors on 28-wide rows.
          Vec<T> v;
          for (i64 i = 0; i + kVL<T> < n; i += kVL<T>) load(v, sp + i), std::memcpy(d + i, &v, sizeof(v));
          load(v, sp + n - kVL<T>), std::memcpy(d + n - kVL<T>, &v, sizeof(v));
        } else if (n > 0) {
          Vec<T> v;
          load_first(v, sp, n), store(d, v, n);
        }
        continue;
      }
      if constexpr (std::is_same_v<T, float>) {
        if (pg.up[2] == 1 && s2 == 2) {
          copy_row_stride2(pg, sr, dst);
          continue;
        }
      }
      if (pg.up[2] == 1) {
        // Stride s2: phase r holds source j * s2 + r - pad at index j, for the j that land in the row.
        for (i64 r = 0; r < s2; ++r) {
          const i64 first = r - pg.pad[2];  // the source index of j = 0
          const i64 jlo = std::clamp<i64>(ceil_div(-first, s2), 0, pg.Lp);
          const i64 jhi = std::clamp<i64>(ceil_div(pg.src_len[2] - first, s2), 0, pg.Lp);
          if (jlo < jhi) copy_strided(dst + r * pg.Lp + jlo, sr + jlo * s2 + first, jhi - jlo, s2);
        }
      } else {
        // Upsampled by up (grad inputs, whose geometry has stride 1): source i at buffer index
        // i * up + pad, the gaps stay zero.
        const i64 up = pg.up[2], pad = pg.pad[2];
        const i64 ilo = std::clamp<i64>(ceil_div(-pad, up), 0, pg.src_len[2]);
        const i64 ihi = std::clamp<i64>(ceil_div(pg.Lp - pad, up), 0, pg.src_len[2]);
        for (i64 i = ilo; i < ihi; ++i) dst[i * up + pad] = sr[i];
      }
    }
  }
}

/// One slot per output vector of the plane, in storage order (wide rows: of the scratch
/// plane, every lane counted).
template <class T>
std::vector<Slot> make_slots(const PlaneGeom& pg) {
  std::vector<Slot> slots;
  if (pg.wide) {
    for (i64 p = 0; p < pg.out[1] * pg.row; p += kVL<T>) slots.push_back({p, p, kVL<T>});
    return slots;
  }
  for (i64 o0 = 0; o0 < pg.out[0]; ++o0)
    for (i64 o1 = 0; o1 < pg.out[1]; ++o1)
      for (i64 j = 0; j < pg.out[2]; j += kVL<T>)
        slots.push_back({o0 * pg.s[0] * pg.L1 * pg.row + o1 * pg.s[1] * pg.row + j,
                         (o0 * pg.out[1] + o1) * pg.out[2] + j, std::min(kVL<T>, pg.out[2] - j)});
  return slots;
}

/// correlate's slots in blocks of up to 8 (8 chains keep both FMA pipes busy through the
/// FMA latency), the blocks as even as they come: a 14-row plane runs 7 + 7. Its last 6
/// rows went one slot at a time before, a single chain waiting out the latency on every
/// tap: 60% of a 7x7 depthwise layer on 14x14 planes (Zen 5). Each block runs the taps that
/// read inside the source for one of its slots, as runs of consecutive tap indices: a 31x31
/// filter on 14x14 planes (RepLKNet) reads padding in 80% of its taps, and its blocks of 7
/// rows skip 44% (their rows' tap ranges differ).
struct SlotBlock {
  i64 first, size, run_begin, run_end;  ///< its slots, and its runs in `runs`
};
struct SlotBlocks {
  std::vector<SlotBlock> blocks;
  std::vector<std::array<i64, 2>> runs;  ///< first tap index, count
};

/// The blocks of make_slots' slots over `reps` copies of the filter's taps (grad inputs:
/// one a channel multiplier, each nt taps in (t0, t1, t2) order).
template <class T>
SlotBlocks make_blocks(const PlaneGeom& pg, i64 reps) {
  // Taps [lo, hi) along axis a that read inside the source for output coordinate o.
  const auto tap_range = [&](int a, i64 o) {
    const i64 first = pg.pad[a] - o * pg.s[a];
    return taps_inside(first, first + (pg.src_len[a] - 1) * pg.up[a], pg.d[a], pg.ker[a]);
  };
  std::vector<std::array<i64, 6>> reach;  // per slot: lo and hi along axes 0, 1, 2
  if (pg.wide) {
    for (i64 p = 0; p < pg.out[1] * pg.row; p += kVL<T>) reach.push_back({0, pg.ker[0], 0, pg.ker[1], 0, pg.ker[2]});
  } else {
    for (i64 o0 = 0; o0 < pg.out[0]; ++o0)
      for (i64 o1 = 0; o1 < pg.out[1]; ++o1)
        for (i64 j = 0; j < pg.out[2]; j += kVL<T>) {
          const auto r0 = tap_range(0, o0), r1 = tap_range(1, o1);
          const i64 last = std::min(kVL<T>, pg.out[2] - j) + j - 1;  // the last lane: the lowest lo
          reach.push_back({r0[0], r0[1], r1[0], r1[1], tap_range(2, last)[0], tap_range(2, j)[1]});
        }
  }
  SlotBlocks sb;
  const i64 ns = static_cast<i64>(reach.size()), nb = (ns + 7) / 8;
  for (i64 b = 0, s = 0; b < nb; ++b) {
    SlotBlock blk{s, (ns - s + (nb - b) - 1) / (nb - b), static_cast<i64>(sb.runs.size()), 0};
    std::array<i64, 6> u = {pg.ker[0], 0, pg.ker[1], 0, pg.ker[2], 0};
    for (i64 i = s; i < s + blk.size; ++i)
      for (int k = 0; k < 6; k += 2) {
        u[k] = std::min(u[k], reach[static_cast<std::size_t>(i)][k]);
        u[k + 1] = std::max(u[k + 1], reach[static_cast<std::size_t>(i)][k + 1]);
      }
    for (i64 m = 0; m < reps; ++m)
      for (i64 t0 = u[0]; t0 < u[1]; ++t0)
        for (i64 t1 = u[2]; t1 < u[3] && u[4] < u[5]; ++t1) {
          const i64 at = ((m * pg.ker[0] + t0) * pg.ker[1] + t1) * pg.ker[2] + u[4];
          if (sb.runs.size() > static_cast<std::size_t>(blk.run_begin) && sb.runs.back()[0] + sb.runs.back()[1] == at)
            sb.runs.back()[1] += u[5] - u[4];
          else
            sb.runs.push_back({at, u[5] - u[4]});
        }
    blk.run_end = static_cast<i64>(sb.runs.size());
    sb.blocks.push_back(blk);
    s += blk.size;
  }
  return sb;
}

/// out[slot] = sum_t tw[t] * buf[slot.in + toff[t]] for kB slots over the runs of taps:
/// kB independent accumulator chains, each tap's weight broadcast once for all of them.
template <class T, int kB>
void correlate_block(const T* buf, const i64* toff, const T* tw, const std::array<i64, 2>* runs, i64 nruns,
                     const Slot* sl, T* out) {
  Vec<T> acc[kB];
#pragma GCC unroll 8
  for (int b = 0; b < kB; ++b) acc[b] = Vec<T>{};
  for (i64 r = 0; r < nruns; ++r)
    for (i64 t = runs[r][0]; t < runs[r][0] + runs[r][1]; ++t) {
      const T wv = tw[t];
      const T* bt = buf + toff[t];
#pragma GCC unroll 8
      for (int b = 0; b < kB; ++b) {
        Vec<T> v;
        load(v, bt + sl[b].in);
        acc[b] += wv * v;
      }
    }
#pragma GCC unroll 8
  for (int b = 0; b < kB; ++b) store(out + sl[b].out, acc[b], sl[b].lanes);
}

/// out[slot] = sum_t tw[t] * buf[slot.in + toff[t]] for every slot, block by block.
template <class T>
void correlate(const T* buf, const i64* toff, const T* tw, const SlotBlocks& sb, const std::vector<Slot>& slots,
               T* out) {
  for (const SlotBlock& blk : sb.blocks) {
    const Slot* sl = slots.data() + blk.first;
    const std::array<i64, 2>* runs = sb.runs.data() + blk.run_begin;
    const i64 nr = blk.run_end - blk.run_begin;
    switch (blk.size) {
      case 1: correlate_block<T, 1>(buf, toff, tw, runs, nr, sl, out); break;
      case 2: correlate_block<T, 2>(buf, toff, tw, runs, nr, sl, out); break;
      case 3: correlate_block<T, 3>(buf, toff, tw, runs, nr, sl, out); break;
      case 4: correlate_block<T, 4>(buf, toff, tw, runs, nr, sl, out); break;
      case 5: correlate_block<T, 5>(buf, toff, tw, runs, nr, sl, out); break;
      case 6: correlate_block<T, 6>(buf, toff, tw, runs, nr, sl, out); break;
      case 7: correlate_block<T, 7>(buf, toff, tw, runs, nr, sl, out); break;
      default: correlate_block<T, 8>(buf, toff, tw, runs, nr, sl, out); break;
    }
  }
}

/// Wide rows: the out[2] real outputs of each scratch row (row apart) into dst's plane.
template <class T>
void copy_wide_rows(const PlaneGeom& pg, const T* wide, T* dst) {
  for (i64 o1 = 0; o1 < pg.out[1]; ++o1)
    for (i64 j = 0; j < pg.out[2]; j += kVL<T>) {
      Vec<T> v;
      load(v, wide + o1 * pg.row + j);
      store(dst + o1 * pg.out[2] + j, v, std::min(kVL<T>, pg.out[2] - j));
    }
}

/// Tap offsets in (t0, t1, t2) order, and the matching filter storage index of each.
void make_taps(const ConvGeometry& g, const PlaneGeom& pg, bool reversed, std::vector<i64>& off,
               std::vector<i64>& widx) {
  off.clear();
  widx.clear();
  for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
    for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
      for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
        off.push_back(pg.tap_offset(t0, t1, t2));
        const i64 u0 = reversed ? g.ker[0] - 1 - t0 : t0;
        const i64 u1 = reversed ? g.ker[1] - 1 - t1 : t1;
        const i64 u2 = reversed ? g.ker[2] - 1 - t2 : t2;
        widx.push_back((g.wtap(0, u0) * g.ker[1] + g.wtap(1, u1)) * g.ker[2] + g.wtap(2, u2));
      }
}

template <class T>
std::vector<T>& thread_buffer(i64 n) {
  thread_local std::vector<T> buf;
  if (static_cast<i64>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
  return buf;
}

// ---- forward and grad inputs ----------------------------------------------------------------

/// Forward: per (n, c) plane, one buffer of x, Kg output planes. Grad inputs: per (n, c)
/// plane, Kg buffers of dy (one per multiplier), one output plane summing them all.
template <class T>
void forward_or_grad_inputs(const ConvGeometry& g, const T* src, const T* w, T* dst, bool grad_inputs,
                            const ConvEpilogue& ep, const ConvContext& ctx) {
  PlaneGeom pg = grad_inputs ? grad_inputs_geom(g) : forward_geom(g);
  pg.finish<T>(/*allow_wide=*/true);
  const std::vector<Slot> slots = make_slots<T>(pg);
  const SlotBlocks blocks = make_blocks<T>(pg, grad_inputs ? g.Kg : 1);
  std::vector<i64> toff, widx;
  make_taps(g, pg, grad_inputs, toff, widx);
  const i64 nt = static_cast<i64>(toff.size());
  const i64 Kg = g.Kg;
  const i64 src_numel = pg.src_numel(), dst_numel = pg.out_numel();
  const i64 nbuf = grad_inputs ? Kg : 1;
  parallel_over(ctx, g.N * g.C, [&](i64 begin, i64 end) {
    std::vector<T>& buf = thread_buffer<T>(nbuf * pg.plane + nbuf * nt + nbuf * nt + pg.wide_numel());
    T* tw = buf.data() + nbuf * pg.plane;
    T* wide = tw + 2 * nbuf * nt;  // wide rows' scratch plane
    // The correlation of one output plane: straight into it, or through the scratch plane.
    auto correlate_into = [&](const i64* offsets, T* out) {
      correlate(buf.data(), offsets, tw, blocks, slots, pg.wide ? wide : out);
      if (pg.wide) copy_wide_rows(pg, wide, out);
    };
    i64* off_all = nullptr;
    std::vector<i64> offs;  // grad inputs: the taps of every multiplier's buffer
    if (grad_inputs) {
      offs.resize(static_cast<std::size_t>(Kg * nt));
      for (i64 m = 0; m < Kg; ++m)
        for (i64 t = 0; t < nt; ++t) offs[static_cast<std::size_t>(m * nt + t)] = m * pg.plane + toff[static_cast<std::size_t>(t)];
      off_all = offs.data();
    }
    for (i64 m = 0; m < nbuf; ++m) clear_buffer(pg, buf.data() + m * pg.plane);
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 n = idx / g.C, c = idx % g.C;
      if (!grad_inputs) {
        if (idx + 1 < end) {
          prefetch_span(src + (idx + 1) * src_numel, src_numel);
          prefetch_span<true>(dst + ((idx + 1) / g.C * g.K + (idx + 1) % g.C * Kg) * dst_numel, Kg * dst_numel);
        }
        copy_plane(pg, src + idx * src_numel, buf.data());
        for (i64 m = 0; m < Kg; ++m) {
          const i64 k = c * Kg + m;
          for (i64 t = 0; t < nt; ++t) tw[t] = w[k * g.ker_numel + widx[static_cast<std::size_t>(t)]];
          correlate_into(toff.data(), dst + (n * g.K + k) * dst_numel);
          if (!ep.empty()) conv_epilogue_run(ep, dst + (n * g.K + k) * dst_numel, (n * g.K + k) * dst_numel, k, dst_numel);
        }
      } else {
        if (idx + 1 < end) {
          prefetch_span(src + ((idx + 1) / g.C * g.K + (idx + 1) % g.C * Kg) * src_numel, Kg * src_numel);
          prefetch_span<true>(dst + (idx + 1) * dst_numel, dst_numel);
        }
        for (i64 m = 0; m < Kg; ++m) {
          const i64 k = c * Kg + m;
          copy_plane(pg, src + (n * g.K + k) * src_numel, buf.data() + m * pg.plane);
          for (i64 t = 0; t < nt; ++t) tw[m * nt + t] = w[k * g.ker_numel + widx[static_cast<std::size_t>(t)]];
        }
        correlate_into(off_all, dst + idx * dst_numel);
      }
    }
  });
}

// ---- grad weights ---------------------------------------------------------------------------

/// acc[t] += dy[slot] * buf[slot.in + toff[t]] for TB taps and every slot; dy lanes past the
/// row end count as zero.
template <class T, int TB>
void reduce_taps(const T* buf, const i64* toff, const std::vector<Slot>& slots, const T* dy, Vec<T>* acc) {
  Vec<T> a[TB];
  for (int b = 0; b < TB; ++b) a[b] = acc[b];
  for (const Slot& sl : slots) {
    Vec<T> dv;
    load_first(dv, dy + sl.out, sl.lanes);
    const T* bs = buf + sl.in;
#pragma GCC unroll 16
    for (int b = 0; b < TB; ++b) {
      Vec<T> v;
      load(v, bs + toff[b]);
      a[b] += dv * v;
    }
  }
  for (int b = 0; b < TB; ++b) acc[b] = a[b];
}

/// A 3x3 filter slice (one axis-0 tap, at buffer offset base0) whose vertical stride equals
/// its vertical dilation (both 1 in the common layers), two output rows at a time: rows o1
/// and o1 + 1 read buffer rows that overlap in two of three (4 x 3 buffer vectors and 2 dy
/// vectors for 18 products; GCC may still fold a shared load into both FMAs), with addresses
/// from the geometry instead of reduce_taps' slot list: 8-10% faster than reduce_taps on
/// depthwise_3x3 (AVX2, Zen 3). hoff: the three horizontal taps' offsets; acc: the 9 taps'.
template <class T>
void reduce_rows_3x3(const T* buf, const PlaneGeom& pg, i64 base0, const i64* hoff, const T* dy, Vec<T>* acc) {
  Vec<T> a[9];
  for (int b = 0; b < 9; ++b) a[b] = acc[b];
  const i64 rs = pg.d[1] * pg.row;  // between vertical taps, and (stride == dilation) between output rows
  const i64 W = pg.out[2];
  const i64 wfull = W / kVL<T> * kVL<T>;
  const i64 h0 = hoff[0], h1 = hoff[1], h2 = hoff[2];
  // Row pair: dy rows u (o1) and w (o1 + 1) against buffer rows 0..3 (rows 0-2 for u, 1-3 for w).
  auto pair = [&](const T* bj, const T* dj, i64 lanes) {
    Vec<T> u, w;
    load_first(u, dj, lanes);
    load_first(w, dj + W, lanes);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const T* br = bj + r * rs;
      Vec<T> v0, v1, v2;
      load(v0, br + h0);
      load(v1, br + h1);
      load(v2, br + h2);
      if (r < 3) a[r * 3] += u * v0, a[r * 3 + 1] += u * v1, a[r * 3 + 2] += u * v2;
      if (r > 0) a[r * 3 - 3] += w * v0, a[r * 3 - 2] += w * v1, a[r * 3 - 1] += w * v2;
    }
  };
  auto single = [&](const T* bj, const T* dj, i64 lanes) {
    Vec<T> u;
    load_first(u, dj, lanes);
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r) {
      const T* br = bj + r * rs;
      Vec<T> v0, v1, v2;
      load(v0, br + h0);
      load(v1, br + h1);
      load(v2, br + h2);
      a[r * 3] += u * v0, a[r * 3 + 1] += u * v1, a[r * 3 + 2] += u * v2;
    }
  };
  for (i64 o0 = 0; o0 < pg.out[0]; ++o0) {
    const T* b0 = buf + base0 + o0 * pg.s[0] * pg.L1 * pg.row;
    const T* d0 = dy + o0 * pg.out[1] * W;
    i64 o1 = 0;
    for (; o1 + 2 <= pg.out[1]; o1 += 2) {
      const T* br = b0 + o1 * rs;
      const T* dr = d0 + o1 * W;
      for (i64 j = 0; j < wfull; j += kVL<T>) pair(br + j, dr + j, kVL<T>);
      if (wfull < W) pair(br + wfull, dr + wfull, W - wfull);
    }
    if (o1 < pg.out[1]) {
      const T* br = b0 + o1 * rs;
      const T* dr = d0 + o1 * W;
      for (i64 j = 0; j < wfull; j += kVL<T>) single(br + j, dr + j, kVL<T>);
      if (wfull < W) single(br + wfull, dr + wfull, W - wfull);
    }
  }
  for (int b = 0; b < 9; ++b) acc[b] = a[b];
}

// Taps per pass over a plane: accumulators held in registers (16 vector registers below
// AVX-512: 12 accumulators, the dy vector and a product). A 3x3 filter's 9 taps take one pass.
inline constexpr int kReduceMaxTaps = 12;

template <class T>
void reduce_taps_n(int tb, const T* buf, const i64* toff, const std::vector<Slot>& slots, const T* dy, Vec<T>* acc) {
  switch (tb) {
    case 1: reduce_taps<T, 1>(buf, toff, slots, dy, acc); break;
    case 2: reduce_taps<T, 2>(buf, toff, slots, dy, acc); break;
    case 3: reduce_taps<T, 3>(buf, toff, slots, dy, acc); break;
    case 4: reduce_taps<T, 4>(buf, toff, slots, dy, acc); break;
    case 5: reduce_taps<T, 5>(buf, toff, slots, dy, acc); break;
    case 6: reduce_taps<T, 6>(buf, toff, slots, dy, acc); break;
    case 7: reduce_taps<T, 7>(buf, toff, slots, dy, acc); break;
    case 8: reduce_taps<T, 8>(buf, toff, slots, dy, acc); break;
    case 9: reduce_taps<T, 9>(buf, toff, slots, dy, acc); break;
    case 10: reduce_taps<T, 10>(buf, toff, slots, dy, acc); break;
    case 11: reduce_taps<T, 11>(buf, toff, slots, dy, acc); break;
    default: reduce_taps<T, kReduceMaxTaps>(buf, toff, slots, dy, acc); break;
  }
}

/// The walk both grad-weights paths share. A thread takes a range of output channels and
/// walks them in blocks, image by image: for image n it reads the block's consecutive planes
/// of x and dy, one contiguous stretch each, which the hardware prefetchers stream (walking
/// one channel through all images jumped C planes at a time: a new page and a cold start per
/// 3 KB plane, slower even with software prefetch, which stalled on full miss queues here).
/// Each channel keeps its nt tap accumulators (vectors) between images and still sums its
/// images in order 0..N-1, so the result does not depend on the thread count; its taps'
/// lanes are added up into dw[k][widx[t]] at the end. make_reduce() gives each thread its
/// reduce(n, k, acc), which adds image n's products of channel k into acc[0, nt).
template <class T, class MakeReduce>
void walk_channel_blocks(const ConvGeometry& g, const std::vector<i64>& widx, T* dw, const ConvContext& ctx,
                         MakeReduce&& make_reduce) {
  const i64 nt = static_cast<i64>(widx.size());
  // Channels per block: their accumulators stay within ~32 KB (L1).
  const i64 kblock = std::max<i64>(1, (32 << 10) / (nt * static_cast<i64>(sizeof(Vec<T>))));
  parallel_over(ctx, g.K, [&](i64 begin, i64 end) {
    auto reduce = make_reduce();
    const i64 nblocks = (end - begin + kblock - 1) / kblock;
    const i64 block = (end - begin + nblocks - 1) / nblocks;  // even blocks
    VectorArray<T> acc(nt * block);
    for (i64 k0 = begin; k0 < end; k0 += block) {
      const i64 k1 = std::min(end, k0 + block);
      acc.clear();
      for (i64 n = 0; n < g.N; ++n)
        for (i64 k = k0; k < k1; ++k) reduce(n, k, acc.data() + (k - k0) * nt);
      for (i64 k = k0; k < k1; ++k)
        for (i64 t = 0; t < nt; ++t) {
          alignas(64) T lanes[kVL<T>];
          std::memcpy(lanes, &acc[static_cast<std::size_t>((k - k0) * nt + t)], sizeof(lanes));
          T sum = 0;
          for (i64 l = 0; l < kVL<T>; ++l) sum += lanes[l];
          dw[k * g.ker_numel + widx[static_cast<std::size_t>(t)]] = sum;
        }
    }
  });
}

/// Planes of at most kFlatMaxVectors vectors whose rows are narrower than one vector, at
/// stride 1 with outputs the input's shape (MobileNet's and EfficientNet's last stages, 7x7
/// with 3x3 or 5x5 filters): grad weights treats each plane as one flat run of vectors.
/// Tap t reads the run shifted by its flat offset, each lane masked to the positions whose
/// tap lands inside the input (the others read zeros, as the zero padding would give), so
/// there is no padded copy and every lane holds a position: rows of 7 used 7 of 16 lanes,
/// and the copy took a third of the time (Zen 5, 2 threads: 8x1024x7x7 with 3x3, 0.26 ->
/// 0.18 ms; 8x960x7x7 with 5x5, 0.56 -> 0.45). Not on 14x14 planes (13 vectors a tap, all
/// loads: 8x384x14x14 with 7x7 went 0.58 -> 0.85 ms), where the rows fill 14 of 16 lanes.
inline constexpr i64 kFlatMaxVectors = 8;
bool flat_planes(const ConvGeometry& g) {
  for (std::size_t a = 0; a < 3; ++a)
    if (g.stride[a] != 1 || g.out[a] != g.in[a]) return false;
  return g.in[2] < kVL<float> && g.in_numel <= kFlatMaxVectors * kVL<float>;
}

void grad_weights_flat(const ConvGeometry& g, const float* x, float* dw, const float* dy, const ConvContext& ctx) {
  constexpr i64 L = kVL<float>;
  const i64 numel = g.in_numel, nv = (numel + L - 1) / L;
  // Each tap's flat offset, weight index and lane masks (mask[(t * nv + v) * L + l]: -1
  // where position v * L + l exists and its tap reads inside the input, else 0).
  std::vector<i64> shift, widx, live;  // live: the taps that read inside for some position
  std::vector<int> mask;
  for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
    for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
      for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
        const i64 d[3] = {t0 * g.dil[0] - g.pad[0], t1 * g.dil[1] - g.pad[1], t2 * g.dil[2] - g.pad[2]};
        shift.push_back((d[0] * g.in[1] + d[1]) * g.in[2] + d[2]);
        widx.push_back((g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2] + g.wtap(2, t2));
        bool any = false;
        for (i64 p = 0; p < nv * L; ++p) {
          const i64 o[3] = {p / (g.in[1] * g.in[2]), p / g.in[2] % g.in[1], p % g.in[2]};
          bool inside = p < numel;
          for (std::size_t a = 0; a < 3; ++a) inside = inside && o[a] + d[a] >= 0 && o[a] + d[a] < g.in[a];
          mask.push_back(inside ? -1 : 0);
          any = any || inside;
        }
        if (any) live.push_back(static_cast<i64>(shift.size()) - 1);
      }
  walk_channel_blocks(g, widx, dw, ctx, [&] {
    return [&](i64 n, i64 k, VecF* ak) {
      const float* xp = x + (n * g.C + k / g.Kg) * numel;
      const float* dyp = dy + (n * g.K + k) * numel;
      VecF dv[kFlatMaxVectors];
      for (i64 v = 0; v < nv; ++v) dv[v] = loadn_part(dyp + v * L, 0, numel - v * L);
      // dy stays in registers, a tap's sum in one vector; a tap that reads only padding (a
      // filter wider than the plane) keeps its zero sum.
      for (const i64 t : live) {
        VecF a = ak[t];
        const float* xs = xp + shift[static_cast<std::size_t>(t)];
        const int* m = mask.data() + t * nv * L;
        for (i64 v = 0; v < nv; ++v) {
          vnati mv;
          std::memcpy(&mv, m + v * L, sizeof mv);
          a += loadn_masked(xs + v * L, mv) * dv[v];
        }
        ak[t] = a;
      }
    };
  });
}

/// Per output channel k: dw[k, tap] = sum over n and positions of dy * x shifted by the tap,
/// x through a zero-padded copy of its plane (walk_channel_blocks).
template <class T>
void grad_weights(const ConvGeometry& g, const T* x, T* dw, const T* dy, const ConvContext& ctx) {
  PlaneGeom pg = forward_geom(g);
  pg.finish<T>();
  const std::vector<Slot> slots = make_slots<T>(pg);
  std::vector<i64> toff, widx;
  make_taps(g, pg, false, toff, widx);
  const i64 nt = static_cast<i64>(toff.size());
  // Taps per pass, split evenly (25 taps: 9 + 8 + 8, not 12 + 12 + 1: a 1-tap pass is all loads).
  const i64 passes = (nt + kReduceMaxTaps - 1) / kReduceMaxTaps;
  const i64 tb = (nt + passes - 1) / passes;
  // 3x3 slices with vertical stride == dilation take the row-pair kernel.
  const bool rows_3x3 = pg.ker[1] == 3 && pg.ker[2] == 3 && pg.s[1] == pg.d[1];
  i64 hoff[3];  // horizontal taps' offsets, relative to the slice's first tap
  for (int t = 0; t < 3; ++t) hoff[t] = pg.tap_offset(0, 0, t) - pg.tap_offset(0, 0, 0);
  walk_channel_blocks(g, widx, dw, ctx, [&] {
    T* const buf = thread_buffer<T>(pg.plane).data();
    clear_buffer(pg, buf);
    // (image, input channel) of the plane of x in buf: the Kg consecutive channels k of one
    // input channel share it.
    return [&, buf, copied = std::array<i64, 2>{-1, -1}](i64 n, i64 k, Vec<T>* ak) mutable {
      const i64 c = k / g.Kg;
      if (copied != std::array<i64, 2>{n, c}) copy_plane(pg, x + (n * g.C + c) * g.in_numel, buf), copied = {n, c};
      const T* dyp = dy + (n * g.K + k) * g.out_numel;
      if (rows_3x3) {
        for (i64 t0 = 0; t0 < pg.ker[0]; ++t0)
          reduce_rows_3x3<T>(buf, pg, toff[static_cast<std::size_t>(t0 * 9)], hoff, dyp, ak + t0 * 9);
        return;
      }
      for (i64 t = 0; t < nt; t += tb)
        reduce_taps_n<T>(static_cast<int>(std::min<i64>(tb, nt - t)), buf, toff.data() + t, slots, dyp, ak + t);
    };
  });
}

// ---- entry --------------------------------------------------------------------------

template <class T>
void run_typed(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const ConvGeometry g(p);
  auto* x = static_cast<T*>(t.x);
  auto* w = static_cast<T*>(t.w);
  auto* y = static_cast<T*>(t.y);
  switch (p.direction) {
    case ConvDirection::forward: forward_or_grad_inputs<T>(g, x, w, y, false, t.epilogue, ctx); break;
    case ConvDirection::grad_inputs: forward_or_grad_inputs<T>(g, y, w, x, true, {}, ctx); break;
    case ConvDirection::grad_weights:
      if constexpr (std::is_same_v<T, float>)
        if (flat_planes(g)) {
          grad_weights_flat(g, x, w, y, ctx);
          break;
        }
      grad_weights<T>(g, x, w, y, ctx);
      break;
  }
}

}  // namespace

/// Entry point of this level's kernels (called by the algorithm class).
void depthwise_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  if (p.dtype == DType::float64) run_typed<double>(p, t, ctx);
  else run_typed<float>(p, t, ctx);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
