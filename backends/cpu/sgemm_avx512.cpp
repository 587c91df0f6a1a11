// AVX-512 kernel family for sgemm: a 14x32 register block (28 zmm accumulators, two B
// vectors, one broadcast). Every function that uses AVX-512 carries its own target
// attribute, so a portable (-march=x86-64-v2) build still contains this path and
// sgemm.cpp picks it at run time. Keep the standard headers above the target regions.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/sgemm_driver.hpp"

#if defined(CONVGRAPH_ISA_EMULATED)  // a test build for a host without AVX-512 (kernels/avx512_emulation.hpp)
#include "backends/cpu/kernels/avx512_emulation.hpp"
#define CG_AVX512 __attribute__((target("avx2,fma")))
#else
#define CG_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))
#endif

namespace convgraph::cpu {
namespace {

using sgemm_detail::GemmArgs;

constexpr int kMR = 14;
constexpr int kNR = 32;
/// Deepest depth block; also the row stride of a row-major A sliver (14 x kKC floats,
/// 21 KiB: stays in L1 next to the B sliver being streamed).
constexpr std::int64_t kKC = 384;

CG_AVX512 inline __mmask16 low_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1u);
}

// One register block: C(MROWS x n) (+)= alpha * A-sliver * B-sliver, n <= 16 * NV.
// The A sliver is either k-major (a[k*14 + i], KMAJOR) or row-major with a fixed row
// stride (a[i*kKC + k]); both give every broadcast a constant displacement from one
// pointer. The k loop is the hot loop: per step NV aligned B loads, MROWS broadcasts and
// MROWS*NV FMAs; no stores and no stack traffic (check with objdump). PREFETCH: the first
// pf->share() steps also issue one of the driver's prefetch lines each (Zen 4, 1 thread,
// 64x576x25088 with B stored transposed, computed swapped as 576x64, A streamed from
// memory: 77% -> 83% of peak against the same lines issued all at once between calls,
// whose misses held up the kernel's loads). Those steps read a few of the line cursor's
// counters from the stack (GCC spills them beside the 30 vector registers): L1 loads,
// beside the step's 16.
// PACK_A: `a` is op(A)'s sliver where it is stored (its rows, or with KMAJOR its depth
// rows, `lda` apart), and the kernel packs it into pack_to for the tile's other calls as
// it goes, the copy among the FMAs instead of before them (Zen 4, 1 thread, 4608x49x512
// with A transposed: packing took 13% of the time, 84 -> 103 GFLOP/s). KMAJOR: each step
// broadcasts from the stored depth row and copies it; row-major: the broadcasts read the
// packed sliver, each 16 steps copying the next 16 depths of the rows while they run (so
// `a` and pack_to may point into one buffer: neither is restrict; the loop has no other
// stores, so the other kernels lose nothing by it).
// PACK_B (NV = 2): `b` is the plain stored B's sliver (depth row k at b + k*ld, n columns)
// and each step's two vectors are loaded from there (zero past n) and copied to pack_to's
// sliver for the tile's other rows, the copy among the FMAs, as PACK_A. b_ahead > 0: each
// step also fetches the stored row b_ahead steps on into L1. The rows are ldb apart (a page
// or more on the large layers), so no hardware prefetcher follows them, and where the driver
// brings them only as far as L2 (sliver by sliver, see run_sgemm) each step's loads would
// wait on L2's latency.
enum class Pack { none, a, b };
template <int MROWS, int NV, bool KMAJOR, bool PREFETCH, Pack PACK = Pack::none>
CG_AVX512 void kernel(std::int64_t kc, const float* a, const float* __restrict b, float* c, std::int64_t ldc,
                      int n, float alpha, float beta, bool first, bool stream, sgemm_detail::PrefetchRows* pf,
                      std::int64_t lda = 0, float* pack_to = nullptr, std::int64_t b_ahead = 0) {
  constexpr bool PACK_A = PACK == Pack::a, PACK_B = PACK == Pack::b;
  static_assert(!PACK_B || NV == 2);
  sgemm_detail::PrefetchRows lines;  // a local copy: no aliasing with a, b or c
  std::int64_t prefetches = 0;
  if constexpr (PREFETCH) {
    lines = *pf;
    prefetches = lines.share();
  }
  constexpr std::int64_t kRow = KMAJOR ? 1 : kKC;
  constexpr __mmask16 kRows = static_cast<__mmask16>((1u << MROWS) - 1u);
  // Row-major packing: depths k0..k0+16 of the sliver's rows (a: the stored rows).
  auto copy_depths = [](const float* src, std::int64_t ld, float* dst, std::int64_t k0, std::int64_t kc) CG_AVX512 {
    const __mmask16 km = low_mask(static_cast<int>(std::min<std::int64_t>(16, kc - k0)));
#pragma GCC unroll 14
    for (int i = 0; i < MROWS; ++i)
      _mm512_mask_storeu_ps(dst + i * kKC + k0, km, _mm512_maskz_loadu_ps(km, src + i * ld + k0));
  };
  const float* stored = a;  // row-major PACK_A: the rows copied from
  if constexpr (PACK_A && !KMAJOR) {
    copy_depths(stored, lda, pack_to, 0, kc);
    a = pack_to;
  }
  const std::int64_t a_step = PACK_A && KMAJOR ? lda : KMAJOR ? kMR : 1;
  const std::int64_t b_step = PACK_B ? lda : kNR;
  __mmask16 b_mask[NV];
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) b_mask[v] = low_mask(n - 16 * v);
  __m512 acc[MROWS][NV];
