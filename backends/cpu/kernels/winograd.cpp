// "cpu.winograd": Winograd F(4x4, 3x3) for 2D 3x3 stride-1 convolutions and 3D kd x 3 x 3
// ones (the depth taps as channels, see Job), all three directions, float32
// (grad_weights: its own engine, at the end of this file).
//
// Why F(4x4, 3x3): it needs 36 multiplies per 16 outputs (4x fewer than direct; F(2x2)
// saves 2.25x) and its fp32 error is still small. Error bound, max |err| / max |ref|
// against the float64 reference on data uniform in [-1, 1): measured 4e-6 to 7e-6 with
// 2-64 input channels and 1.2e-5 with 256 (direct fp32 summation: about 1e-6); the tests
// allow 5e-5, the shared sweep 1e-3. F(6x6, 3x3) would lose about another 10x.
//
// grad_inputs is the forward convolution of dy with the filter rotated by 180 degrees and
// channel-transposed (per group), padded by 2 - pad (a negative pad is a crop: the tile
// loop only reads inside the source plane), so both directions share one engine.
//
// Engine, per task = (group, block of R tile rows spanning images):
//   1. input transform: each source row is copied zero-padded and split into its 4 column
//      phases, so the 6 taps of 16 neighbouring tiles are 6 contiguous vector loads; the
//      6x6 transform B^T d B runs on 16 tiles at once; V[e][ci][tile] (e = 36 positions).
//      Narrow images (tw <= 8) fill a vector with several tile rows side by side, their
//      taps gathered straight from the planes at the AVX-512 level (GatheredRows).
//   2. 36 GEMMs M_e = U_e V_e over channels, with a 6 x 64 register-blocked kernel; U (the
//      transformed filter) is packed for it once per run, or (one block: each filter chunk
//      used once) chunk by chunk in the task's slot, just before its GEMMs.
//   3. output transform A^T M A on 16 tiles at once, re-interleaved to rows and stored.
// Vectors are GCC vector extensions (16 floats): one AVX-512 register at the avx512 level,
// split by the compiler at the others. The algorithm class is in ../conv_winograd.cpp.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// Without AVX-512 (portable builds) GCC notes that passing 64-byte vectors by value has a
// different ABI; these helpers are all internal to this file, so that does not matter.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/sgemm.hpp"
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/thread_pool.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"
#include "backends/cpu/kernels/native_vec.hpp"
#include "backends/cpu/kernels/prefetch.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

using i64 = std::int64_t;
using v16 = float __attribute__((vector_size(64)));
using v16i = int __attribute__((vector_size(64)));
// Hot loops use the level's native vector (native_vec.hpp: kVL floats); the tile layout
// stays in blocks of 16 lanes, which kVL divides.

constexpr int kAlpha = 6;         // input tile 6x6
constexpr int kE = kAlpha * kAlpha;
constexpr int kMR = 6;            // GEMM register block: kMR output channels ...
#if CONVGRAPH_ISA_AVX512
constexpr int kNV = 4;            // ... times kNV vectors (64 tiles): 24 of 32 zmm registers
#else
// ... times one vector of 16 tiles: 12 ymm accumulators of 16, as sgemm's AVX2 6x16 block.
// (AVX-512's wider blocks would need 48 ymm registers: the spills made the GEMM 14x slower.)
constexpr int kNV = 1;
#endif
constexpr int kChunkKb = 4;       // output channels per GEMM + output-transform pass: 4 * kMR

inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

/// The same for 16 lanes (accumulate_filter_row's vectors of 16 input channels).
inline v16 load_part(const float* p, i64 lo, i64 hi) {
  if (lo <= 0 && hi >= 16) return load(p);  // whole vectors: one load
  alignas(64) float lanes[16];
  for (int c = 0; c < 16; c += kVL) storen(lanes + c, loadn_part(p + c, lo - c, hi - c));
  return load(lanes);
}

i64 round_up(i64 v, i64 m) { return (v + m - 1) / m * m; }
std::size_t align_bytes(std::size_t v) { return (v + 63) / 64 * 64; }

/// Per-thread scratch areas the workspace holds: one per hardware thread (or per
/// CONVGRAPH_THREADS, if larger), so workspace_bytes() depends on the problem and the
/// machine only, never on which pool a run gets.
int max_slots() {
  int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n = std::max(n, configured_thread_count());  // CONVGRAPH_THREADS, parsed in one place
  return std::clamp(n, 1, 64);
}

// ---------------------------------------------------------------------------------------
// The problem as a forward job: src (N, Cin, [Ds,] H, W) -> dst (N, Cout, [Dd,] OH, OW).
//
// 3D (kd x 3 x 3, any depth stride, dilation and padding): the depth taps are extra
// channels. GEMM channel ci = c * kd + t of image (n, depth m) is source channel c's plane
// at the depth tap t reads (a plane of padding when outside), so the engine sums over the
// taps as over channels, every direction unchanged. 2D is kd = Ds = Dd = 1.

struct Job {
  bool grad = false;  ///< grad_inputs: src = dy, dst = dx
  i64 N = 0, G = 1, Ci = 0, Co = 0;    ///< channels per group in (times kd) and out
  i64 H = 0, W = 0, OH = 0, OW = 0;
  i64 kd = 1, Ds = 1, Dd = 1;          ///< depth taps, source and destination depths
  i64 sd = 1, dd = 1, pd = 0;          ///< depth stride, dilation, front padding
  i64 pt = 0, pl = 0;                  ///< top/left padding (may be negative)
  i64 th = 0, tw = 0, rows = 0;        ///< tiles per column/row, tile rows N*Dd*th
  i64 R = 1, blocks = 1;               ///< tile rows per block, block count
  i64 tbp = 16, ts = 32;               ///< lanes per block (multiple of 16), V/M row stride
  i64 kop = 0;                         ///< Co rounded up to kMR
  i64 Q = 0;                           ///< phase-line length
  i64 ve = 0, me = 0;                  ///< plane strides of V [e][ci][ts] and M [e][co][ts]
  int slots = 1;
  /// One block (small images, small batch): each filter chunk is used by one task only, so
  /// the task transforms it into its slot (uc_off, e-stride uce) right before its GEMMs,
  /// instead of all of U up front: on resnet_3x3_7 (512 x 512 channels) U is 38 MB, written
  /// to memory and read back, about 40% of the run on AVX2.
  bool fused_filters = false;
  /// grad_inputs, fused: a task's filter chunk is a column slice of w (rows k, kMR *
  /// kChunkKb columns c), copied row by row into its slot (ws_off) before the gather. Read
  /// in place, every row's few columns were a cache and TLB miss per block of kMR columns,
  /// rows being a page apart on wide layers: resnet_3x3_7's grad inputs ran 25% longer than
  /// its forward on one thread (Intel Xeon), the filter gather stalled on those misses.
  bool slice_filters = false;
  // Workspace (float offsets).
  i64 u_off = 0, slot_off = 0, slot_size = 0, v_off = 0, m_off = 0, line_off = 0, uc_off = 0, uce = 0, ws_off = 0,
      total = 0;

  explicit Job(const ConvProblem& p) {
    grad = p.direction == ConvDirection::grad_inputs;
    N = p.N, G = p.G;
    const int a = p.ndim - 2;  // the height axis
    if (a == 1) {
      kd = p.kernel[0], sd = p.stride[0], dd = p.dilation[0], pd = p.pad_pre[0];
      Ds = grad ? p.out[0] : p.in[0], Dd = grad ? p.in[0] : p.out[0];
    }
    Ci = (grad ? p.Kg() : p.Cg()) * kd;
    Co = grad ? p.Cg() : p.Kg();
    H = grad ? p.out[a] : p.in[a], W = grad ? p.out[a + 1] : p.in[a + 1];
    OH = grad ? p.in[a] : p.out[a], OW = grad ? p.in[a + 1] : p.out[a + 1];
    pt = grad ? 2 - p.pad_pre[a] : p.pad_pre[a];
    pl = grad ? 2 - p.pad_pre[a + 1] : p.pad_pre[a + 1];
    th = (OH + 3) / 4, tw = (OW + 3) / 4, rows = N * Dd * th;
    slots = max_slots();
    kop = round_up(Co, kMR);
    Q = round_up(tw, 16) + 16;
    choose_block();
    layout();
    if (static_cast<std::size_t>(total) * sizeof(float) > p.workspace_limit && R > 1) {
      // Under a tight limit, the smallest blocks (one tile row) before declining.
      R = 1, blocks = rows, tbp = round_up(tw, 16);
      layout();
    }
  }

  /// The source plane of GEMM channel ci for image img (n * Dd + m) of group gr; nullptr
  /// for a plane of padding. forward: depth m * sd + t * dd - pd; grad_inputs: the output
  /// depth z with z * sd + t * dd - pd = m.
  const float* src_plane(const float* src, i64 img, i64 gr, i64 ci) const {
    const i64 n = img / Dd, m = img % Dd, c = ci / kd, t = ci % kd;
    i64 z = grad ? m + pd - t * dd : m * sd + t * dd - pd;
    if (grad) {
      if (z < 0 || z % sd != 0) return nullptr;
      z /= sd;
    }
    if (z < 0 || z >= Ds) return nullptr;
    return src + ((n * G + gr) * (Ci / kd) + c) * Ds * H * W + z * H * W;
  }
  /// Tile rows one transform vector holds side by side: several for narrow images (tw <=
  /// kVL / 2, see TapGroup), else 1.
  i64 side() const { return std::max<i64>(1, kVL / tw); }
  /// The destination plane of channel co for image img (for grad_weights: dy's plane).
  template <class T>
  T* dst_plane(T* dst, i64 img, i64 gr, i64 co) const {
    return dst + (((img / Dd) * G + gr) * Co + co) * Dd * OH * OW + (img % Dd) * OH * OW;
  }

  void layout() {
    ts = tbp + 16;  // one vector of slack: a tile row's last vector may spill past tbp
    u_off = 0;
    fused_filters = blocks == 1;
    const i64 u = fused_filters ? 0 : G * kE * kop * Ci;
    slot_off = static_cast<i64>(align_bytes(static_cast<std::size_t>(u) * 4) / 4);
    v_off = 0;
    // The 36 planes of V and of M are written (V) and read (M) together, one vector from
    // each: a plane stride that is a multiple of 4 KiB would put all 36 in one L1 set.
    ve = Ci * ts + 16, me = std::min<i64>(kop, kChunkKb * kMR) * ts + 16;
    m_off = static_cast<i64>(align_bytes(static_cast<std::size_t>(kE * ve) * 4) / 4);
    line_off = m_off + static_cast<i64>(align_bytes(static_cast<std::size_t>(kE * me) * 4) / 4);
    uc_off = line_off + static_cast<i64>(align_bytes(static_cast<std::size_t>((kAlpha + 2) * 4 * Q) * 4) / 4);
    uce = fused_filters ? std::min<i64>(kop, kChunkKb * kMR) * Ci + 16 : 0;  // + 16: off multiples of 4 KiB
    ws_off = uc_off + static_cast<i64>(align_bytes(static_cast<std::size_t>(kE * uce) * 4) / 4);
    slice_filters = fused_filters && grad;
    const i64 slice = slice_filters ? Ci * std::min<i64>(Co, kChunkKb * kMR) * 9 : 0;  // Ci counts the depth taps
    slot_size = ws_off + static_cast<i64>(align_bytes(static_cast<std::size_t>(slice) * 4) / 4);
    total = slot_off + slots * slot_size;
  }

