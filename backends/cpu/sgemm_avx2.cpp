// AVX2/FMA kernel family for sgemm: a 6x16 register block (12 ymm accumulators, two B
// vectors, one broadcast; 15 of the 16 ymm registers). Function-level target attributes
// keep it available in a portable build; sgemm.cpp picks it at run time.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include <immintrin.h>

#include "backends/cpu/sgemm_driver.hpp"

#define CG_AVX2 __attribute__((target("avx2,fma")))

namespace convgraph::cpu {
namespace {

using sgemm_detail::GemmArgs;

constexpr int kMR = 6;
constexpr int kNR = 16;
constexpr std::int64_t kKC = 256;

// Lane mask for the first n (clamped to 0..8) floats of a ymm load/store.
CG_AVX2 inline __m256i lane_mask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

// One register block: C(MROWS x n) (+)= alpha * A-sliver * B-sliver, n <= 8 * NV (a sliver's
// rows past M are not computed: M = 64 ends in a 4-row sliver). The A sliver is k-major
// (a[k*6 + i], KMAJOR) or row-major with row stride kKC (a[i*kKC + k]), whichever op(A)'s
// storage gives by a plain copy. NV: B vectors per step, 1 for an edge sliver of at most 8
// columns (half the FMAs: N = 147 or 81 ends in one).
// PREFETCH: the driver's pf->share() prefetch lines, one per depth step (NV == 2; the
// AVX-512 kernel says why); an NV == 1 edge sliver issues its share in one go after its loop.
// PACK (NV == 2), as the AVX-512 kernel: Pack::a reads the A sliver where it is stored (its
// rows, or with KMAJOR its depth rows, `ld` apart) and leaves it packed at pack_to for the
// tile's other calls; Pack::b reads a whole 16-column B sliver where it is stored (depth
// row k at b + k*ld) and leaves it packed at pack_to, fetching the stored row b_ahead steps
// on into L1. The copies run among the FMAs instead of in a pass before them.
enum class Pack { none, a, b };
template <int MROWS, int NV, bool KMAJOR, bool PREFETCH, Pack PACK = Pack::none>
CG_AVX2 void kernel(std::int64_t kc, const float* a, const float* __restrict b, float* c, std::int64_t ldc,
                    int n, float alpha, float beta, bool first, bool stream, sgemm_detail::PrefetchRows* pf,
                    std::int64_t ld, float* pack_to, std::int64_t b_ahead) {
  constexpr bool PACK_A = PACK == Pack::a, PACK_B = PACK == Pack::b;
  static_assert(PACK == Pack::none || NV == 2);
  sgemm_detail::PrefetchRows lines;  // a local copy: no aliasing with a, b or c
  std::int64_t prefetches = 0;
  if constexpr (PREFETCH) {
    lines = *pf;
    prefetches = lines.share();
  }
  constexpr std::int64_t kRow = KMAJOR ? 1 : kKC;
  // Row-major Pack::a: depths k0..k0+8 of the sliver's rows, copied ahead of their use (so
  // `a` may point into pack_to: neither is restrict).
  auto copy_depths = [](const float* src, std::int64_t lds, float* dst, std::int64_t k0, std::int64_t kc) CG_AVX2 {
    if (k0 + 8 <= kc) {
#pragma GCC unroll 6
      for (int i = 0; i < MROWS; ++i) _mm256_storeu_ps(dst + i * kKC + k0, _mm256_loadu_ps(src + i * lds + k0));
      return;
    }
    const __m256i km = lane_mask(static_cast<int>(kc - k0));
#pragma GCC unroll 6
    for (int i = 0; i < MROWS; ++i)
      _mm256_maskstore_ps(dst + i * kKC + k0, km, _mm256_maskload_ps(src + i * lds + k0, km));
  };
  const float* stored = a;
  if constexpr (PACK_A && !KMAJOR) {
    copy_depths(stored, ld, pack_to, 0, kc);
    a = pack_to;
  }
  const std::int64_t a_step = PACK_A && KMAJOR ? ld : KMAJOR ? kMR : 1;
  const std::int64_t b_step = PACK_B ? ld : kNR;
  __m256 c0[MROWS], c1[MROWS];
#pragma GCC unroll 6
  for (int i = 0; i < MROWS; ++i) {
    c0[i] = _mm256_setzero_ps();
    c1[i] = _mm256_setzero_ps();
  }
  // Fetch the C tile while the k loop runs, unless it is streamed out (the driver streams
  // only C written in one pass with beta 0; whole lines only).
  stream = stream && n == kNR;
#pragma GCC unroll 6
  for (int i = 0; i < MROWS; ++i)
    if (!stream) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
  if constexpr (NV == 1) {
    // Few accumulators cannot hide the FMA latency: even and odd depth steps go to
    // separate ones (c0, c1), added at the end.
    std::int64_t k = 0;
#pragma GCC unroll 2
    for (; k + 1 < kc; k += 2) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + kNR);
#pragma GCC unroll 6
      for (int i = 0; i < MROWS; ++i) {
        c0[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * kRow]), b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * kRow + a_step]), b1, c1[i]);
      }
      a += 2 * a_step;
      b += 2 * kNR;
    }
    if (k < kc) {
      const __m256 b0 = _mm256_load_ps(b);
#pragma GCC unroll 6
      for (int i = 0; i < MROWS; ++i) c0[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * kRow]), b0, c0[i]);
    }