#pragma GCC unroll 14
  for (int i = 0; i < MROWS; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  // Fetch the C tile while the k loop runs, unless it is streamed out (the driver streams
  // only C written in one pass with beta 0; whole lines only).
  stream = stream && n == 16 * NV;
#pragma GCC unroll 14
  for (int i = 0; i < MROWS; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      if (!stream) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 2
  for (std::int64_t k = 0; k < kc; ++k) {
    if constexpr (PACK_A && !KMAJOR)
      if ((k & 15) == 0 && k + 16 < kc) copy_depths(stored, lda, pack_to, k + 16, kc);
    if constexpr (PACK_B)
      if (b_ahead > 0 && k + b_ahead < kc) sgemm_detail::prefetch_row_l1<kNR>(b + b_ahead * lda);
    __m512 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      if constexpr (PACK_B) {
        bv[v] = _mm512_maskz_loadu_ps(b_mask[v], b + 16 * v);
        _mm512_store_ps(pack_to + k * kNR + 16 * v, bv[v]);
      } else {
        bv[v] = _mm512_load_ps(b + 16 * v);
      }
    }
#pragma GCC unroll 14
    for (int i = 0; i < MROWS; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i * kRow]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    if constexpr (PACK_A && KMAJOR) _mm512_mask_storeu_ps(pack_to + k * kMR, kRows, _mm512_maskz_loadu_ps(kRows, a));
    if constexpr (PREFETCH)
      if (k < prefetches) lines.one();
    a += a_step;
    b += b_step;
  }
  if constexpr (PREFETCH) {
    for (std::int64_t k = kc; k < prefetches; ++k) lines.one();  // a share longer than kc
    *pf = lines;
  }

  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 vb = _mm512_set1_ps(beta);
  __mmask16 mask[NV];
#pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) mask[v] = low_mask(n - 16 * v);
  const bool read_c = !first || beta != 0.0f;
#pragma GCC unroll 14
  for (int i = 0; i < MROWS; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* cp = c + i * ldc + 16 * v;
      __m512 r = _mm512_mul_ps(va, acc[i][v]);
      if (read_c) {
        const __m512 old = _mm512_maskz_loadu_ps(mask[v], cp);
        r = first ? _mm512_fmadd_ps(vb, old, r) : _mm512_add_ps(old, r);
      }
      if (stream)
        _mm512_stream_ps(cp, r);
      else
        _mm512_mask_storeu_ps(cp, mask[v], r);
    }
  }
}

using KernelFn = void (*)(std::int64_t, const float*, const float*, float*, std::int64_t, int,
                          float, float, bool, bool, sgemm_detail::PrefetchRows*, std::int64_t, float*,
                          std::int64_t);