  /// Tile rows per block: about `target` tiles (fewer for wide channels, so V and U_e stay
  /// cache-sized), with little lane padding and an even spread over the threads.
  void choose_block() {
    // 8192 / channels: V (36 x Ci x tiles) and M stay within L2 for narrow layers; at least
    // 64 tiles so the kernel's U_e loads are amortised for wide ones (measured on the
    // resnet/vgg 3x3 layers: 64-128 tiles beat both 32 and 256).
    const i64 target = std::clamp<i64>(8192 / std::max<i64>({Ci, Co, 1}), 64, 128);
    // A U over half the L3 comes from memory for every block (fused_filters aside): blocks
    // of at least 128 tiles, so each pass over it feeds more GEMM work. Zen 5, 2 threads,
    // 512 -> 512 channels (U 38 MB), forward: 64x7x7 images 22 ms in blocks of 32 tiles,
    // 18-20 in blocks of 128; 16x14x14 22 -> 19.5-20; 32x7x7 (one block) 11.6 -> 9-10.
    const bool u_streams = 2 * G * kE * kop * Ci * i64{sizeof(float)} > stream_l3_bytes();
    const i64 rmax = std::max<i64>(1, std::min(rows, (2 * target + tw - 1) / tw));
    const i64 rmin = std::max<i64>(1, std::min(rmax, (u_streams ? 128 : target / 2) / tw));
    double best = 1e300;
    for (i64 r = rmin; r <= rmax; ++r) {
      const i64 nb = (rows + r - 1) / r;
      const i64 waves = (G * nb + slots - 1) / slots;
      const double cost = static_cast<double>(waves) * static_cast<double>(round_up(r * tw, 16));
      if (cost < best * 0.999) best = cost, R = r;
    }
    blocks = (rows + R - 1) / R;
    tbp = round_up(R * tw, 16);
  }
};

// ---------------------------------------------------------------------------------------
// Filter transform: U = G g G^T, packed as U[gr][e][kb][ci][kMR].

/// G g for 3 taps (one column or row of the filter): G's rows are (1/4, 0, 0),
/// -(1, 1, 1)/6, -(1, -1, 1)/6, (1/24, 1/12, 1/6), (1/24, -1/12, 1/6), (0, 0, 1).
template <class V>
inline void g3(const V v[3], V o[6]) {
  const V s02 = v[0] + v[2];
  o[0] = v[0] * 0.25f;
  o[1] = (s02 + v[1]) * (-1.0f / 6);
  o[2] = (s02 - v[1]) * (-1.0f / 6);
  const V a = v[0] * (1.0f / 24) + v[2] * (1.0f / 6), b = v[1] * (1.0f / 12);
  o[3] = a + b;
  o[4] = a - b;
  o[5] = v[2];
}

/// kVL floats at base + offset[i] (i < kVL) where valid[i] is -1, zeros where it is 0: one
/// gather instruction per call at the AVX-512 level (kHasGather). Not at AVX2: qemu-user
/// 7.2, the portability test's Haswell, crashes on ymm gathers, and no AVX2-only machine
/// has timed them.
#if CONVGRAPH_ISA_AVX512
constexpr bool kHasGather = true;
struct GatherLanes {
  __m512i idx{};
  __mmask16 mask = 0;
  GatherLanes() = default;
  GatherLanes(const std::int32_t* offset, const std::int32_t* valid)
      : idx(_mm512_loadu_si512(offset)), mask(_mm512_movepi32_mask(_mm512_loadu_si512(valid))) {}
  explicit GatherLanes(const std::int32_t* offset) : idx(_mm512_loadu_si512(offset)), mask(0xffff) {}
  vnat load(const float* base) const { return load(base, mask); }
  /// The same under another lane mask (bit i: lane i).
  vnat load(const float* base, unsigned lanes) const {
    return reinterpret_cast<vnat>(
        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), static_cast<__mmask16>(lanes), idx, base, 4));
  }
};
#else
constexpr bool kHasGather = false;
struct GatherLanes {
  GatherLanes() = default;
  GatherLanes(const std::int32_t*, const std::int32_t*) {}
  explicit GatherLanes(const std::int32_t*) {}
  vnat load(const float*) const { return vnat{}; }
  vnat load(const float*, unsigned) const { return vnat{}; }
};
#endif
/// Whether the kernels gather: a level with gathers, on a CPU where they run at full speed
/// (not under Intel's Gather Data Sampling microcode: cpu_gathers_fast()).
inline bool use_gathers() { return kHasGather && cpu_gathers_fast(); }

/// Narrow images (tw <= kVL / 2) at a level with gathers: n tile rows side by side, lane
/// k * tw + q holding tile q of the k-th row, whose A x C taps (from the tile's origin
/// 4 * ty - pt, 4 * q - pl) are gathered straight from the planes under lane masks, zeros
/// for padding, rather than split into phase lines and copied into a TapGroup: on 8x8
/// images (s_cifar_64 forward) those copies were a third of the run. The lanes' offsets
/// are from the first row's plane; delta(k), the k-th row's plane minus that one, must be
/// the same for every channel (2-D planes; dy's planes in 3-D).
template <int A, int C>
struct GatheredRows {
  std::int32_t offset[kVL] = {};            ///< lane's tile origin from plane0
  unsigned row_ok[A] = {}, col_ok[C] = {};  ///< lanes whose tap row a / column c is inside
  i64 W = 0;
  template <class Delta, class TileRow>
  GatheredRows(i64 n, i64 tw, i64 H, i64 W, i64 pt, i64 pl, Delta&& delta, TileRow&& ty) : W(W) {
    for (i64 k = 0; k < n; ++k) {
      const i64 y0 = 4 * ty(k) - pt, d = delta(k);
      for (i64 q = 0; q < tw; ++q) {
        const i64 lane = k * tw + q, x0 = 4 * q - pl;
        offset[lane] = static_cast<std::int32_t>(d + y0 * W + x0);
        for (int a = 0; a < A; ++a) row_ok[a] |= (y0 + a >= 0 && y0 + a < H ? 1u : 0u) << lane;
        for (int c = 0; c < C; ++c) col_ok[c] |= (x0 + c >= 0 && x0 + c < W ? 1u : 0u) << lane;
      }
    }
  }
  /// The lanes' taps in the channel whose first row's plane is plane0: tap(a, c, ignored).
  auto taps(const float* plane0) const {
    return [this, lanes = GatherLanes(offset), plane0](int a, int c, i64) {
      return lanes.load(plane0 + a * W + c, row_ok[a] & col_ok[c]);
    };
  }
};

/// Where one group's filters are read: filter (k, c) (within the group; depth tap t) at
/// base + k * row + ((c - col0) * kd + t) * 9. The weights themselves, or (grad_inputs) a
/// copied column slice of them (Job::slice_filters).
struct FilterView {
  const float* base;
  i64 row, col0;
  bool copied = false;  ///< a slice just copied (in cache: nothing to prefetch)
};

FilterView group_filters(const ConvProblem& p, const Job& j, const float* w, i64 gr) {
  const i64 row = p.Cg() * j.kd * 9;
  return {w + gr * p.Kg() * row, row, 0};
}

/// Copies the columns [col0, col0 + ncols) of every filter row of group gr into slice
/// (rows packed), each row one contiguous run, the rows ahead prefetched.
FilterView copy_filter_slice(const ConvProblem& p, const Job& j, const float* w, i64 gr, i64 col0, i64 ncols,
                              float* slice) {
  const FilterView all = group_filters(p, j, w, gr);
  const float* src = all.base + col0 * j.kd * 9;  // row k's slice at src + k * all.row
  const i64 len = ncols * j.kd * 9, rows = p.Kg();
  constexpr i64 kAhead = 8;
  for (i64 k = 0; k < std::min(rows, kAhead); ++k) prefetch_span(src + k * all.row, len);
  for (i64 k = 0; k < rows; ++k) {
    if (k + kAhead < rows) prefetch_span(src + (k + kAhead) * all.row, len);
    std::memcpy(slice + k * len, src + k * all.row, static_cast<std::size_t>(len) * sizeof(float));
  }
  return {slice, len, col0, true};
}