#pragma GCC unroll 6
    for (int i = 0; i < MROWS; ++i) c0[i] = _mm256_add_ps(c0[i], c1[i]);
  } else {
#pragma GCC unroll 4
    for (std::int64_t k = 0; k < kc; ++k) {
      if constexpr (PACK_A && !KMAJOR)
        if ((k & 7) == 0 && k + 8 < kc) copy_depths(stored, ld, pack_to, k + 8, kc);
      if constexpr (PACK_B)
        if (b_ahead > 0 && k + b_ahead < kc) sgemm_detail::prefetch_row_l1<kNR>(b + b_ahead * ld);
      __m256 b0, b1;
      if constexpr (PACK_B) {
        b0 = _mm256_loadu_ps(b);
        b1 = _mm256_loadu_ps(b + 8);
        _mm256_store_ps(pack_to + k * kNR, b0);
        _mm256_store_ps(pack_to + k * kNR + 8, b1);
      } else {
        b0 = _mm256_load_ps(b);
        b1 = _mm256_load_ps(b + 8);
      }
#pragma GCC unroll 6
      for (int i = 0; i < MROWS; ++i) {
        const __m256 ai = _mm256_set1_ps(a[i * kRow]);
        c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
      }
      if constexpr (PACK_A && KMAJOR) {  // the stored depth row's MROWS floats
        if constexpr (MROWS == kMR) {
          _mm_storeu_ps(pack_to + k * kMR, _mm_loadu_ps(a));
          _mm_storel_pi(reinterpret_cast<__m64*>(pack_to + k * kMR + 4),
                        _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(a + 4))));
        } else {
#pragma GCC unroll 6
          for (int i = 0; i < MROWS; ++i) pack_to[k * kMR + i] = a[i];
        }
      }
      if constexpr (PREFETCH)
        if (k < prefetches) lines.one();
      a += a_step;
      b += b_step;
    }
  }
  if constexpr (PREFETCH) {
    // The share past the depth (all of it for NV == 1).
    for (std::int64_t k = NV == 2 ? kc : 0; k < prefetches; ++k) lines.one();
    *pf = lines;
  }

  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vb = _mm256_set1_ps(beta);
  const bool full = n == kNR;
  const __m256i k0 = lane_mask(n), k1 = lane_mask(n - 8);
  const bool read_c = !first || beta != 0.0f;