// kKernels[prefetch][kmajor][nv - 1][mrows - 1]
template <bool PREFETCH, bool KMAJOR, int NV, std::size_t... I>
constexpr std::array<KernelFn, kMR> kernel_row(std::index_sequence<I...>) {
  return {&kernel<static_cast<int>(I) + 1, NV, KMAJOR, PREFETCH>...};
}
template <bool PREFETCH>
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kernel_table() {
  return {{
      {{kernel_row<PREFETCH, false, 1>(std::make_index_sequence<kMR>()),
        kernel_row<PREFETCH, false, 2>(std::make_index_sequence<kMR>())}},
      {{kernel_row<PREFETCH, true, 1>(std::make_index_sequence<kMR>()),
        kernel_row<PREFETCH, true, 2>(std::make_index_sequence<kMR>())}},
  }};
}
constexpr std::array<std::array<std::array<std::array<KernelFn, kMR>, 2>, 2>, 2> kKernels = {
    kernel_table<false>(), kernel_table<true>()};

// kPackingKernels[prefetch][kmajor][mrows - 1]: two column vectors, packing A (PACK) or
// B as they go.
template <bool PREFETCH, bool KMAJOR, Pack PACK, std::size_t... I>
constexpr std::array<KernelFn, kMR> packing_row(std::index_sequence<I...>) {
  return {&kernel<static_cast<int>(I) + 1, 2, KMAJOR, PREFETCH, PACK>...};
}
template <bool PREFETCH, Pack PACK>
constexpr std::array<std::array<KernelFn, kMR>, 2> packing_table() {
  return {packing_row<PREFETCH, false, PACK>(std::make_index_sequence<kMR>()),
          packing_row<PREFETCH, true, PACK>(std::make_index_sequence<kMR>())};
}
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kPackingKernels = {
    packing_table<false, Pack::a>(), packing_table<true, Pack::a>()};
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kPackingBKernels = {
    packing_table<false, Pack::b>(), packing_table<true, Pack::b>()};

/// How many depth steps ahead kernel_packing_b fetches the stored B rows into L1 where the
/// driver asks for it (GemmArgs::b_rows_ahead). Measured on stop 39's Xeon VM (2 MB L2 a core,
/// 480 MB L3), 1 thread, % of the FMA peak, medians of 2 runs: 128x50176x1728 55 -> 60%,
/// 64x200704x81 55 -> 58%, 128x12544x576 61 -> 65%, shapes with fewer columns level; 16
/// steps did no better.
constexpr std::int64_t kPackBAhead = 8;

// Thin column tails. A sliver's last 1..kThin columns (N = 49 = 32 + 16 + 1, N = 196 =
// 6*32 + 4) would cost a whole 16-lane column vector each in the kernel above; here they
// are vectorised along another axis instead, at a fraction of the cost.
constexpr int kThin = 4;
/// A sliver of at most this many columns is all thin tail: beyond it one column vector
/// is cheaper (measured: 4 columns of a 256x196 product ran 6% slower thin).
constexpr int kThinAlone = 2;

// C(i, j) = alpha * sum_k a(i, k) * b[k*32 + j] (+ beta or accumulate), i < m, j < NT.
inline void thin_update(float* c, std::int64_t ldc, int m, int j, const float* sums, float alpha,
                        float beta, bool first) {
  for (int i = 0; i < m; ++i) {
    float& out = c[i * ldc + j];
    const float r = alpha * sums[i];
    out = !first ? out + r : beta == 0.0f ? r : beta * out + r;
  }
}

// Row-major A sliver (a[i*kKC + k]): vectorise along k, one column at a time; the B
// column is gathered from the packed sliver (stride 32).
CG_AVX512 void thin_kernel_rows(std::int64_t kc, const float* __restrict a,
                                const float* __restrict b, float* c, std::int64_t ldc, int m,
                                int nt, float alpha, float beta, bool first) {
  const __m512i idx = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(kNR));
  for (int j = 0; j < nt; ++j) {
    __m512 acc[kMR];
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < kc; k += 16) {
      const __mmask16 km = low_mask(static_cast<int>(kc - k < 16 ? kc - k : 16));
      const __m512 bv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), km, idx, b + k * kNR + j, 4);
#pragma GCC unroll 14
      for (int i = 0; i < kMR; ++i)
        if (i < m) acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(km, a + i * kKC + k), bv, acc[i]);
    }
    float sums[kMR];
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) sums[i] = i < m ? _mm512_reduce_add_ps(acc[i]) : 0.0f;
    thin_update(c, ldc, m, j, sums, alpha, beta, first);
  }
}