/// Transforms the filters of group gr (read through f), output channels kb * kMR .. + kMR,
/// into their packed place: U_e's row block at dst + e * estride (its 16-channel chunk c0
/// at + c0 * kMR). stream: whole aligned vectors are stored past the caches (the caller
/// fences them).
void transform_filter_block(const ConvProblem& p, const Job& j, const FilterView& f, i64 kb, float* dst0,
                            i64 estride, bool stream) {
  const bool rot = p.flip != j.grad;  // grad_inputs uses the filter rotated by 180 degrees
  constexpr int kLanes = 16 * kMR;    // (ci, r) pairs of one chunk, in U's packed order
  // A chunk of 16 input channels is 96 filters stored contiguously in every U_e, so the
  // taps are read in that order, tap-major, transformed 16 filters per vector and stored as
  // whole vectors. They are read by GatherLanes' vector gathers where the level has them
  // (offset, valid: int32 offsets, so the view must span less than 2^31 floats), else
  // copied into g first, one scalar load and store each (the gathers took resnet_3x3_7's
  // grad inputs from 4.8 to 4.65 ms, Intel Xeon, 2 threads).
  const bool gather = use_gathers() && p.Kg() * f.row <= i64{INT32_MAX};
  alignas(64) float g[9][kLanes];
  alignas(64) std::int32_t offset[kLanes], valid[kLanes];
  // The next chunk's filters are asked for while this one is transformed (unless they are
  // a slice just copied): grad_inputs reads kMR columns of each of 16 rows k (far apart in w, which the hardware prefetchers
  // do not follow), forward 16 channels of each of kMR rows (the gathers hid those streams
  // from them: resnet_3x3_7 forward 4.4 -> 4.2 ms, Intel Xeon, 2 threads).
  const i64 co0 = kb * kMR, ncols = std::min<i64>(kMR, j.Co - co0);
  auto prefetch_rows = [&](i64 c0) {
    const i64 cc0 = c0 / j.kd, cc1 = std::min(c0 + 15, j.Ci - 1) / j.kd;
    if (j.grad) {
      for (i64 cc = cc0; cc <= cc1; ++cc)
        prefetch_span(f.base + cc * f.row + (co0 - f.col0) * j.kd * 9, ncols * j.kd * 9);
    } else {
      for (i64 co = co0; co < co0 + ncols; ++co)
        prefetch_span(f.base + co * f.row + (cc0 - f.col0) * j.kd * 9, (cc1 - cc0 + 1) * j.kd * 9);
    }
  };
  const bool prefetch = ncols > 0 && !f.copied;
  if (prefetch) prefetch_rows(0);
  for (i64 c0 = 0; c0 < j.Ci; c0 += 16) {
    const i64 cnt = std::min<i64>(16, j.Ci - c0);
    if (prefetch && c0 + 16 < j.Ci) prefetch_rows(c0 + 16);
    for (i64 l = 0; l < 16; ++l) {
      const i64 ci = c0 + l;
      // 3D: depth slice t (reversed when flipping, as the taps are on the other axes).
      const i64 cc = ci / j.kd, t = p.flip ? j.kd - 1 - ci % j.kd : ci % j.kd;
      for (int r = 0; r < kMR; ++r) {
        const i64 co = kb * kMR + r;
        const int lane = static_cast<int>(l) * kMR + r;
        const bool live = l < cnt && co < j.Co;
        // forward: filter (k = co, c = ci); grad_inputs: (k = ci, c = co).
        const i64 k = j.grad ? cc : co, c = j.grad ? co : cc;
        const i64 at = live ? k * f.row + ((c - f.col0) * j.kd + t) * 9 : 0;
        if (gather) {
          offset[lane] = static_cast<std::int32_t>(at), valid[lane] = live ? -1 : 0;
        } else {
          for (int tap = 0; tap < 9; ++tap) g[tap][lane] = live ? f.base[at + (rot ? 8 - tap : tap)] : 0.0f;
        }
      }
    }
    // In native vectors: 16-float ones spilled most of their 18 intermediates on AVX2.
    const i64 lanes = cnt * kMR;
    for (int v = 0; v * kVL < kLanes; ++v) {
      const GatherLanes gl = gather ? GatherLanes(offset + kVL * v, valid + kVL * v) : GatherLanes();
      auto tap = [&](int i) { return gather ? gl.load(f.base + (rot ? 8 - i : i)) : loadn(g[i] + kVL * v); };
      vnat t[3][6];  // t[b]: G applied to filter column b
      for (int b = 0; b < 3; ++b) {
        const vnat col[3] = {tap(b), tap(3 + b), tap(6 + b)};
        g3(col, t[b]);
      }
      for (int e0 = 0; e0 < 6; ++e0) {
        const vnat row[3] = {t[0][e0], t[1][e0], t[2][e0]};
        vnat u[6];
        g3(row, u);
        for (int e1 = 0; e1 < 6; ++e1) {
          float* dst = dst0 + (e0 * 6 + e1) * estride + c0 * kMR + kVL * v;
          if (kVL * (v + 1) <= lanes && stream && vector_aligned(dst)) {
            stream_storen(dst, u[e1]);
          } else if (kVL * (v + 1) <= lanes) {
            storen(dst, u[e1]);
          } else if (kVL * v < lanes) {
            alignas(64) float tmp[kVL];
            storen(tmp, u[e1]);
            std::memcpy(dst, tmp, static_cast<std::size_t>(lanes - kVL * v) * sizeof(float));
          }
        }
      }
    }
  }
}

/// All of U, packed as U[gr][e][kb][ci][kMR], one task per (group, kb). Streamed out: every
/// thread's GEMMs read all of U, so its lines sit in both cores' caches when the next run
/// rewrites them, and each plain store first takes the line back from the other core.
/// resnet_3x3_14 (9.4 MB of U, Zen 4 VM, 2 threads): 0.6-0.9 ms with plain stores, 2.5-3.6
/// in this VM's slow phases, 0.33-0.4 streamed in either; the GEMMs that read U back from
/// memory lose nothing measurable (3x3_56, 3x3_14, vgg layers).
void transform_filters(const ConvProblem& p, const Job& j, const float* w, float* U, ThreadPool* pool) {
  const i64 nkb = j.kop / kMR;
  auto body = [&](i64 t0, i64 t1) {
    for (i64 task = t0; task < t1; ++task) {
      const i64 gr = task / nkb, kb = task % nkb;
      transform_filter_block(p, j, group_filters(p, j, w, gr), kb, U + (gr * kE * nkb + kb) * j.Ci * kMR,
                             nkb * j.Ci * kMR, true);
    }
    _mm_sfence();
  };
  const i64 n = j.G * nkb;
  if (pool) pool->parallel_for(n, body, 1);
  else body(0, n);
}

// ---------------------------------------------------------------------------------------
// Input transform of one tile row of one channel: V[e][ci][base + tx].

/// Splits the zero-padded source row (width W) into its 4 column phases:
/// ph[p*Q + q] = row[4q + p - pl]. 4 * kVL source columns at a time; only chunks that
/// overlap the row's ends go through a zero-padded copy.
void phase_line(const float* row, i64 W, i64 pl, const Job& j, float* ph) {
  constexpr int H = kVL / 2;
  // (a, b) -> phase 0 of a then of b in m01's halves, phase 1 in its other halves; then the
  // low and high halves of two such vectors make whole phases.
  constexpr vnati m01 = lane_mask([](int i) { return i < H ? 4 * i : 4 * (i - H) + 1; });
  constexpr vnati m23 = lane_mask([](int i) { return i < H ? 4 * i + 2 : 4 * (i - H) + 3; });
  constexpr vnati lo = lane_mask([](int i) { return i < H ? i : kVL + i - H; });
  constexpr vnati hi = lane_mask([](int i) { return i < H ? H + i : kVL + i; });
  // Rows are read top to bottom, each plane for a few tile rows only: too short a run for
  // the hardware prefetcher, so fetch the row four below (the next tile row's) now.
  for (i64 x = 0; x < W; x += 16) __builtin_prefetch(row + 4 * W + x);
  // Lanes tx < tw read phases up to q = tw; later q stay as zeroed at slot start.
  for (i64 q = 0; q <= j.tw; q += kVL) {
    const i64 x0 = 4 * q - pl;  // source column of this chunk's first value
    vnat a[4];
    if (x0 >= 0 && x0 + 4 * kVL <= W) {
      for (int v = 0; v < 4; ++v) a[v] = loadn(row + x0 + kVL * v);
    } else {  // a chunk over the row's ends: zeros outside the row
      for (int v = 0; v < 4; ++v) a[v] = loadn_part(row + x0 + kVL * v, -x0 - kVL * v, W - x0 - kVL * v);
    }
    const vnat e01 = shufn(a[0], a[1], m01), e23 = shufn(a[2], a[3], m01);
    const vnat f01 = shufn(a[0], a[1], m23), f23 = shufn(a[2], a[3], m23);
    storen(ph + 0 * j.Q + q, shufn(e01, e23, lo));
    storen(ph + 1 * j.Q + q, shufn(e01, e23, hi));
    storen(ph + 2 * j.Q + q, shufn(f01, f23, lo));
    storen(ph + 3 * j.Q + q, shufn(f01, f23, hi));
  }
}