#pragma GCC unroll 6
  for (int i = 0; i < MROWS; ++i) {
    float* cr = c + i * ldc;
    __m256 r0 = _mm256_mul_ps(va, c0[i]);
    __m256 r1 = _mm256_mul_ps(va, c1[i]);
    if (full) {
      if (read_c) {
        r0 = first ? _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), r0) : _mm256_add_ps(_mm256_loadu_ps(cr), r0);
        r1 = first ? _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), r1) : _mm256_add_ps(_mm256_loadu_ps(cr + 8), r1);
      }
      if (stream) {
        _mm256_stream_ps(cr, r0);
        _mm256_stream_ps(cr + 8, r1);
      } else {
        _mm256_storeu_ps(cr, r0);
        _mm256_storeu_ps(cr + 8, r1);
      }
    } else {
      if (read_c) {
        const __m256 o0 = _mm256_maskload_ps(cr, k0);
        const __m256 o1 = NV == 2 ? _mm256_maskload_ps(cr + 8, k1) : _mm256_setzero_ps();
        r0 = first ? _mm256_fmadd_ps(vb, o0, r0) : _mm256_add_ps(o0, r0);
        r1 = first ? _mm256_fmadd_ps(vb, o1, r1) : _mm256_add_ps(o1, r1);
      }
      _mm256_maskstore_ps(cr, k0, r0);
      if (NV == 2) _mm256_maskstore_ps(cr + 8, k1, r1);
    }
  }
}

using KernelFn = void (*)(std::int64_t, const float*, const float*, float*, std::int64_t, int, float, float, bool,
                          bool, sgemm_detail::PrefetchRows*, std::int64_t, float*, std::int64_t);

// kKernels[prefetch][kmajor][nv - 1][mrows - 1]; kPacking{A,B}Kernels[prefetch][kmajor][mrows - 1].
template <bool PREFETCH, bool KMAJOR, int NV, Pack PACK, std::size_t... I>
constexpr std::array<KernelFn, kMR> kernel_row(std::index_sequence<I...>) {
  return {&kernel<static_cast<int>(I) + 1, NV, KMAJOR, PREFETCH, PACK>...};
}
template <bool PREFETCH, int NV, Pack PACK>
constexpr std::array<std::array<KernelFn, kMR>, 2> kernel_rows() {
  return {kernel_row<PREFETCH, false, NV, PACK>(std::make_index_sequence<kMR>()),
          kernel_row<PREFETCH, true, NV, PACK>(std::make_index_sequence<kMR>())};
}
template <bool PREFETCH>
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kernel_table() {
  const auto one = kernel_rows<PREFETCH, 1, Pack::none>(), two = kernel_rows<PREFETCH, 2, Pack::none>();
  return {{{one[0], two[0]}, {one[1], two[1]}}};
}
constexpr std::array<std::array<std::array<std::array<KernelFn, kMR>, 2>, 2>, 2> kKernels = {kernel_table<false>(),
                                                                                           kernel_table<true>()};
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kPackingAKernels = {
    kernel_rows<false, 2, Pack::a>(), kernel_rows<true, 2, Pack::a>()};
constexpr std::array<std::array<std::array<KernelFn, kMR>, 2>, 2> kPackingBKernels = {
    kernel_rows<false, 2, Pack::b>(), kernel_rows<true, 2, Pack::b>()};

/// How many depth steps ahead kernel_packing_b fetches the stored B rows into L1 where the
/// driver asks for it (GemmArgs::b_rows_ahead), as the AVX-512 kernel.
constexpr std::int64_t kPackBAhead = 8;

// Rows i0..i0+m of op(A), depth p0..p0+kc, copied in the layout the kernel reads (the
// kernel for an m-row sliver reads rows 0..m-1 alone). dst may be a depth inside a
// sliver (a joined batch's piece): the row-major copy stores unaligned.
CG_AVX2 void pack_a_avx2(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0,
                         std::int64_t kc, float* dst) {
  if (g.ta) {
    const float* src = g.A + p0 * g.lda + i0;
    if (m == kMR) {  // six contiguous floats per depth step: one 4-float and one 2-float move
      for (std::int64_t k = 0; k < kc; ++k) {
        const float* s = src + k * g.lda;
        _mm_storeu_ps(dst + k * kMR, _mm_loadu_ps(s));
        _mm_storel_pi(reinterpret_cast<__m64*>(dst + k * kMR + 4),
                      _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(s + 4))));
      }
      return;
    }
    for (std::int64_t k = 0; k < kc; ++k)
      for (int i = 0; i < m; ++i) dst[k * kMR + i] = src[k * g.lda + i];
    return;
  }
  const std::int64_t kfull = kc - kc % 8;
  for (int i = 0; i < m; ++i) {
    float* d = dst + i * kKC;
    const float* src = g.A + (i0 + i) * g.lda + p0;
    for (std::int64_t k = 0; k < kfull; k += 8) _mm256_storeu_ps(d + k, _mm256_loadu_ps(src + k));
    for (std::int64_t k = kfull; k < kc; ++k) d[k] = src[k];
  }
}