// k-major A sliver (a[k*14 + i]): vectorise along the 14 rows, four k chains per column
// to cover the FMA latency.
template <int NT>
CG_AVX512 void thin_kernel_kmajor(std::int64_t kc, const float* __restrict a,
                                  const float* __restrict b, float* c, std::int64_t ldc, int m,
                                  float alpha, float beta, bool first) {
  __m512 acc[NT][4];
#pragma GCC unroll 4
  for (int j = 0; j < NT; ++j)
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) acc[j][u] = _mm512_setzero_ps();
  std::int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m512 av = _mm512_maskz_loadu_ps(0x3FFF, a + (k + u) * kMR);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j)
        acc[j][u] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[(k + u) * kNR + j]), acc[j][u]);
    }
  }
  for (; k < kc; ++k) {
    const __m512 av = _mm512_maskz_loadu_ps(0x3FFF, a + k * kMR);
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j)
      acc[j][0] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[k * kNR + j]), acc[j][0]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) {
    float sums[16];
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]),
                                         _mm512_add_ps(acc[j][2], acc[j][3])));
    thin_update(c, ldc, m, j, sums, alpha, beta, first);
  }
}

CG_AVX512 void thin_kernel(bool kmajor, std::int64_t kc, const float* a, const float* b, float* c,
                           std::int64_t ldc, int m, int nt, float alpha, float beta, bool first) {
  if (!kmajor) return thin_kernel_rows(kc, a, b, c, ldc, m, nt, alpha, beta, first);
  switch (nt) {
    case 1: return thin_kernel_kmajor<1>(kc, a, b, c, ldc, m, alpha, beta, first);
    case 2: return thin_kernel_kmajor<2>(kc, a, b, c, ldc, m, alpha, beta, first);
    case 3: return thin_kernel_kmajor<3>(kc, a, b, c, ldc, m, alpha, beta, first);
    default: return thin_kernel_kmajor<4>(kc, a, b, c, ldc, m, alpha, beta, first);
  }
}

// In-register transpose of a 16x16 block: r[i] holds row i on entry, column i on exit.
CG_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // interleave 32-bit elements of row pairs
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {  // then 64-bit pairs
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // Now r[4q + s] holds, in each 128-bit lane L, elements s of rows 4q..4q+3 at column 4L + s.
  // Gather the four lanes of column c = 4L + s from row groups q = 0..3.
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const __m512 a = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x44);        // q0 L0,L1 | q1 L0,L1
    const __m512 b = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x44);   // q2 L0,L1 | q3 L0,L1
    const __m512 c = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xEE);        // q0 L2,L3 | q1 L2,L3
    const __m512 d = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xEE);   // q2 L2,L3 | q3 L2,L3
    t[s] = _mm512_shuffle_f32x4(a, b, 0x88);       // lane 0 of q0..q3 -> column s
    t[4 + s] = _mm512_shuffle_f32x4(a, b, 0xDD);   // lane 1 -> column 4 + s
    t[8 + s] = _mm512_shuffle_f32x4(c, d, 0x88);   // lane 2 -> column 8 + s
    t[12 + s] = _mm512_shuffle_f32x4(c, d, 0xDD);  // lane 3 -> column 12 + s
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Rows i0..i0+m of op(A), depth p0..p0+kc, as the kernel reads them: a plain copy
// either way, no transpose. transA: k-major dst[k*14 + i] (A's rows are op(A)'s columns);
// otherwise row-major dst[i*kKC + k]. dst may be a depth inside a sliver (a joined
// batch's piece): the row-major copy stores unaligned.
CG_AVX512 void pack_a_avx512(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0,
                             std::int64_t kc, float* dst) {
  if (g.ta) {
    const __mmask16 mk = low_mask(m);
    const float* src = g.A + p0 * g.lda + i0;
    for (std::int64_t k = 0; k < kc; ++k)
      _mm512_mask_storeu_ps(dst + k * kMR, mk, _mm512_maskz_loadu_ps(mk, src + k * g.lda));
    return;
  }
  const __mmask16 tail = low_mask(static_cast<int>(kc % 16));
  const std::int64_t kfull = kc - kc % 16;
  for (int i = 0; i < m; ++i) {
    const float* src = g.A + (i0 + i) * g.lda + p0;
    float* d = dst + i * kKC;
    for (std::int64_t k = 0; k < kfull; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(src + k));
    if (tail) _mm512_mask_storeu_ps(d + kfull, tail, _mm512_maskz_loadu_ps(tail, src + kfull));
  }
}

