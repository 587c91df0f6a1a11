// AVX2/FMA kernel family for sgemm: a 6x16 register block (12 ymm accumulators, two B
// vectors, one broadcast; 15 of the 16 ymm registers). Function-level target attributes
// keep it available in a portable build; sgemm.cpp picks it at run time.
#include <cstdint>

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

// The A sliver is k-major (a[k*6 + i], KMAJOR) or row-major with row stride kKC
// (a[i*kKC + k]), whichever op(A)'s storage gives by a plain copy.
template <bool KMAJOR>
CG_AVX2 void kernel_6x16(std::int64_t kc, const float* __restrict a, const float* __restrict b,
                         float* c, std::int64_t ldc, int m, int n, float alpha, float beta,
                         bool first) {
  constexpr std::int64_t kStep = KMAJOR ? kMR : 1;
  constexpr std::int64_t kRow = KMAJOR ? 1 : kKC;
  __m256 c0[kMR], c1[kMR];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    c0[i] = _mm256_setzero_ps();
    c1[i] = _mm256_setzero_ps();
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i)
    if (i < m) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
#pragma GCC unroll 4
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_set1_ps(a[i * kRow]);
      c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
    }
    a += kStep;
    b += kNR;
  }

  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vb = _mm256_set1_ps(beta);
  const bool full = n == kNR;
  const __m256i k0 = lane_mask(n), k1 = lane_mask(n - 8);
  const bool read_c = !first || beta != 0.0f;
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    if (i < m) {
      float* cr = c + i * ldc;
      __m256 r0 = _mm256_mul_ps(va, c0[i]);
      __m256 r1 = _mm256_mul_ps(va, c1[i]);
      if (full) {
        if (read_c) {
          r0 = first ? _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), r0)
                     : _mm256_add_ps(_mm256_loadu_ps(cr), r0);
          r1 = first ? _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), r1)
                     : _mm256_add_ps(_mm256_loadu_ps(cr + 8), r1);
        }
        _mm256_storeu_ps(cr, r0);
        _mm256_storeu_ps(cr + 8, r1);
      } else {
        if (read_c) {
          const __m256 o0 = _mm256_maskload_ps(cr, k0);
          const __m256 o1 = _mm256_maskload_ps(cr + 8, k1);
          r0 = first ? _mm256_fmadd_ps(vb, o0, r0) : _mm256_add_ps(o0, r0);
          r1 = first ? _mm256_fmadd_ps(vb, o1, r1) : _mm256_add_ps(o1, r1);
        }
        _mm256_maskstore_ps(cr, k0, r0);
        _mm256_maskstore_ps(cr + 8, k1, r1);
      }
    }
  }
}

// Rows i0..i0+m of op(A), depth p0..p0+kc, copied in the layout the kernel reads; rows
// m..5 are zeroed (the kernel computes all six and stores m).
CG_AVX2 void pack_a_avx2(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0,
                         std::int64_t kc, float* dst) {
  if (g.ta) {
    const float* src = g.A + p0 * g.lda + i0;
    for (std::int64_t k = 0; k < kc; ++k) {
      for (int i = 0; i < m; ++i) dst[k * kMR + i] = src[k * g.lda + i];
      for (int i = m; i < kMR; ++i) dst[k * kMR + i] = 0.0f;
    }
    return;
  }
  const std::int64_t kfull = kc - kc % 8;
  for (int i = 0; i < kMR; ++i) {
    float* d = dst + i * kKC;
    if (i >= m) {
      for (std::int64_t k = 0; k < kc; ++k) d[k] = 0.0f;
      continue;
    }
    const float* src = g.A + (i0 + i) * g.lda + p0;
    for (std::int64_t k = 0; k < kfull; k += 8) _mm256_store_ps(d + k, _mm256_loadu_ps(src + k));
    for (std::int64_t k = kfull; k < kc; ++k) d[k] = src[k];
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
  sgemm_detail::pack_b_generic<kNR>(g, p0, kc, j0, n, dst);
}

struct Avx2Traits {
  static constexpr int kMR = convgraph::cpu::kMR;
  static constexpr int kNR = convgraph::cpu::kNR;
  static constexpr std::int64_t kKC = convgraph::cpu::kKC;
  static constexpr std::int64_t kABuf = kMR * kKC;
  static constexpr std::int64_t kAPanel = 1;
  static void pack_a(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                     float* dst) {
    pack_a_avx2(g, i0, m, p0, kc, dst);
  }
  static void pack_b(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                     float* dst) {
    pack_b_avx2(g, p0, kc, j0, n, dst);
  }
  static void pack_a_panel(const GemmArgs& g, std::int64_t i0, std::int64_t m, std::int64_t p0,
                           std::int64_t kc, float* dst) {
    sgemm_detail::pack_a_panel_by_sliver<Avx2Traits>(g, i0, m, p0, kc, dst);
  }
  static void pack_b_panel(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                           std::int64_t n, float* dst) {
    sgemm_detail::pack_b_panel_by_sliver<Avx2Traits>(g, p0, kc, j0, n, dst);
  }
  static void kernel(const GemmArgs& g, std::int64_t kc, const float* a, const float* b, float* c,
                     int m, int n, bool first) {
    if (g.ta)
      kernel_6x16<true>(kc, a, b, c, g.ldc, m, n, g.alpha, g.beta, first);
    else
      kernel_6x16<false>(kc, a, b, c, g.ldc, m, n, g.alpha, g.beta, first);
  }
};

}  // namespace

void sgemm_avx2(const sgemm_detail::GemmArgs& g, ThreadPool* pool) {
  sgemm_detail::run_sgemm<Avx2Traits>(g, pool);
}

}  // namespace convgraph::cpu