// dst[k*kNR + j] = src[j*ld + k] for j < n (zero for n <= j < kNR), k < kc: the sliver's
// columns are rows of B (transB; cpu.corrmm's grad weights), read 8 depth steps at a time
// and transposed 8x8 in registers rather than gathered one float at a time.
CG_AVX2 void pack_b_transposed_avx2(const float* src, std::int64_t ld, std::int64_t kc, int n,
                                    float* dst) {
  const std::int64_t kfull = kc - kc % 8;
  for (int half = 0; half < 2; ++half) {
    const int rows = std::clamp(n - 8 * half, 0, 8);
    const float* s = rows > 0 ? src + 8 * half * ld : src;
    float* d = dst + 8 * half;
    for (std::int64_t k = 0; k < kfull; k += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) r[j] = j < rows ? _mm256_loadu_ps(s + j * ld + k) : _mm256_setzero_ps();
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* o = d + k * kNR;
      _mm256_store_ps(o + 0 * kNR, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_store_ps(o + 1 * kNR, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_store_ps(o + 2 * kNR, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_store_ps(o + 3 * kNR, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_store_ps(o + 4 * kNR, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_store_ps(o + 5 * kNR, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_store_ps(o + 6 * kNR, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_store_ps(o + 7 * kNR, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    for (std::int64_t k = kfull; k < kc; ++k)
      for (int j = 0; j < 8; ++j) d[k * kNR + j] = j < rows ? s[j * ld + k] : 0.0f;
  }
}

CG_AVX2 void pack_b_avx2(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                         int n, float* dst) {
  if (!g.tb && n == kNR) {  // the common case: two contiguous 8-float runs per k
    const float* src = g.B + p0 * g.ldb + j0;
    for (std::int64_t k = 0; k < kc; ++k) {
      _mm256_store_ps(dst + k * kNR, _mm256_loadu_ps(src + k * g.ldb));
      _mm256_store_ps(dst + k * kNR + 8, _mm256_loadu_ps(src + k * g.ldb + 8));
    }
    return;
  }
  if (g.tb) {
    pack_b_transposed_avx2(g.B + j0 * g.ldb + p0, g.ldb, kc, n, dst);
    return;
  }
  sgemm_detail::pack_b_generic<kNR>(g, p0, kc, j0, n, dst);
}

// Columns j0..j0+n of op(B) = B, eight rows at a time across the panel: the eight rows are
// read as contiguous runs (the hardware prefetcher follows them; sliver by sliver, every
// 64-byte piece sits in a different row, often a different page) and each sliver gets 512
// contiguous bytes (row by row, the slivers' 16 KiB stride lands every store in one L1 set).
CG_AVX2 void pack_b_rows_avx2(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                              std::int64_t n, float* dst) {
  const std::int64_t full = n / kNR, rest = n % kNR;
  const __m256i k0 = lane_mask(static_cast<int>(rest)), k1 = lane_mask(static_cast<int>(rest) - 8);
  for (std::int64_t kb = 0; kb < kc; kb += 8) {
    const std::int64_t ke = std::min(kc, kb + 8);
    const float* src = g.B + (p0 + kb) * g.ldb + j0;
    for (std::int64_t q = 0; q < full; ++q) {
      float* d = dst + q * kc * kNR + kb * kNR;
      for (std::int64_t k = 0; k < ke - kb; ++k) {
        _mm256_store_ps(d + k * kNR, _mm256_loadu_ps(src + k * g.ldb + q * kNR));
        _mm256_store_ps(d + k * kNR + 8, _mm256_loadu_ps(src + k * g.ldb + q * kNR + 8));
      }
    }
    if (rest != 0) {
      float* d = dst + full * kc * kNR + kb * kNR;
      for (std::int64_t k = 0; k < ke - kb; ++k) {
        _mm256_store_ps(d + k * kNR, _mm256_maskload_ps(src + k * g.ldb + full * kNR, k0));
        _mm256_store_ps(d + k * kNR + 8, _mm256_maskload_ps(src + k * g.ldb + full * kNR + 8, k1));
      }
    }
  }
}

struct Avx2Traits : sgemm_detail::TraitsDefaults {
  static constexpr int kMR = convgraph::cpu::kMR;
  static constexpr int kNR = convgraph::cpu::kNR;
  static constexpr std::int64_t kKC = convgraph::cpu::kKC;
  static constexpr std::int64_t kABuf = kMR * kKC;
  static constexpr std::int64_t kAPanel = 1;
  // Half of L2 for the B block: on Zen 3 (512 KiB L2) a 3/4-full block leaves little room
  // for the C tile and A slivers passing through (forward 3x3 layers, best of 5: 0.76 ->
  // 0.81 of oneDNN; the medians over all layer shapes did not move beyond the noise).
  static constexpr std::int64_t kBBlockL2Eighths = 4;
  // One thread runs plain B sliver by sliver from depth blocks of 128 (the driver's default
  // is 256): see sliver_outer in sgemm_driver.hpp.
  static constexpr std::int64_t kSliverOuterMinDepth = 128;
  static void pack_a(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                     float* dst) {
    pack_a_avx2(g, i0, m, p0, kc, dst);
  }
  static std::int64_t a_depth_offset(const GemmArgs& g, std::int64_t k) { return g.ta ? k * kMR : k; }
  static void pack_b(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                     float* dst) {
    pack_b_avx2(g, p0, kc, j0, n, dst);
  }
  static void pack_b_panel(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                           std::int64_t n, float* dst) {
    if (!g.tb) return pack_b_rows_avx2(g, p0, kc, j0, n, dst);
    sgemm_detail::pack_b_panel_by_sliver<Avx2Traits>(g, p0, kc, j0, n, dst);
  }
  static void kernel(const GemmArgs& g, std::int64_t kc, const float* a, const float* b, float* c,
                     int m, int n, bool first, sgemm_detail::PrefetchRows* pf) {
    kKernels[pf->active()][g.ta][n > 8][m - 1](kc, a, b, c, g.ldc, n, g.alpha, g.beta, first, g.stream_c, pf, 0,
                                               nullptr, 0);
  }
  /// The kernel with the A sliver read where it is stored (its first element at a_src:
  /// op(A)(i, k) at a_src[k*lda + i] with A transposed, else a_src[i*lda + k]), leaving the
  /// packed sliver at a_dst; an edge sliver of at most 8 columns packs first.
  static void kernel_packing_a(const GemmArgs& g, std::int64_t kc, const float* a_src, float* a_dst,
                               const float* b, float* c, int m, int n, bool first,
                               sgemm_detail::PrefetchRows* pf) {
    if (n > 8)
      return kPackingAKernels[pf->active()][g.ta][m - 1](kc, a_src, b, c, g.ldc, n, g.alpha, g.beta, first,
                                                         g.stream_c, pf, g.lda, a_dst, 0);
    sgemm_detail::pack_a_then_kernel<Avx2Traits>(g, kc, a_src, a_dst, b, c, m, n, first, pf);
  }
  /// The kernel with the B sliver read where it is stored (plain B: depth row k at
  /// b_src + k*ldb), leaving the packed sliver at b_dst; an edge sliver packs first.
  static void kernel_packing_b(const GemmArgs& g, std::int64_t kc, const float* a, const float* b_src, float* b_dst,
                               float* c, int m, int n, bool first, sgemm_detail::PrefetchRows* pf) {
    if (n == kNR)
      return kPackingBKernels[pf->active()][g.ta][m - 1](kc, a, b_src, c, g.ldc, n, g.alpha, g.beta, first,
                                                         g.stream_c, pf, g.ldb, b_dst,
                                                         g.b_rows_ahead ? kPackBAhead : 0);
    sgemm_detail::pack_b_then_kernel<Avx2Traits>(g, kc, a, b_src, b_dst, c, m, n, first, pf);
  }
};

}  // namespace

void sgemm_avx2(const sgemm_detail::GemmArgs& g, ThreadPool* pool) {
  sgemm_detail::run_sgemm<Avx2Traits>(g, pool);
}

}  // namespace convgraph::cpu