// Depth p0..p0+kc, columns j0.. of op(B) -> dst[k*32 + j].
CG_AVX512 void pack_b_avx512(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                             int n, float* dst) {
  if (!g.tb) {  // op(B)(k, j) = B[k*ldb + j]: each k is a contiguous run of n floats
    const __mmask16 k0 = low_mask(n), k1 = low_mask(n - 16);
    const float* src = g.B + p0 * g.ldb + j0;
    for (std::int64_t k = 0; k < kc; ++k) {
      _mm512_store_ps(dst + k * kNR, _mm512_maskz_loadu_ps(k0, src + k * g.ldb));
      _mm512_store_ps(dst + k * kNR + 16, _mm512_maskz_loadu_ps(k1, src + k * g.ldb + 16));
    }
    return;
  }
  // op(B)(k, j) = B[j*ldb + k]: transpose two 16-column halves x 16 depths at a time.
  // The n rows are n short streams, too many for the hardware prefetcher: fetch each
  // row's next 16 depths while these are transposed.
  const float* src = g.B + j0 * g.ldb + p0;
  for (std::int64_t k = 0; k < kc; k += 16) {
    const int kn = static_cast<int>(kc - k < 16 ? kc - k : 16);
    const __mmask16 km = low_mask(kn);
    if (k + 16 < kc)
      for (int j = 0; j < n; ++j) _mm_prefetch(reinterpret_cast<const char*>(src + j * g.ldb + k + 16), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        r[j] = 16 * h + j < n ? _mm512_maskz_loadu_ps(km, src + (16 * h + j) * g.ldb + k)
                              : _mm512_setzero_ps();
      transpose16(r);
      if (kn == 16) {
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (k + q) * kNR + 16 * h, r[q]);
      } else {
        for (int q = 0; q < kn; ++q) _mm512_store_ps(dst + (k + q) * kNR + 16 * h, r[q]);
      }
    }
  }
}

// Depth p0..p0+kc, columns j0..j0+n of op(B) -> one 32-column sliver after another
// (sliver q at dst + q*kc*32). Non-transposed B is copied kGroup slivers at a time, row by
// row: each row of the group is one 512-byte run, and the stores go to kGroup streams.
// (A whole 512-column block row by row writes 16 streams at once: Zen 4 packs a 384 x 512
// block at 24 GB/s that way from L3, at 46 GB/s four slivers at a time.)
CG_AVX512 void pack_b_panel_avx512(const GemmArgs& g, std::int64_t p0, std::int64_t kc,
                                   std::int64_t j0, std::int64_t n, float* dst) {
  if (g.tb) {
    for (std::int64_t q = 0; q * kNR < n; ++q)
      pack_b_avx512(g, p0, kc, j0 + q * kNR, static_cast<int>(n - q * kNR < kNR ? n - q * kNR : kNR),
                    dst + q * kc * kNR);
    return;
  }
  constexpr std::int64_t kGroup = 4;
  // The group's row kAhead steps on is fetched while this one is copied (the hardware
  // prefetcher ramps up too late on runs this short).
  constexpr std::int64_t kAhead = 8;
  const std::int64_t sliver = kc * kNR;
  const float* src0 = g.B + p0 * g.ldb + j0;
  for (std::int64_t q0 = 0; q0 * kNR < n; q0 += kGroup) {
    const std::int64_t cols = std::min(n - q0 * kNR, kGroup * kNR);
    const std::int64_t full = cols / kNR;
    const int rest = static_cast<int>(cols - full * kNR);
    const __mmask16 r0 = low_mask(rest), r1 = low_mask(rest - 16);
    for (std::int64_t k = 0; k < kc; ++k) {
      const float* src = src0 + k * g.ldb + q0 * kNR;
      float* d = dst + q0 * sliver + k * kNR;
      if (k + kAhead < kc)
        for (std::int64_t j = 0; j < cols; j += 16)
          _mm_prefetch(reinterpret_cast<const char*>(src + kAhead * g.ldb + j), _MM_HINT_T0);
      for (std::int64_t q = 0; q < full; ++q) {
        _mm512_store_ps(d + q * sliver, _mm512_loadu_ps(src + q * kNR));
        _mm512_store_ps(d + q * sliver + 16, _mm512_loadu_ps(src + q * kNR + 16));
      }
      if (rest) {
        _mm512_store_ps(d + full * sliver, _mm512_maskz_loadu_ps(r0, src + full * kNR));
        _mm512_store_ps(d + full * sliver + 16, _mm512_maskz_loadu_ps(r1, src + full * kNR + 16));
      }
    }
  }
}