/// d -> B^T d for 6 values (the row of B^T applied along one axis).
template <class V>
inline void bt6(const V d[6], V o[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
  o[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
  o[3] = (d[4] - d[2]) + 2.0f * (d[3] - d[1]);
  o[4] = (d[4] - d[2]) - 2.0f * (d[3] - d[1]);
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

/// Phase lines of the last source rows seen, in slot y mod 6: consecutive tile rows share
/// two of their six rows.
struct LineCache {
  float* lines = nullptr;          ///< kAlpha lines of 4*Q floats
  const float* zeros = nullptr;    ///< the phase line of a padding row
  const float* plane[kAlpha] = {};  ///< which plane and row each slot holds
  i64 row[kAlpha] = {};

  const float* get(const float* pl, i64 y, const Job& j) {
    if (pl == nullptr || y < 0 || y >= j.H) return zeros;
    const auto slot = static_cast<std::size_t>(y % kAlpha);
    float* ph = lines + static_cast<i64>(slot) * 4 * j.Q;
    if (plane[slot] != pl || row[slot] != y) {
      phase_line(pl + y * j.W, j.W, j.pl, j, ph);
      plane[slot] = pl, row[slot] = y;
    }
    return ph;
  }
};

/// The 36 input taps of one tile row as lane-contiguous lines: tap[i][c] + tx is row i,
/// column tap c of tile tx (pointers into the cached phase lines).
void input_taps(const float* plane, const Job& j, i64 ty, LineCache& cache, const float* tap[kAlpha][6]) {
  for (int i = 0; i < kAlpha; ++i) {
    const float* ph = cache.get(plane, 4 * ty - j.pt + i, j);
    for (int c = 0; c < 6; ++c) tap[i][c] = ph + (c % 4) * j.Q + c / 4;
  }
}

/// V[e][base + tx] = (B^T d B)[e] for the tiles tx in [0, lanes); tap(i, c, tx) loads
/// their taps in row i, column c.
template <class Tap>
void input_transform(Tap&& tap, i64 lanes, float* V, i64 vstride, i64 base) {
  for (i64 tx = 0; tx < lanes; tx += kVL) {
    vnat h[kAlpha][kAlpha];  // h[i][s]: row i after the horizontal transform
    for (int i = 0; i < kAlpha; ++i) {
      vnat d[6];
      for (int c = 0; c < 6; ++c) d[c] = tap(i, c, tx);
      bt6(d, h[i]);
    }
    for (int s = 0; s < kAlpha; ++s) {
      vnat d[6], o[6];
      for (int i = 0; i < 6; ++i) d[i] = h[i][s];
      bt6(d, o);
      for (int r = 0; r < 6; ++r) storen(V + (r * 6 + s) * vstride + base + tx, o[r]);
    }
  }
}

/// A transform's tap loader over lane-contiguous tap lines: tap(i, c, tx) loads lanes tx ..
/// of line tap[i][c].
template <int C>
auto tap_lines(const float* const (*tap)[C]) {
  return [tap](int i, int c, i64 tx) { return loadn(tap[i][c] + tx); };
}

/// Taps of several tile rows side by side (narrow images: tw < kVL), so one transform
/// vector holds whole tile rows instead of one row's tw tiles: lane k * tw + q is tile q
/// of the k-th row, which is where V and D keep it. Each row's taps are copied in as it
/// is read (the line caches hold one row's lines at a time).
template <int A, int C>
struct TapGroup {
  alignas(64) float line[A][C][kVL] = {};
  const float* tap[A][C];
  TapGroup() {
    for (int a = 0; a < A; ++a)
      for (int c = 0; c < C; ++c) tap[a][c] = line[a][c];
  }
  void add(const float* const row_tap[A][C], i64 k, i64 tw) {
    for (int a = 0; a < A; ++a)
      for (int c = 0; c < C; ++c)
        storen_first(line[a][c] + k * tw, loadn_part(row_tap[a][c], 0, tw), static_cast<int>(tw));
  }
  /// Zeros the lanes from row k on (a last, partial group: no stale taps in its spare lanes).
  void clear_from(i64 k, i64 tw) {
    for (int a = 0; a < A; ++a)
      for (int c = 0; c < C; ++c) std::fill(line[a][c] + k * tw, line[a][c] + kVL, 0.0f);
  }
};

/// Transforms tile rows [r0, r1) of one plane (lanes from (r - r0) * tw): taps(r, tap)
/// gives a row's taps, transform(tap, lanes, base) transforms lanes [base, base + lanes).
/// One transform per row, or per `group` rows side by side in `grp` (narrow images).
template <int A, int C, class Taps, class Transform>
void transform_rows(const Job& j, i64 group, i64 r0, i64 r1, TapGroup<A, C>& grp, Taps&& taps, Transform&& transform) {
  for (i64 r = r0; r < r1; r += group) {
    const i64 rows = std::min(group, r1 - r), base = (r - r0) * j.tw;
    for (i64 k = 0; k < rows; ++k) {
      const float* tap[A][C];
      taps(r + k, tap);
      if (group == 1) transform(tap, j.tw, base);
      else grp.add(tap, k, j.tw);
    }
    if (group > 1) {
      if (rows < group) grp.clear_from(rows, j.tw);
      transform(grp.tap, rows * j.tw, base);
    }
  }
}

// ---------------------------------------------------------------------------------------
// GEMM: M_e[co][t] = sum_ci U_e[co][ci] V_e[ci][t], kMR x (nv*16) register block.

// NB consecutive packed row blocks (NB * kMR output channels) times NV vectors of tiles:
// narrow tile blocks (small images) take more rows so there are always >= 18 accumulators.
template <int NB, int NV>
inline void kernel(i64 Ci, const float* __restrict u, const float* __restrict v, i64 ts, float* __restrict m) {
  constexpr int NC = NV * 16 / kVL;  // native vectors per row of the block
  vnat acc[NB * kMR][NC];
  for (int r = 0; r < NB * kMR; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = vnat{};
  const i64 ub = Ci * kMR;  // stride between packed row blocks
  for (i64 ci = 0; ci < Ci; ++ci) {
    vnat b[NC];
    for (int c = 0; c < NC; ++c) std::memcpy(&b[c], v + ci * ts + kVL * c, sizeof(vnat));
#pragma GCC unroll 24
    for (int r = 0; r < NB * kMR; ++r) {
      const float a = u[(r / kMR) * ub + ci * kMR + r % kMR];
      for (int c = 0; c < NC; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < NB * kMR; ++r)
    for (int c = 0; c < NC; ++c) std::memcpy(m + r * ts + kVL * c, &acc[r][c], sizeof(vnat));
}

template <int NB>
void gemm_cols(const Job& j, const float* u, const float* Ve, float* m, i64 nvec) {
  i64 v = 0;
  if constexpr (NB == 1) {
    for (; v + kNV <= nvec; v += kNV) kernel<1, kNV>(j.Ci, u, Ve + 16 * v, j.ts, m + 16 * v);
    if constexpr (kNV > 1) {
      if (nvec - v == 3) kernel<1, 3>(j.Ci, u, Ve + 16 * v, j.ts, m + 16 * v);
      if (nvec - v == 2) kernel<1, 2>(j.Ci, u, Ve + 16 * v, j.ts, m + 16 * v);
      if (nvec - v == 1) kernel<1, 1>(j.Ci, u, Ve + 16 * v, j.ts, m + 16 * v);
    }
  } else {
    constexpr int NV = NB == 2 ? 2 : 1;  // gemm_e picks NB so that nvec == NV here
    kernel<NB, NV>(j.Ci, u, Ve, j.ts, m);
  }
}

/// Row blocks [kb0, kb1) of M_e; M_e's row 0 is output channel kb0 * kMR, and Ue points at
/// U_e's row block kb0.
void gemm_e(const Job& j, const float* Ue, const float* Ve, float* Me, i64 kb0, i64 kb1) {
  const i64 nvec = j.tbp / 16;
  // Narrow tile blocks take more rows, where the registers allow (AVX-512 only).
  const int nb = kNV == 1 || nvec >= 3 ? 1 : nvec == 2 ? 2 : 4;
  i64 kb = kb0;
  auto at = [&](i64 b, auto tag) {
    constexpr int NB = decltype(tag)::value;
    gemm_cols<NB>(j, Ue + (b - kb0) * j.Ci * kMR, Ve, Me + (b - kb0) * kMR * j.ts, nvec);
  };
  if (nb == 4)
    for (; kb + 4 <= kb1; kb += 4) at(kb, std::integral_constant<int, 4>{});
  if (nb >= 2)
    for (; kb + 2 <= kb1; kb += 2) at(kb, std::integral_constant<int, 2>{});
  for (; kb < kb1; ++kb) at(kb, std::integral_constant<int, 1>{});
}

// ---------------------------------------------------------------------------------------
// Output transform of one tile row of one output channel.

/// m -> A^T m for 6 values.
template <class V>
inline void at6(const V m[6], V o[4]) {
  const V s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
  o[0] = m[0] + s12 + s34;
  o[1] = d12 + 2.0f * d34;
  o[2] = s12 + 4.0f * s34;
  o[3] = d12 + 8.0f * d34 + m[5];
}

/// The output transform of the kVL tiles at lanes [at, at + kVL) of M: out[a][0..3], laid
/// end to end, is their output row a in column order (tile lane t's four columns at 4t ..
/// 4t + 3).
inline void output_vectors(const float* M, i64 mstride, i64 at, vnat out[4][4]) {
  constexpr int H = kVL / 2;
  // Interleave lanes of (a, b), then pairs of lanes: output column 4*tx + b is o[b] lane tx.
  constexpr vnati p_lo = lane_mask([](int i) { return i / 2 + (i % 2 ? kVL : 0); });
  constexpr vnati p_hi = lane_mask([](int i) { return H + i / 2 + (i % 2 ? kVL : 0); });
  constexpr vnati q_lo = lane_mask([](int i) { return i / 4 * 2 + i % 2 + (i % 4 >= 2 ? kVL : 0); });
  constexpr vnati q_hi = lane_mask([](int i) { return H + i / 4 * 2 + i % 2 + (i % 4 >= 2 ? kVL : 0); });
  vnat t[4][6];  // after the vertical transform
  for (int s = 0; s < 6; ++s) {
    vnat m[6], o[4];
    for (int r = 0; r < 6; ++r) m[r] = loadn(M + (r * 6 + s) * mstride + at);
    at6(m, o);
    for (int a = 0; a < 4; ++a) t[a][s] = o[a];
  }
  for (int a = 0; a < 4; ++a) {
    vnat o[4];
    at6(t[a], o);
    const vnat p0 = shufn(o[0], o[1], p_lo), p1 = shufn(o[0], o[1], p_hi);
    const vnat q0 = shufn(o[2], o[3], p_lo), q1 = shufn(o[2], o[3], p_hi);
    out[a][0] = shufn(p0, q0, q_lo), out[a][1] = shufn(p0, q0, q_hi);
    out[a][2] = shufn(p1, q1, q_lo), out[a][3] = shufn(p1, q1, q_hi);
  }
}

/// Stores columns [0, cols) of one output row's vectors (cols <= 4 * kVL) at dst. stream:
/// where dst is vector-aligned, its whole vectors go past the caches (the caller fences them).
inline void store_output_row(const vnat out[4], i64 cols, float* dst, bool stream) {
  int v = 0;
  if (stream && vector_aligned(dst))
    for (; v < 4 && kVL * (v + 1) <= cols; ++v) stream_storen(dst + kVL * v, out[v]);
  for (; v < 4 && kVL * (v + 1) <= cols; ++v) storen(dst + kVL * v, out[v]);
  if (v < 4 && kVL * v < cols) storen_first(dst + kVL * v, out[v], static_cast<int>(cols - kVL * v));
}

/// Tile row ty of one output channel, its tiles at lanes base .. base + tw of M, into plane.
void output_row(const float* M, i64 mstride, i64 base, const Job& j, i64 ty, float* plane, bool stream) {
  const i64 rows = std::min<i64>(4, j.OH - 4 * ty);
  for (i64 tx = 0; tx < j.tw; tx += kVL) {
    vnat out[4][4];
    output_vectors(M, mstride, base + tx, out);
    const i64 x0 = 4 * tx, cols = std::min<i64>(4 * kVL, j.OW - x0);
    for (i64 a = 0; a < rows; ++a) store_output_row(out[a], cols, plane + (4 * ty + a) * j.OW + x0, stream);
  }
}

/// Narrow images (tw <= kVL / 2): n tile rows side by side, row k's tiles at lanes
/// base + k * tw .. + tw of M (as V keeps them), transformed by one output_vectors; row k's
/// columns are then lanes 4 * k * tw .. of each transformed row. plane(k) is its channel
/// plane, ty(k) its tile row there.
template <class Plane, class TileRow>
void output_rows_side_by_side(const float* M, i64 mstride, i64 base, const Job& j, i64 n, Plane&& plane,
                              TileRow&& ty) {
  vnat out[4][4];
  output_vectors(M, mstride, base, out);
  // Row k's columns [0, OW) are lanes s .. s + OW of out[a] laid end to end (s = 4 k tw):
  // each vector they overlap is stored under a lane mask, straight from the register (a
  // copy through memory cost a store-forwarding stall per row read back from it).
  for (int a = 0; a < 4; ++a) {
    for (i64 k = 0; k < n; ++k) {
      const i64 y = 4 * ty(k) + a;
      if (y >= j.OH) continue;
      float* dst = plane(k) + y * j.OW;
      const i64 s = 4 * k * j.tw;
      for (i64 v = s / kVL; v * kVL < s + j.OW; ++v)
        storen_part(dst + (v * kVL - s), out[a][v], s - v * kVL, s + j.OW - v * kVL);
    }
  }
}

// ---------------------------------------------------------------------------------------

void run_winograd(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const Job j(p);
  if (ctx.workspace == nullptr || ctx.workspace_bytes < static_cast<std::size_t>(j.total) * sizeof(float))
    throw MemoryError(msg("cpu.winograd: workspace of ", ctx.workspace_bytes, " bytes, need ",
                          static_cast<std::size_t>(j.total) * sizeof(float), " for ", p.key()));
  float* ws = static_cast<float*>(ctx.workspace);
  const float* src = static_cast<const float*>(j.grad ? t.y : t.x);
  float* dst = static_cast<float*>(j.grad ? t.x : t.y);
  float* U = ws + j.u_off;
  ThreadPool* pool = ctx.pool;
  const auto* w = static_cast<const float*>(t.w);
  if (!j.fused_filters) transform_filters(p, j, w, U, pool);

  // Few blocks (small batch and image): also split the output channels over tasks, each
  // repeating its block's input transform, so every thread has work.
  const i64 nchunks = (j.kop / kMR + kChunkKb - 1) / kChunkKb;
  const i64 parts = std::clamp<i64>((j.slots + j.G * j.blocks - 1) / (j.G * j.blocks), 1, nchunks);
  const i64 per_part = (nchunks + parts - 1) / parts;  // kb chunks per task
  const i64 ntasks = j.G * j.blocks * parts;
  const i64 used = std::min<i64>({j.slots, ntasks, pool ? pool->size() : 1});
  // 1. input transform of channels [c0, c1) of block blk, group gr, into V.
  // Narrow images (tw <= kVL / 2) transform `side` tile rows side by side, one vector for
  // all (TapGroup, output_rows_side_by_side), rather than one vector of tw useful lanes
  // per row: 8x8 images (tw = 2) used 2 of 16 lanes.
  const i64 side = j.side();
  // Gathered taps (GatheredRows): where every tile row's source plane is real (2-D, or one
  // depth tap that never lands in the depth padding: a padding plane has no pointer to
  // gather from), with offsets within int32.
  bool gathered = use_gathers() && side > 1 && j.kd == 1 && j.N * j.G * j.Ci * j.Ds * j.H * j.W <= i64{INT32_MAX};
  for (i64 m = 0; gathered && m < j.Dd; ++m) gathered = j.src_plane(src, m, 0, 0) != nullptr;
  auto transform_inputs = [&](LineCache& cache, i64 gr, i64 blk, i64 c0, i64 c1, float* V) {
    const i64 r0 = blk * j.R, r1 = std::min(j.rows, r0 + j.R);
    if (gathered) {  // each group's lanes once, then its taps channel by channel
      for (i64 r = r0; r < r1; r += side) {
        const float* first = j.src_plane(src, r / j.th, gr, 0);
        const GatheredRows<kAlpha, 6> rows(
            std::min(side, r1 - r), j.tw, j.H, j.W, j.pt, j.pl,
            [&](i64 k) { return j.src_plane(src, (r + k) / j.th, gr, 0) - first; }, [&](i64 k) { return (r + k) % j.th; });
        for (i64 ci = c0; ci < c1; ++ci) {
          const float* plane0 = j.src_plane(src, r / j.th, gr, ci);
          input_transform(rows.taps(plane0), kVL, V + ci * j.ts, j.ve, (r - r0) * j.tw);
        }
      }
      return;
    }
    TapGroup<kAlpha, 6> group;
    for (i64 ci = c0; ci < c1; ++ci) {
      std::fill(std::begin(cache.plane), std::end(cache.plane), nullptr);
      float* Vc = V + ci * j.ts;
      transform_rows(
          j, side, r0, r1, group,
          [&](i64 r, const float* tap[kAlpha][6]) {
            input_taps(j.src_plane(src, r / j.th, gr, ci), j, r % j.th, cache, tap);
          },
          [&](const float* const tap[kAlpha][6], i64 lanes, i64 base) {
            input_transform(tap_lines(tap), lanes, Vc, j.ve, base);
          });
    }
  };
  // One block split into parts: the parts share one input transform, in slot 0's V, done
  // first in parallel over the channels, instead of each part repeating all of it
  // (resnet_3x3_7 on 2 threads: a fifth of each thread's time).
  const bool shared_v = j.G * j.blocks == 1 && parts > 1 && used > 1;
  float* V0 = ws + j.slot_off + j.v_off;
  if (shared_v) {
    const i64 live = std::min(j.rows, j.R) * j.tw;  // lanes past it go through the GEMM: keep them 0
    pool->parallel_for(used, [&](i64 s0, i64 s1) {
      for (i64 slot = s0; slot < s1; ++slot) {
        float* S = ws + j.slot_off + slot * j.slot_size;
        std::memset(S + j.line_off, 0, static_cast<std::size_t>(j.uc_off - j.line_off) * sizeof(float));
        LineCache cache;
        cache.lines = S + j.line_off;
        cache.zeros = cache.lines + kAlpha * 4 * j.Q;
        const i64 c0 = j.Ci * slot / used, c1 = j.Ci * (slot + 1) / used;
        for (int e = 0; e < kE; ++e)
          for (i64 ci = c0; ci < c1; ++ci) std::fill_n(V0 + e * j.ve + ci * j.ts + live, j.ts - live, 0.0f);
        transform_inputs(cache, 0, 0, c0, c1, V0);
      }
    }, 1);
  }
  // A large destination (stream_destination) is streamed past the caches row by row
  // (vgg_3x3_112 forward 12.6 -> 11.45 ms, Zen 4, 2 threads). Not with an epilogue, which
  // reads the rows back.
  const bool stream_dst = (j.grad || t.epilogue.empty()) &&
                          stream_destination(j.N * j.G * j.Co * j.Dd * j.OH * j.OW * i64{sizeof(float)});
  std::atomic<i64> next{0};
  auto slot_body = [&](i64 s0, i64 s1) {
    for (i64 slot = s0; slot < s1; ++slot) {
      float* S = ws + j.slot_off + slot * j.slot_size;
      float* V = shared_v ? V0 : S + j.v_off;
      float* M = S + j.m_off;
      LineCache cache;
      cache.lines = S + j.line_off;
      cache.zeros = cache.lines + kAlpha * 4 * j.Q;
      float* Uc = S + j.uc_off;
      // Zero V and M once: lanes past a block's last tile go through the GEMM and the
      // output transform but are never stored; zeros keep them finite. (Uc is written whole
      // before every use; a shared V is ready.)
      const i64 z0 = shared_v ? j.m_off : 0;
      std::memset(S + z0, 0, static_cast<std::size_t>(j.uc_off - z0) * sizeof(float));
      for (i64 task = next.fetch_add(1); task < ntasks; task = next.fetch_add(1)) {
        const i64 part = task % parts, gr = task / parts / j.blocks, blk = task / parts % j.blocks;
        const i64 r0 = blk * j.R, r1 = std::min(j.rows, r0 + j.R);
        if (!shared_v) transform_inputs(cache, gr, blk, 0, j.Ci, V);
        // 2. + 3. per chunk of output channels: the 36 GEMMs, then the output transform
        // while that chunk of M is still in cache.
        const i64 nkb = std::min(j.kop / kMR, (part + 1) * per_part * kChunkKb);
        for (i64 kb0 = part * per_part * kChunkKb; kb0 < nkb; kb0 += kChunkKb) {
          const i64 kb1 = std::min(nkb, kb0 + kChunkKb);
          if (j.fused_filters) {
            const i64 col0 = kb0 * kMR, ncols = std::min(j.Co, kb1 * kMR) - col0;
            const FilterView f = j.slice_filters ? copy_filter_slice(p, j, w, gr, col0, ncols, S + j.ws_off)
                                                 : group_filters(p, j, w, gr);
            for (i64 kb = kb0; kb < kb1; ++kb)
              transform_filter_block(p, j, f, kb, Uc + (kb - kb0) * j.Ci * kMR, j.uce, false);
            for (int e = 0; e < kE; ++e) gemm_e(j, Uc + e * j.uce, V + e * j.ve, M + e * j.me, kb0, kb1);
          } else {
            for (int e = 0; e < kE; ++e)
              gemm_e(j, U + (gr * kE + e) * j.kop * j.Ci + kb0 * j.Ci * kMR, V + e * j.ve, M + e * j.me, kb0, kb1);
          }
          for (i64 co = kb0 * kMR; co < std::min(j.Co, kb1 * kMR); ++co) {
            const float* Mc = M + (co - kb0 * kMR) * j.ts;
            auto plane = [&](i64 r) { return j.dst_plane(dst, r / j.th, gr, co); };
            for (i64 r = r0; r < r1; r += side) {
              const i64 n = std::min(side, r1 - r);
              if (side == 1) {
                output_row(Mc, j.me, (r - r0) * j.tw, j, r % j.th, plane(r), stream_dst);
              } else {
                output_rows_side_by_side(
                    Mc, j.me, (r - r0) * j.tw, j, n, [&](i64 k) { return plane(r + k); },
                    [&](i64 k) { return (r + k) % j.th; });
              }
              if (!j.grad && !t.epilogue.empty())  // the fused epilogue on the rows just written
                for (i64 k = 0; k < n; ++k) {
                  const i64 ty = (r + k) % j.th, y0 = 4 * ty * j.OW, len = std::min<i64>(4, j.OH - 4 * ty) * j.OW;
                  float* pl = plane(r + k);
                  conv_epilogue_run(t.epilogue, pl + y0, (pl - dst) + y0, gr * j.Co + co, len);
                }
            }
          }
        }
      }
    }
    if (stream_dst) _mm_sfence();
  };
  if (pool && used > 1) pool->parallel_for(used, slot_body, 1);
  else slot_body(0, 1);
}

// ---------------------------------------------------------------------------------------
// grad_weights. A tile's forward output A^T [(G g G^T) . V] A is linear in the filter g, so
// its transpose gives dg = G^T [V . (A dY A^T)] G per tile: the input tiles transform as in
// forward (V, 6x6), the output-gradient tiles by A . A^T (D: 4x4 -> 6x6, with zeros past
// the output's edges), and the products are summed over every tile of the batch in the
// transform domain, S_e = D_e V_e^T (36 GEMMs, output channels x input channels, reducing
// over tiles), before one inverse transform per filter. Tiles go in chunks of whole tile
// rows; each chunk's 36 x G GEMMs run one per thread (single-threaded sgemm, each with its
// own S_e), so the result does not depend on the thread count.
//
// The GEMMs reduce over tiles, so V is transformed a vector of input channels at a time
// (from source rows transposed in registers) into the GEMM's op(B) row order, which its
// packing only copies; tile-vectorised V had to be transposed by sgemm's packing, once per
// output-channel block (Zen 4, 1 thread, with the prefetch in phase_line: resnet_3x3_14
// 10.6 -> 9.5 ms, vgg_3x3_56 57.8 -> 53.3, resnet_3x3_56 8.4 -> 7.5).
//
// F(4x4, 3x3) here too, for speed: F(2x2, 3x3) would do 1.8x the GEMM work (16 products
// per 4 outputs against 36 per 16). Its error, max |err| / max |ref| against the float64
// reference on data uniform in [-1, 1), simulated with float32 transforms and sequential
// float32 sums over the tiles (as a GEMM's K loop), on the standard 3x3 layers at full
// batch: F(4x4) 5e-6 (resnet_3x3_7) to 3.3e-5 (vgg_3x3_112, 3136 tiles a sum); F(2x2)
// 4e-7 to 6e-6; direct float32 sums 8e-7 to 6e-6. So F(4x4) costs about 6x the error of
// a direct sum (as in forward), still 30x inside the sweep's 1e-3. This engine (sgemm's
// blocked sums) measured 5.6e-6 on the test's 8x32x28x28 layer (5e-5 bound), 3.3e-6 at most
// over the shared sweep.

/// V and D of one chunk of tiles stay within two L2s (read at run time), so the 36 GEMMs
/// pack them from the caches the transforms just wrote, but a chunk holds at least
/// kGwMinTiles tiles: shorter GEMM depths spend their time loading and storing S_e.
/// (Zen 4, 2 threads, against 16 MiB L3-sized chunks: c3d_conv2 110 -> 84 ms, vgg_3x3_112
/// 21.1 -> 17.5, resnet_3x3_28 5.7 -> 4.6; vgg_3x3_56 and resnet_3x3_14/7 unchanged.)
i64 gw_chunk_bytes() {
  static const i64 bytes = 2 * cpu_cache_sizes().l2;
  return bytes;
}
constexpr i64 kGwMinTiles = 128;

constexpr i64 kMaxVL = 16;  ///< the widest level's lanes (AVX-512)

struct GwPlan {
  i64 R = 1;           ///< tile rows per chunk
  i64 group = 1;       ///< tile rows per D transform vector (narrow images, tw < kVL)
  i64 ld = 0;          ///< lanes per channel row of D_e
  /// V is channel-vectorised: V [g][e][ci / kVL][tile][kVL], panels of kVL input channels
  /// (zero lanes past Ci), the GEMM's op(B) row by row, so its packing is a copy.
  i64 ncb = 0, vp = 0;  ///< channel panels, panel stride
  i64 ve = 0, de = 0;   ///< plane strides of V and of D [g][e][co][ld]
  i64 wp = 0;           ///< columns of a transposed source row (every tap of every tile)
  /// One chunk (all tiles at once): S is never whole. A task takes a block of cb output x
  /// ib input channels and, a row e0 of the 6x6 domain at a time, runs its 6 GEMMs into its
  /// slot's S row [e1][cb][ib] and adds the row's share of the inverse transform to the
  /// block's filters (accumulate_filter_row), from cache: S is 4x the filter, so writing it
  /// all and reading it back cost resnet_3x3_7 (512 x 512 channels, 32 tiles) as much time
  /// as its GEMMs. The block's whole S (590 KB) cost more where the VM's slow phases left
  /// less of L2 (2 threads, Zen 4 VM, ms, fast / slow phase: resnet_3x3_14 4.3 / 6.6-6.9
  /// -> 4.2 / 5.5-6.2, resnet_3x3_7 5.6 / 8.2-8.7 -> 5.4 / 6.2-6.4).
  bool fused = false;
  static constexpr i64 kBlock = 64;  ///< cb, ib: a 98 KB S row and 147 KB of filters
  i64 cb = 0, ib = 0, nco = 0, nci = 0;  ///< block sizes and counts per group
  i64 es = 0;                            ///< S row's e1 stride: + 16 floats, off a multiple of 4 KiB
  i64 s_block = 0, acc_off = 0;          ///< floats of one slot's S row and filters; the filters' offset
  // Workspace (float offsets): S [g][e][co][ci] (fused: per slot an S row and a block's
  // filters), V, D, then per slot: dy's phase lines and 6 transposed source rows. Sliced:
  // all of that once per slice (slice_size floats apart; a slice's lines are its one slot's).
  i64 v_off = 0, d_off = 0, line_off = 0, rows_off = 0, line_size = 0, total = 0;

  /// Sliced (several chunks, at most kMaxSlices hardware threads): chunk c belongs to slice
  /// c mod slices, which has its own S, V, D and scratch lines, and one thread runs a slice
  /// from its transforms through its GEMMs. So every chunk's V and D are read by the core
  /// that wrote them: with the shared V and D (a transform task per channel, a GEMM task per
  /// e), half of them cross to the other core, which cost 2x (vgg_3x3_112 16 -> 35 ms) when
  /// a VM's two vCPUs sat on cores without a shared L3. The slices' S are summed in slice
  /// order, so results do not depend on the pool size. Offsets below are then per slice.
  static constexpr i64 kMaxSlices = 8;
  i64 slices = 1, slice_size = 0;  ///< slices > 1: sliced
  bool sliced() const { return slices > 1; }

  GwPlan(const ConvProblem& p, const Job& j) {
    ncb = (j.Ci + kVL - 1) / kVL;
    group = j.side();
    const i64 lane_bytes = j.G * kE * (round_up(j.Ci, kMaxVL) + j.Co) * i64{4};
    auto chunk_rows = [&](i64 bytes) {
      return std::clamp<i64>(std::max(bytes / lane_bytes, kGwMinTiles) / j.tw, 1, j.rows);
    };
    R = chunk_rows(gw_chunk_bytes());
    if (R < j.rows && j.slots > 1 && j.slots <= kMaxSlices) {  // several chunks
      // A slice's chunk fills its own thread's L2, and the chunks divide evenly among the slices.
      slices = j.slots;
      const i64 per_slice = chunk_rows(gw_chunk_bytes() / 2);
      const i64 chunks = round_up((j.rows + per_slice - 1) / per_slice, slices);
      R = (j.rows + chunks - 1) / chunks;
    }
    fit(p, j);
    if (sliced() && static_cast<std::size_t>(total) * sizeof(float) > p.workspace_limit) {
      slices = 1;  // the slices' S do not fit: shared V, D and S
      R = chunk_rows(gw_chunk_bytes());
      fit(p, j);
    }
  }

  void fit(const ConvProblem& p, const Job& j) {
    layout(j);
    while (static_cast<std::size_t>(total) * sizeof(float) > p.workspace_limit && R > 1) {
      R = (R + 1) / 2;  // smaller chunks under a tight limit before declining
      layout(j);
    }
  }

  void layout(const Job& j) {
    ld = round_up(R * j.tw, 16) + 16;  // a tile row's last vector may spill past R * tw
    vp = R * j.tw * kVL + 16;          // + 16: panel and plane strides off multiples of 4 KiB
    ve = ncb * vp + 16, de = j.Co * ld + 16;
    wp = round_up(4 * j.tw + 2, kVL);
    auto floats = [](i64 n) { return static_cast<i64>(align_bytes(static_cast<std::size_t>(n) * 4) / 4); };
    fused = !sliced() && R == j.rows;
    cb = std::min(kBlock, j.Co), ib = std::min(kBlock, round_up(j.Ci, kMaxVL));
    nco = (j.Co + cb - 1) / cb, nci = (j.Ci + ib - 1) / ib;
    es = cb * ib + 16;  // (the inverse reads rows e1 es apart: at 16 KiB they shared one L1 set)
    acc_off = floats(kAlpha * es);
    s_block = acc_off + floats(cb * 9 * ib);
    v_off = fused ? j.slots * s_block : floats(j.G * kE * j.Co * j.Ci);
    // Sized for the widest level's panels (kMaxVL lanes, and the narrowest's panel count
    // for the padding), so the workspace is the same at every level.
    const i64 ve_max = round_up(j.Ci, kMaxVL) * R * j.tw + ((j.Ci + 3) / 4 + 1) * 16;
    d_off = v_off + floats(j.G * kE * ve_max);
    line_off = d_off + floats(j.G * kE * de);
    rows_off = floats((kAlpha + 2) * 4 * j.Q);
    line_size = rows_off + floats(kAlpha * round_up(4 * j.tw + 2, kMaxVL) * kMaxVL);
    slice_size = line_off + line_size;
    total = sliced() ? slices * slice_size : line_off + j.slots * line_size;
  }
};

/// d -> A d for 4 values (the transpose of at6).
template <class V>
inline void a6(const V d[4], V o[6]) {
  const V s02 = d[0] + d[2], s13 = d[1] + d[3];
  const V q02 = d[0] + 4.0f * d[2], q13 = 2.0f * d[1] + 8.0f * d[3];
  o[0] = d[0];
  o[1] = s02 + s13;
  o[2] = s02 - s13;
  o[3] = q02 + q13;
  o[4] = q02 - q13;
  o[5] = d[3];
}

/// s -> G^T s for 6 values (the transpose of g3).
template <class V>
inline void gt6(const V s[6], V o[3]) {
  const V a = s[1] + s[2], b = s[1] - s[2], c = s[3] + s[4], d = s[3] - s[4];
  o[0] = s[0] * 0.25f - a * (1.0f / 6) + c * (1.0f / 24);
  o[1] = d * (1.0f / 12) - b * (1.0f / 6);
  o[2] = (c - a) * (1.0f / 6) + s[5];
}

/// The 16 taps of one tile row of an output-gradient plane (OH x OW): tap[a][c] + tx is
/// row a, column c of tile tx. `lines` receives 4 phase lines; `zeros` is a zero phase
/// line (rows past the output).
void grad_output_taps(const float* plane, const Job& j, i64 ty, float* lines, const float* zeros,
                      const float* tap[4][4]) {
  for (int a = 0; a < 4; ++a) {
    const i64 y = 4 * ty + a;
    const float* ph = y < j.OH ? lines + a * 4 * j.Q : zeros;
    if (y < j.OH) phase_line(plane + y * j.OW, j.OW, 0, j, lines + a * 4 * j.Q);
    for (int c = 0; c < 4; ++c) tap[a][c] = ph + c * j.Q;
  }
}

/// D[e][base + tx] = (A d A^T)[e] for the tiles tx in [0, lanes); tap(a, c, tx) loads
/// their taps in row a, column c.
template <class Tap>
void grad_output_transform(Tap&& tap, i64 lanes, float* D, i64 dstride, i64 base) {
  for (i64 tx = 0; tx < lanes; tx += kVL) {
    vnat h[4][kAlpha];  // h[a]: row a after the horizontal transform
    for (int a = 0; a < 4; ++a) {
      const vnat d[4] = {tap(a, 0, tx), tap(a, 1, tx), tap(a, 2, tx), tap(a, 3, tx)};
      a6(d, h[a]);
    }
    for (int s = 0; s < kAlpha; ++s) {
      const vnat d[4] = {h[0][s], h[1][s], h[2][s], h[3][s]};
      vnat o[6];
      a6(d, o);
      for (int r = 0; r < 6; ++r) storen(D + (r * 6 + s) * dstride + base + tx, o[r]);
    }
  }
}

/// Source rows of one panel of kVL input channels (c0 ..), transposed: row y of image img
/// as row[x][l] = channel c0 + l, column x - pl (zero outside the plane and past Ci), so a
/// tile's 36 taps are 36 vector loads of kVL channels. Kept in slot y mod 6, as LineCache
/// keeps phase lines: consecutive tile rows share two of their six rows.
struct PanelRows {
  float* rows = nullptr;  ///< kAlpha slots of wp * kVL floats
  i64 img[kAlpha], y[kAlpha];
  explicit PanelRows(float* buf) : rows(buf) { std::fill(std::begin(img), std::end(img), -1); }

  const float* get(const float* x, const Job& j, const GwPlan& g, i64 im, i64 gr, i64 c0, i64 yy) {
    const auto slot = static_cast<std::size_t>((yy % kAlpha + kAlpha) % kAlpha);
    float* out = rows + static_cast<i64>(slot) * g.wp * kVL;
    if (img[slot] == im && y[slot] == yy) return out;
    img[slot] = im, y[slot] = yy;
    if (yy < 0 || yy >= j.H) {
      std::memset(out, 0, static_cast<std::size_t>(g.wp * kVL) * sizeof(float));
      return out;
    }
    const float* line[kVL];
    for (int l = 0; l < kVL; ++l) {
      const float* plane = c0 + l < j.Ci ? j.src_plane(x, im, gr, c0 + l) : nullptr;
      line[l] = plane ? plane + yy * j.W : nullptr;
    }
    for (i64 x0 = 0; x0 < g.wp; x0 += kVL) {
      const i64 sx = x0 - j.pl;  // source column of this block's first value
      const bool inside = sx >= 0 && sx + kVL <= j.W;
      vnat r[kVL];
      for (int l = 0; l < kVL; ++l)
        r[l] = !line[l] ? vnat{} : inside ? loadn(line[l] + sx) : loadn_part(line[l] + sx, -sx, j.W - sx);
      transposen(r);
      for (int c = 0; c < kVL; ++c) storen(out + (x0 + c) * kVL, r[c]);
    }
    return out;
  }
};

/// V[e][tx][lanes] = (B^T d B)[e] of each tile tx of one tile row whose 6 transposed source
/// rows are `row`, kVL input channels per vector; V's tile stride is kVL.
void input_transform_channels(const float* const row[kAlpha], i64 tw, float* V, i64 vstride) {
  for (i64 tx = 0; tx < tw; ++tx) {
    vnat h[kAlpha][kAlpha];  // h[i][s]: row i after the horizontal transform
    for (int i = 0; i < kAlpha; ++i) {
      vnat d[6];
      for (int c = 0; c < 6; ++c) d[c] = loadn(row[i] + (4 * tx + c) * kVL);
      bt6(d, h[i]);
    }
    for (int s = 0; s < kAlpha; ++s) {
      vnat d[6], o[6];
      for (int i = 0; i < 6; ++i) d[i] = h[i][s];
      bt6(d, o);
      for (int r = 0; r < 6; ++r) storen(V + (r * 6 + s) * vstride + tx * kVL, o[r]);
    }
  }
}

/// op(B) of S_e = D_e V_e^T for sgemm: V_e's panels, copied into the driver's slivers.
struct VPanels {
  const float* v;  ///< V_e's panel of the GEMM's first column
  i64 vp;          ///< panel stride
  static void pack(const void* ctx, std::int64_t, std::int64_t k0, std::int64_t kc, std::int64_t j0,
                   std::int64_t n, int nr, float* dst) {
    const auto& self = *static_cast<const VPanels*>(ctx);
    for (i64 q = 0; q * nr < n; ++q)
      for (i64 jj = 0; jj < nr; jj += kVL) {
        const i64 col = j0 + q * nr + jj;  // a multiple of kVL: slivers start at multiples of nr
        float* d = dst + q * kc * nr + jj;
        if (col >= j0 + n) {  // past the last column: zeros
          for (i64 k = 0; k < kc; ++k) storen(d + k * nr, vnat{});
          continue;
        }
        const float* src = self.v + col / kVL * self.vp + k0 * kVL;
        for (i64 k = 0; k < kc; ++k) storen(d + k * nr, loadn(src + k * kVL));
      }
  }
};

/// S_e(m x n) (beta = 0: =, 1: +=) D_e V_e^T over `tiles` tiles, single-threaded.
void gemm_dv(const GwPlan& g, i64 m, i64 n, i64 tiles, const float* De, const float* Vpanel, float beta, float* S,
             i64 lds) {
  const VPanels src{Vpanel, g.vp};
  const PanelSource ps{&VPanels::pack, &src};
  SgemmExt ext;
  ext.b_source = &ps;
  sgemm_ex(false, true, m, n, tiles, 1.0f, De, g.ld, nullptr, 0, beta, S, lds, ext, nullptr);
}

/// Output channel co's filters for the input channels c0 .. c0 + n: tap `tap` of channel
/// c0 + l at g[tap * gstride + l], into dw[gr*Co + co][ci][3x3] (3D: ci = c * kd + t is
/// dw[..][c][t], reversed in t when flipping).
void store_filters(const ConvProblem& p, const Job& j, const float* g, i64 gstride, i64 c0, i64 n, float* dw, i64 gr,
                   i64 co) {
  for (i64 l = 0; l < n; ++l) {
    const i64 ci = c0 + l, t = j.kd == 1 ? 0 : ci % j.kd;  // 2D: no division per channel
    float* out = dw + ((gr * j.Co + co) * j.Ci + ci - t + (p.flip ? j.kd - 1 - t : t)) * 9;
    for (int tap = 0; tap < 9; ++tap) out[p.flip ? 8 - tap : tap] = g[tap * gstride + l];
  }
}

/// gt6 as a matrix: row b0 of the filter takes row e0 of the 6x6 domain kGt[b0][e0] times.
constexpr float kGt[3][kAlpha] = {{0.25f, -1.0f / 6, -1.0f / 6, 1.0f / 24, 1.0f / 24, 0.0f},
                                  {0.0f, -1.0f / 6, 1.0f / 6, 1.0f / 12, -1.0f / 12, 0.0f},
                                  {0.0f, -1.0f / 6, -1.0f / 6, 1.0f / 6, 1.0f / 6, 1.0f}};

/// The inverse transform dw = G^T S_e G, a row of the 6x6 domain at a time: row e0 of
/// output channel co's S (position e0 * 6 + e1 at S + e1 * estride, n input channels)
/// after G^T along e1, weighted by kGt's column e0, into the filters acc[tap * ld + l]
/// (row 0 sets them; ld >= n rounded up to 16). store_filters then writes them to dw.
void accumulate_filter_row(const float* S, i64 estride, i64 n, int e0, float* acc, i64 ld) {
  for (i64 c0 = 0; c0 < n; c0 += 16) {
    v16 s[6], t[3];
    for (int e1 = 0; e1 < 6; ++e1) s[e1] = load_part(S + e1 * estride + c0, 0, n - c0);
    gt6(s, t);
    for (int b0 = 0; b0 < 3; ++b0) {
      const float w = kGt[b0][e0];
      if (w == 0.0f && e0 > 0) continue;
      for (int b1 = 0; b1 < 3; ++b1) {
        float* a = acc + (b0 * 3 + b1) * ld + c0;
        store(a, e0 == 0 ? (w == 0.0f ? v16{} : w * t[b1]) : load(a) + w * t[b1]);
      }
    }
  }
}

/// V and D of tile rows [r0, r1) (one chunk), one task per channel plane (x panels, then dy
/// planes), the tasks taken from next() until it passes the last; `lines` is the caller's
/// scratch (phase lines and transposed source rows).
template <class NextTask>
void transform_chunk(const Job& j, const GwPlan& g, const float* x, const float* dy, i64 r0, i64 r1, float* V,
                     float* D, float* lines, NextTask&& next) {
  const i64 nx = j.G * g.ncb, ntasks = nx + j.G * j.Co;
  std::memset(lines, 0, static_cast<std::size_t>(g.line_size) * sizeof(float));
  LineCache cache;
  cache.lines = lines;
  cache.zeros = lines + kAlpha * 4 * j.Q;
  TapGroup<4, 4> out_group;
  // Narrow images at a level with gathers: dy's taps gathered (GatheredRows), each group's
  // lanes set up once for all channels.
  std::vector<GatheredRows<4, 4>> gathered;
  if (use_gathers() && g.group > 1 && j.N * j.G * j.Co * j.Dd * j.OH * j.OW <= i64{INT32_MAX}) {
    for (i64 r = r0; r < r1; r += g.group) {
      const float* first = j.dst_plane(dy, r / j.th, 0, 0);
      gathered.emplace_back(
          std::min(g.group, r1 - r), j.tw, j.OH, j.OW, 0, 0,
          [&](i64 k) { return j.dst_plane(dy, (r + k) / j.th, 0, 0) - first; }, [&](i64 k) { return (r + k) % j.th; });
    }
  }
  for (i64 task = next(); task < ntasks; task = next()) {
    std::fill(std::begin(cache.plane), std::end(cache.plane), nullptr);
    const bool in = task < nx;
    const i64 c = in ? task : task - nx, per = in ? g.ncb : j.Co, gr = c / per, ch = c % per;
    if (in) {
      PanelRows rows(lines + g.rows_off);
      for (i64 r = r0; r < r1; ++r) {
        const i64 img = r / j.th, y0 = 4 * (r % j.th) - j.pt;
        const float* row[kAlpha];
        for (int i = 0; i < kAlpha; ++i) row[i] = rows.get(x, j, g, img, gr, ch * kVL, y0 + i);
        input_transform_channels(row, j.tw, V + gr * kE * g.ve + ch * g.vp + (r - r0) * j.tw * kVL, g.ve);
      }
    } else if (!gathered.empty()) {
      float* dst = D + gr * kE * g.de + ch * g.ld;
      for (i64 r = r0, k = 0; r < r1; r += g.group, ++k) {
        const float* plane0 = j.dst_plane(dy, r / j.th, gr, ch);
        const GatheredRows<4, 4>& rows = gathered[static_cast<std::size_t>(k)];
        grad_output_transform(rows.taps(plane0), kVL, dst, g.de, (r - r0) * j.tw);
      }
    } else {
      float* dst = D + gr * kE * g.de + ch * g.ld;
      transform_rows(
          j, g.group, r0, r1, out_group,
          [&](i64 r, const float* tap[4][4]) {
            grad_output_taps(j.dst_plane(dy, r / j.th, gr, ch), j, r % j.th, lines, cache.zeros, tap);
          },
          [&](const float* const tap[4][4], i64 lanes, i64 base) {
            grad_output_transform(tap_lines(tap), lanes, dst, g.de, base);
          });
    }
  }
}

/// GwPlan::fused: S_e = D_e V_e^T over every tile and its inverse, per block of channels,
/// in two halves that keep V and D near the cores that use them. Half h owns the h-th half
/// of the blocks of output channels (with their D planes) and of the input channels (with
/// their V panels); a block belongs to its output channels' half. So each half's blocks
/// read their own D and, for half of them, their own V, and each thread writes only its
/// own half of V and D. On a 2-vCPU Zen 4 VM, resnet_3x3_14 took 4.35 ms with every V and
/// D shared (transform and block tasks taken by any thread), 7.1-7.4 in the VM's slow
/// phases; in halves 4.1 and 6.2-6.5. (In those phases the transforms run 2-4x slower and
/// one vCPU's GEMMs 1.6x: memory traffic, not the FMA peak, which holds.)
///
/// A slot starts on half slot % 2 (its transforms, then its blocks, the own-V ones first)
/// and then helps the other half. A block whose V is the other half's waits for that
/// half's transforms, taking any left itself, so one thread runs everything in turn. Each
/// block is computed alone, so results do not depend on the thread count.
template <class Parallel>
void run_fused(const ConvProblem& p, const Job& j, const GwPlan& g, const float* x, const float* dy, float* dw,
               float* ws, i64 used, Parallel&& parallel) {
  float *V = ws + g.v_off, *D = ws + g.d_off;
  const i64 nx = j.G * g.ncb, ntasks = nx + j.G * j.Co;
  // Output-channel blocks q = gr * nco + cob and input-channel blocks gr * nci + cib are
  // split in halves at qsplit and isplit; the first transform tasks of half 1 are the x
  // panel and the dy plane those start.
  const i64 nq = j.G * g.nco, ni = j.G * g.nci;
  const i64 qsplit = (nq + 1) / 2, isplit = (ni + 1) / 2;
  auto v_half = [&](i64 gr, i64 cib) { return gr * g.nci + cib < isplit ? 0 : 1; };
  const i64 panels_per_block = g.ib / kVL;
  const i64 xsplit = std::min(nx, isplit / g.nci * g.ncb + isplit % g.nci * panels_per_block);
  const i64 dsplit = std::min(j.G * j.Co, qsplit / g.nco * j.Co + qsplit % g.nco * g.cb);
  struct Half {
    i64 x0, x1, d0, d1;  ///< its x panels and dy planes (transform tasks nx + plane)
    std::vector<i64> blocks;  ///< gr * nco * nci + cob * nci + cib, own V first
    std::atomic<i64> next_transform{0}, transformed{0}, next_block{0};
  } halves[2];
  halves[0].x0 = 0, halves[0].x1 = xsplit, halves[0].d0 = 0, halves[0].d1 = dsplit;
  halves[1].x0 = xsplit, halves[1].x1 = nx, halves[1].d0 = dsplit, halves[1].d1 = j.G * j.Co;
  for (int h = 0; h < 2; ++h)
    for (int cross = 0; cross < 2; ++cross)
      for (i64 q = h == 0 ? 0 : qsplit; q < (h == 0 ? qsplit : nq); ++q)
        for (i64 cib = 0; cib < g.nci; ++cib)
          if ((v_half(q / g.nco, cib) != h) == (cross == 1)) halves[h].blocks.push_back(q * g.nci + cib);

  // Half h's transforms, taken from its counter, then waited for (others may hold the last).
  auto transform_half = [&](int h, float* lines) {
    Half& half = halves[h];
    const i64 n = (half.x1 - half.x0) + (half.d1 - half.d0);
    if (half.transformed.load(std::memory_order_acquire) == n) return;
    bool took = false;  // a task is done when next() is called again
    transform_chunk(j, g, x, dy, 0, j.rows, V, D, lines, [&] {
      if (took) half.transformed.fetch_add(1, std::memory_order_release);
      const i64 i = half.next_transform.fetch_add(1, std::memory_order_relaxed);
      took = i < n;
      const i64 nxh = half.x1 - half.x0;
      return !took ? ntasks : i < nxh ? half.x0 + i : nx + half.d0 + (i - nxh);
    });
    while (half.transformed.load(std::memory_order_acquire) < n) std::this_thread::yield();
  };
  parallel(used, [&](i64 s0, i64 s1) {
    for (i64 slot = s0; slot < s1; ++slot) {
      float* Sb = ws + slot * g.s_block;
      float* lines = ws + g.line_off + slot * g.line_size;
      for (int k = 0; k < 2; ++k) {
        const int h = static_cast<int>((slot + k) % 2);
        Half& half = halves[h];
        transform_half(h, lines);
        const auto nb = static_cast<i64>(half.blocks.size());
        for (i64 i = half.next_block.fetch_add(1); i < nb; i = half.next_block.fetch_add(1)) {
          const i64 b = half.blocks[static_cast<std::size_t>(i)];
          const i64 gr = b / (g.nco * g.nci), co0 = (b / g.nci) % g.nco * g.cb, cib = b % g.nci, ci0 = cib * g.ib;
          if (v_half(gr, cib) != h) transform_half(1 - h, lines);
          const i64 m = std::min(g.cb, j.Co - co0), n = std::min(g.ib, j.Ci - ci0);
          float* acc = Sb + g.acc_off;  // [co - co0][tap][ib]
          for (int e0 = 0; e0 < kAlpha; ++e0) {
            for (int e1 = 0; e1 < kAlpha; ++e1) {
              const i64 e = e0 * kAlpha + e1;
              gemm_dv(g, m, n, j.rows * j.tw, D + (gr * kE + e) * g.de + co0 * g.ld,
                      V + (gr * kE + e) * g.ve + ci0 / kVL * g.vp, 0.0f, Sb + e1 * g.es, g.ib);
            }
            for (i64 co = 0; co < m; ++co) accumulate_filter_row(Sb + co * g.ib, g.es, n, e0, acc + co * 9 * g.ib, g.ib);
          }
          for (i64 co = 0; co < m; ++co) store_filters(p, j, acc + co * 9 * g.ib, g.ib, ci0, n, dw, gr, co0 + co);
        }
      }
    }
  });
}

void run_grad_weights(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const Job j(p);
  const GwPlan g(p, j);
  if (ctx.workspace == nullptr || ctx.workspace_bytes < static_cast<std::size_t>(g.total) * sizeof(float))
    throw MemoryError(msg("cpu.winograd: workspace of ", ctx.workspace_bytes, " bytes, need ",
                          static_cast<std::size_t>(g.total) * sizeof(float), " for ", p.key()));
  float* ws = static_cast<float*>(ctx.workspace);
  float *S = ws, *V = ws + g.v_off, *D = ws + g.d_off;
  const auto* x = static_cast<const float*>(t.x);
  const auto* dy = static_cast<const float*>(t.y);
  auto* dw = static_cast<float*>(t.w);
  ThreadPool* pool = ctx.pool;
  const i64 threads = pool ? pool->size() : 1;
  auto parallel = [&](i64 n, const std::function<void(i64, i64)>& body) {
    if (pool && n > 1) pool->parallel_for(n, body, 1);
    else body(0, n);
  };
  // The inverse transform, one task per output channel, of S plus the other slices' S.
  auto inverse_all = [&] {
    parallel(j.G * j.Co, [&](i64 a, i64 b) {
      const i64 ld = round_up(j.Ci, 16);
      std::vector<float> acc(static_cast<std::size_t>(9 * ld));
      for (i64 task = a; task < b; ++task) {
        const i64 gr = task / j.Co, co = task % j.Co;
        float* s0 = S + (gr * kE * j.Co + co) * j.Ci;
        for (i64 k = 1; k < g.slices; ++k)
          for (i64 e = 0; e < kE; ++e) {
            float* __restrict dst = s0 + e * j.Co * j.Ci;
            const float* __restrict src = dst + k * g.slice_size;
            for (i64 ci = 0; ci < j.Ci; ++ci) dst[ci] += src[ci];
          }
        for (int e0 = 0; e0 < kAlpha; ++e0)
          accumulate_filter_row(s0 + e0 * kAlpha * j.Co * j.Ci, j.Co * j.Ci, j.Ci, e0, acc.data(), ld);
        store_filters(p, j, acc.data(), ld, 0, j.Ci, dw, gr, co);
      }
    });
  };

  if (g.sliced()) {
    // Each slice by one thread: its chunks' transforms, then their 36 GEMMs into its S.
    const i64 nchunks = (j.rows + g.R - 1) / g.R;
    std::atomic<i64> next_slice{0};
    parallel(std::min(g.slices, threads), [&](i64, i64) {  // each call takes slices until none is left
      for (i64 k = next_slice.fetch_add(1); k < g.slices; k = next_slice.fetch_add(1)) {
        float* base = ws + k * g.slice_size;
        float *Sk = base, *Vk = base + g.v_off, *Dk = base + g.d_off;
        float beta = 0.0f;
        for (i64 c = k; c < nchunks; c += g.slices, beta = 1.0f) {
          const i64 r0 = c * g.R, r1 = std::min(j.rows, r0 + g.R);
          i64 task = 0;
          transform_chunk(j, g, x, dy, r0, r1, Vk, Dk, base + g.line_off, [&] { return task++; });
          for (i64 e = 0; e < j.G * kE; ++e)
            gemm_dv(g, j.Co, j.Ci, (r1 - r0) * j.tw, Dk + e * g.de, Vk + e * g.ve, beta, Sk + e * j.Co * j.Ci, j.Ci);
        }
        if (beta == 0.0f)  // no chunk: rows = 12, 8 slices make chunks of 2 rows, only 6 of them
          std::memset(Sk, 0, static_cast<std::size_t>(j.G * kE * j.Co * j.Ci) * sizeof(float));
      }
    });
    inverse_all();
    return;
  }

  const i64 used = std::min<i64>({j.slots, j.G * g.ncb + j.G * j.Co, threads});  // transform tasks
  if (g.fused) {
    run_fused(p, j, g, x, dy, dw, ws, used, parallel);
    return;
  }
  for (i64 r0 = 0; r0 < j.rows; r0 += g.R) {
    const i64 r1 = std::min(j.rows, r0 + g.R);
    // 1. V and D of this chunk, the tasks shared by the slots.
    std::atomic<i64> next{0};
    parallel(used, [&](i64 s0, i64 s1) {
      for (i64 slot = s0; slot < s1; ++slot)
        transform_chunk(j, g, x, dy, r0, r1, V, D, ws + g.line_off + slot * g.line_size, [&] { return next.fetch_add(1); });
    });
    const i64 tiles = (r1 - r0) * j.tw;
    // 2. S_e (+)= D_e V_e^T over the chunk's tiles, one GEMM per task.
    const float beta = r0 == 0 ? 0.0f : 1.0f;
    parallel(j.G * kE, [&](i64 a, i64 b) {
      for (i64 e = a; e < b; ++e)
        gemm_dv(g, j.Co, j.Ci, tiles, D + e * g.de, V + e * g.ve, beta, S + e * j.Co * j.Ci, j.Ci);
    });
  }
  // 3. The inverse transform.
  inverse_all();
}

}  // namespace

/// Entry points of this level's kernels (called by conv_winograd.cpp).
std::size_t winograd_workspace_bytes(const ConvProblem& p) {
  const Job j(p);
  const i64 total = p.direction == ConvDirection::grad_weights ? GwPlan(p, j).total : j.total;
  return static_cast<std::size_t>(total) * sizeof(float);
}
bool winograd_one_block(const ConvProblem& p) {
  const Job j(p);
  return p.direction == ConvDirection::grad_weights ? GwPlan(p, j).fused : j.fused_filters;
}
void winograd_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  if (p.direction == ConvDirection::grad_weights) run_grad_weights(p, t, ctx);
  else run_winograd(p, t, ctx);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