struct Avx512Traits : sgemm_detail::TraitsDefaults {
  static constexpr int kMR = convgraph::cpu::kMR;
  static constexpr int kNR = convgraph::cpu::kNR;
  static constexpr std::int64_t kKC = convgraph::cpu::kKC;
  static constexpr std::int64_t kABuf = kMR * kKC;
  static constexpr std::int64_t kAPanel = 8;
  static void pack_a(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                     float* dst) {
    pack_a_avx512(g, i0, m, p0, kc, dst);
  }
  static std::int64_t a_depth_offset(const GemmArgs& g, std::int64_t k) { return g.ta ? k * kMR : k; }
  static void pack_b(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                     float* dst) {
    pack_b_avx512(g, p0, kc, j0, n, dst);
  }
  static void pack_b_panel(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                           std::int64_t n, float* dst) {
    pack_b_panel_avx512(g, p0, kc, j0, n, dst);
  }
  static void kernel(const GemmArgs& g, std::int64_t kc, const float* a, const float* b, float* c,
                     int m, int n, bool first, sgemm_detail::PrefetchRows* pf) {
    const bool prefetch = pf->active();
    if (n <= kThinAlone) {  // a thin tail only
      thin_kernel(g.ta, kc, a, b, c, g.ldc, m, n, g.alpha, g.beta, first);
      pf->some();
    } else if (n > 16 && n <= 16 + kThin) {  // one column vector plus a thin tail
      kKernels[prefetch][g.ta][0][m - 1](kc, a, b, c, g.ldc, 16, g.alpha, g.beta, first, g.stream_c, pf, 0, nullptr, 0);
      thin_kernel(g.ta, kc, a, b + 16, c + 16, g.ldc, m, n - 16, g.alpha, g.beta, first);
    } else {
      kKernels[prefetch][g.ta][n > 16][m - 1](kc, a, b, c, g.ldc, n, g.alpha, g.beta, first, g.stream_c, pf, 0, nullptr, 0);
    }
  }
  /// The kernel with the A sliver read where it is stored (its first element at a_src:
  /// op(A)(i, k) at a_src[k*lda + i] with A transposed, else a_src[i*lda + k]), leaving the
  /// packed sliver at a_dst. Calls the main kernel does not cover alone (thin tails) pack
  /// first.
  static void kernel_packing_a(const GemmArgs& g, std::int64_t kc, const float* a_src, float* a_dst,
                               const float* b, float* c, int m, int n, bool first,
                               sgemm_detail::PrefetchRows* pf) {
    if (n > 16 + kThin)
      return kPackingKernels[pf->active()][g.ta][m - 1](kc, a_src, b, c, g.ldc, n, g.alpha, g.beta, first,
                                                        g.stream_c, pf, g.lda, a_dst, 0);
    sgemm_detail::pack_a_then_kernel<Avx512Traits>(g, kc, a_src, a_dst, b, c, m, n, first, pf);
  }
  /// The kernel with the B sliver read where it is stored (plain B: depth row k at
  /// b_src + k*ldb), leaving the packed sliver at b_dst; thin tails pack first.
  static void kernel_packing_b(const GemmArgs& g, std::int64_t kc, const float* a, const float* b_src, float* b_dst,
                               float* c, int m, int n, bool first, sgemm_detail::PrefetchRows* pf) {
    if (n > 16 + kThin)
      return kPackingBKernels[pf->active()][g.ta][m - 1](kc, a, b_src, c, g.ldc, n, g.alpha, g.beta, first,
                                                         g.stream_c, pf, g.ldb, b_dst,
                                                         g.b_rows_ahead ? kPackBAhead : 0);
    sgemm_detail::pack_b_then_kernel<Avx512Traits>(g, kc, a, b_src, b_dst, c, m, n, first, pf);
  }
};

}  // namespace

void sgemm_avx512(const sgemm_detail::GemmArgs& g, ThreadPool* pool) {
  sgemm_detail::run_sgemm<Avx512Traits>(g, pool);
}

}  // namespace convgraph::cpu
