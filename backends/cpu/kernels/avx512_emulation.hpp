#pragma once
// Private to backends/cpu, for test builds only (CMake CONVGRAPH_EMULATE_AVX512=ON): the
// AVX-512 intrinsics the kernels use, written with AVX2 and plain loops, so that the
// AVX-512 level's own logic (16-lane vectors, its tile shapes, its masks and tails) runs
// and is checked on a host without AVX-512. qemu-user cannot run AVX-512 and no other
// emulator comes from Debian, so before this a change to that level's code ran first on
// whichever Zen 4 or Intel machine a later session drew.
//
// Each name is a macro for an emu512_ function of the same contract (Intel's intrinsics
// guide): included after <immintrin.h>, every later use in the file calls the emulation.
// Results are the hardware's bit for bit, lane by lane, except where the hardware's own
// order is unspecified (reduce_add sums in the same tree GCC's header uses). Only what the
// kernels call is here: a new intrinsic in an AVX-512 branch fails to compile in the
// emulated build until it is added (the AVX2 target refuses the real one).
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#define CONVGRAPH_EMU512 static inline __attribute__((always_inline, target("avx2,fma")))

namespace convgraph::cpu::emu512 {

/// The two 256-bit halves of a 512-bit vector and back (register moves, no memory).
struct Halves {
  __m256 lo, hi;
};
CONVGRAPH_EMU512 Halves split(__m512 v) {
  return {__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
          __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)};
}
CONVGRAPH_EMU512 __m512 join(__m256 lo, __m256 hi) {
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
template <class T, class V>
CONVGRAPH_EMU512 T lane(V v, int i) {
  T x;
  std::memcpy(&x, reinterpret_cast<const char*>(&v) + i * sizeof(T), sizeof x);
  return x;
}
template <class T, class V>
CONVGRAPH_EMU512 void set_lane(V& v, int i, T x) {
  std::memcpy(reinterpret_cast<char*>(&v) + i * sizeof(T), &x, sizeof x);
}

}  // namespace convgraph::cpu::emu512

// ---- loads and stores (masked lanes are never touched: they may lie past a buffer's end)
CONVGRAPH_EMU512 __m512 emu512_loadu_ps(const void* p) {
  __m512 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
CONVGRAPH_EMU512 __m512i emu512_loadu_si512(const void* p) {
  __m512i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
CONVGRAPH_EMU512 void emu512_storeu_ps(void* p, __m512 v) { std::memcpy(p, &v, sizeof v); }
/// AVX's masked loads and stores leave the masked lanes untouched, as AVX-512's do.
CONVGRAPH_EMU512 __m256i lane_bits(unsigned k, int shift) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i k8 = _mm256_set1_epi32(static_cast<int>((k >> shift) & 0xFFu));
  return _mm256_cmpeq_epi32(_mm256_and_si256(k8, bit), bit);
}
CONVGRAPH_EMU512 __m256i lane_bits_pd(unsigned k, int shift) {
  const __m256i bit = _mm256_setr_epi64x(1, 2, 4, 8);
  const __m256i k4 = _mm256_set1_epi64x(static_cast<long long>((k >> shift) & 0xFu));
  return _mm256_cmpeq_epi64(_mm256_and_si256(k4, bit), bit);
}
CONVGRAPH_EMU512 __m512 emu512_maskz_loadu_ps(__mmask16 k, const void* p) {
  const auto* f = static_cast<const float*>(p);
  return convgraph::cpu::emu512::join(_mm256_maskload_ps(f, lane_bits(k, 0)), _mm256_maskload_ps(f + 8, lane_bits(k, 8)));
}
CONVGRAPH_EMU512 __m512d emu512_maskz_loadu_pd(__mmask8 k, const void* p) {
  const auto* d = static_cast<const double*>(p);
  const __m256d lo = _mm256_maskload_pd(d, lane_bits_pd(k, 0)), hi = _mm256_maskload_pd(d + 4, lane_bits_pd(k, 4));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}
CONVGRAPH_EMU512 void emu512_mask_storeu_ps(void* p, __mmask16 k, __m512 v) {
  auto* f = static_cast<float*>(p);
  const auto h = convgraph::cpu::emu512::split(v);
  _mm256_maskstore_ps(f, lane_bits(k, 0), h.lo);
  _mm256_maskstore_ps(f + 8, lane_bits(k, 8), h.hi);
}
CONVGRAPH_EMU512 void emu512_mask_storeu_pd(void* p, __mmask8 k, __m512d v) {
  auto* d = static_cast<double*>(p);
  _mm256_maskstore_pd(d, lane_bits_pd(k, 0), __builtin_shufflevector(v, v, 0, 1, 2, 3));
  _mm256_maskstore_pd(d + 4, lane_bits_pd(k, 4), __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
CONVGRAPH_EMU512 __m512 emu512_mask_i32gather_ps(__m512 src, __mmask16 k, __m512i index, const void* base,
                                                 int scale) {
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) {
      const auto at = static_cast<std::int64_t>(convgraph::cpu::emu512::lane<std::int32_t>(index, i)) * scale;
      float x;
      std::memcpy(&x, static_cast<const char*>(base) + at, sizeof x);
      convgraph::cpu::emu512::set_lane(src, i, x);
    }
  return src;
}

// ---- arithmetic, by 256-bit halves (fmadd stays fused)
CONVGRAPH_EMU512 __m512 emu512_add_ps(__m512 a, __m512 b) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  return convgraph::cpu::emu512::join(_mm256_add_ps(x.lo, y.lo), _mm256_add_ps(x.hi, y.hi));
}
CONVGRAPH_EMU512 __m512 emu512_mul_ps(__m512 a, __m512 b) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  return convgraph::cpu::emu512::join(_mm256_mul_ps(x.lo, y.lo), _mm256_mul_ps(x.hi, y.hi));
}
CONVGRAPH_EMU512 __m512 emu512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b),
             z = convgraph::cpu::emu512::split(c);
  return convgraph::cpu::emu512::join(_mm256_fmadd_ps(x.lo, y.lo, z.lo), _mm256_fmadd_ps(x.hi, y.hi, z.hi));
}
CONVGRAPH_EMU512 __m512i emu512_mullo_epi32(__m512i a, __m512i b) {
  __m512i r = a;
  for (int i = 0; i < 16; ++i)
    convgraph::cpu::emu512::set_lane(r, i,
                                     static_cast<std::int32_t>(static_cast<std::uint32_t>(
                                         convgraph::cpu::emu512::lane<std::int32_t>(a, i)) *
                                                               static_cast<std::uint32_t>(
                                         convgraph::cpu::emu512::lane<std::int32_t>(b, i))));
  return r;
}
/// GCC's order: the 256-bit halves added, then the 128-bit halves, then pairs.
CONVGRAPH_EMU512 float emu512_reduce_add_ps(__m512 a) {
  const auto h = convgraph::cpu::emu512::split(a);
  const __m256 s8 = _mm256_add_ps(h.lo, h.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// ---- constants and conversions
CONVGRAPH_EMU512 __m512 emu512_set1_ps(float x) {
  const __m256 h = _mm256_set1_ps(x);
  return convgraph::cpu::emu512::join(h, h);
}
CONVGRAPH_EMU512 __m512i emu512_set1_epi32(int x) {
  __m512i v{};
  for (int i = 0; i < 16; ++i) convgraph::cpu::emu512::set_lane<std::int32_t>(v, i, x);
  return v;
}
CONVGRAPH_EMU512 __m512i emu512_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8,
                                           int e9, int e10, int e11, int e12, int e13, int e14, int e15) {
  const std::int32_t e[16] = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
  __m512i v;
  std::memcpy(&v, e, sizeof v);
  return v;
}
CONVGRAPH_EMU512 __m512d emu512_cvtps_pd(__m256 a) {
  __m512d v;
  for (int i = 0; i < 8; ++i)
    convgraph::cpu::emu512::set_lane(v, i, static_cast<double>(convgraph::cpu::emu512::lane<float>(a, i)));
  return v;
}
CONVGRAPH_EMU512 __m256 emu512_castps512_ps256(__m512 a) { return convgraph::cpu::emu512::split(a).lo; }
CONVGRAPH_EMU512 __m512 emu512_castps256_ps512(__m256 a) { return convgraph::cpu::emu512::join(a, _mm256_setzero_ps()); }
CONVGRAPH_EMU512 __m256 emu512_extractf32x8_ps(__m512 a, int imm) {
  const auto h = convgraph::cpu::emu512::split(a);
  return (imm & 1) != 0 ? h.hi : h.lo;
}
CONVGRAPH_EMU512 __m512 emu512_insertf32x8(__m512 a, __m256 b, int imm) {
  const auto h = convgraph::cpu::emu512::split(a);
  return (imm & 1) != 0 ? convgraph::cpu::emu512::join(h.lo, b) : convgraph::cpu::emu512::join(b, h.hi);
}

// ---- lane moves
CONVGRAPH_EMU512 __m512 emu512_permutexvar_ps(__m512i index, __m512 a) {
  __m512 r = a;
  for (int i = 0; i < 16; ++i)
    convgraph::cpu::emu512::set_lane(
        r, i, convgraph::cpu::emu512::lane<float>(a, convgraph::cpu::emu512::lane<std::int32_t>(index, i) & 15));
  return r;
}
CONVGRAPH_EMU512 __m512 emu512_permutex2var_ps(__m512 a, __m512i index, __m512 b) {
  __m512 r = a;
  for (int i = 0; i < 16; ++i) {
    const std::int32_t j = convgraph::cpu::emu512::lane<std::int32_t>(index, i);
    convgraph::cpu::emu512::set_lane(r, i, convgraph::cpu::emu512::lane<float>((j & 16) != 0 ? b : a, j & 15));
  }
  return r;
}
/// 128-bit blocks: two of a (imm bits 0-1, 2-3), then two of b (4-5, 6-7).
CONVGRAPH_EMU512 __m512 emu512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
  __m512 r = a;
  for (int q = 0; q < 4; ++q) {
    const int from = (imm >> (2 * q)) & 3;
    std::memcpy(reinterpret_cast<char*>(&r) + 16 * q, reinterpret_cast<const char*>(q < 2 ? &a : &b) + 16 * from, 16);
  }
  return r;
}
/// Within each 128-bit block: unpacklo_ps gives a0 b0 a1 b1, unpackhi_ps a2 b2 a3 b3;
/// unpacklo_pd a0 b0, unpackhi_pd a1 b1 (in doubles).
CONVGRAPH_EMU512 __m512 emu512_unpacklo_ps(__m512 a, __m512 b) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  return convgraph::cpu::emu512::join(_mm256_unpacklo_ps(x.lo, y.lo), _mm256_unpacklo_ps(x.hi, y.hi));
}
CONVGRAPH_EMU512 __m512 emu512_unpackhi_ps(__m512 a, __m512 b) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  return convgraph::cpu::emu512::join(_mm256_unpackhi_ps(x.lo, y.lo), _mm256_unpackhi_ps(x.hi, y.hi));
}
CONVGRAPH_EMU512 __m512d emu512_unpacklo_pd(__m512d a, __m512d b) {
  __m512d r = a;
  for (int q = 0; q < 4; ++q) {
    convgraph::cpu::emu512::set_lane(r, 2 * q, convgraph::cpu::emu512::lane<double>(a, 2 * q));
    convgraph::cpu::emu512::set_lane(r, 2 * q + 1, convgraph::cpu::emu512::lane<double>(b, 2 * q));
  }
  return r;
}
CONVGRAPH_EMU512 __m512d emu512_unpackhi_pd(__m512d a, __m512d b) {
  __m512d r = a;
  for (int q = 0; q < 4; ++q) {
    convgraph::cpu::emu512::set_lane(r, 2 * q, convgraph::cpu::emu512::lane<double>(a, 2 * q + 1));
    convgraph::cpu::emu512::set_lane(r, 2 * q + 1, convgraph::cpu::emu512::lane<double>(b, 2 * q + 1));
  }
  return r;
}

// ---- masks
CONVGRAPH_EMU512 __m512 emu512_mask_blend_ps(__mmask16 k, __m512 a, __m512 b) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  return convgraph::cpu::emu512::join(_mm256_blendv_ps(x.lo, y.lo, _mm256_castsi256_ps(lane_bits(k, 0))),
                                      _mm256_blendv_ps(x.hi, y.hi, _mm256_castsi256_ps(lane_bits(k, 8))));
}
CONVGRAPH_EMU512 __m512 emu512_maskz_mov_ps(__mmask16 k, __m512 a) {
  return emu512_mask_blend_ps(k, __m512{}, a);
}
CONVGRAPH_EMU512 __mmask16 emu512_movepi32_mask(__m512i a) {
  unsigned k = 0;
  for (int i = 0; i < 16; ++i) k |= (convgraph::cpu::emu512::lane<std::int32_t>(a, i) < 0 ? 1u : 0u) << i;
  return static_cast<__mmask16>(k);
}
/// The predicate is an immediate in the instruction: the kernels' few are listed.
CONVGRAPH_EMU512 __mmask16 emu512_cmp_ps_mask(__m512 a, __m512 b, int predicate) {
  const auto x = convgraph::cpu::emu512::split(a), y = convgraph::cpu::emu512::split(b);
  __m256 lo, hi;
  switch (predicate) {
    case _CMP_EQ_OQ: lo = _mm256_cmp_ps(x.lo, y.lo, _CMP_EQ_OQ), hi = _mm256_cmp_ps(x.hi, y.hi, _CMP_EQ_OQ); break;
    case _CMP_GT_OQ: lo = _mm256_cmp_ps(x.lo, y.lo, _CMP_GT_OQ), hi = _mm256_cmp_ps(x.hi, y.hi, _CMP_GT_OQ); break;
    case _CMP_ORD_Q: lo = _mm256_cmp_ps(x.lo, y.lo, _CMP_ORD_Q), hi = _mm256_cmp_ps(x.hi, y.hi, _CMP_ORD_Q); break;
    case _CMP_NLE_UQ: lo = _mm256_cmp_ps(x.lo, y.lo, _CMP_NLE_UQ), hi = _mm256_cmp_ps(x.hi, y.hi, _CMP_NLE_UQ); break;
    default: __builtin_trap();  // add the kernel's new predicate here
  }
  return static_cast<__mmask16>(static_cast<unsigned>(_mm256_movemask_ps(lo)) |
                                static_cast<unsigned>(_mm256_movemask_ps(hi)) << 8);
}
CONVGRAPH_EMU512 __mmask16 emu512_mask_cmp_ps_mask(__mmask16 k, __m512 a, __m512 b, int predicate) {
  return static_cast<__mmask16>(k & emu512_cmp_ps_mask(a, b, predicate));
}

// The rest carry the AVX-512 target in GCC's headers, though they need no instruction of it.
CONVGRAPH_EMU512 __m512 emu512_setzero_ps() { return __m512{}; }
CONVGRAPH_EMU512 __m512d emu512_setzero_pd() { return __m512d{}; }
CONVGRAPH_EMU512 __m512d emu512_castps_pd(__m512 a) { return reinterpret_cast<__m512d>(a); }
CONVGRAPH_EMU512 __m512 emu512_castpd_ps(__m512d a) { return reinterpret_cast<__m512>(a); }
// The aligned forms fault on an unaligned address, as the hardware's do.
CONVGRAPH_EMU512 void emu512_check_aligned(const void* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) __builtin_trap();
}
CONVGRAPH_EMU512 __m512 emu512_load_ps(const void* p) {
  emu512_check_aligned(p);
  return emu512_loadu_ps(p);
}
CONVGRAPH_EMU512 void emu512_store_ps(void* p, __m512 v) {
  emu512_check_aligned(p);
  emu512_storeu_ps(p, v);
}
CONVGRAPH_EMU512 void emu512_stream_ps(void* p, __m512 v) {
  emu512_check_aligned(p);
  emu512_storeu_ps(p, v);
}

// Every later use in the including file calls the emulation (some are macros in GCC's
// headers without optimisation: replaced the same way).
#undef _mm512_loadu_ps
#define _mm512_loadu_ps emu512_loadu_ps
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 emu512_loadu_si512
#undef _mm512_load_ps
#define _mm512_load_ps emu512_load_ps
#undef _mm512_storeu_ps
#define _mm512_storeu_ps emu512_storeu_ps
#undef _mm512_store_ps
#define _mm512_store_ps emu512_store_ps
#undef _mm512_stream_ps
#define _mm512_stream_ps emu512_stream_ps
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps emu512_maskz_loadu_ps
#undef _mm512_maskz_loadu_pd
#define _mm512_maskz_loadu_pd emu512_maskz_loadu_pd
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps emu512_mask_storeu_ps
#undef _mm512_mask_storeu_pd
#define _mm512_mask_storeu_pd emu512_mask_storeu_pd
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps emu512_mask_i32gather_ps
#undef _mm512_add_ps
#define _mm512_add_ps emu512_add_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps emu512_mul_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps emu512_fmadd_ps
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 emu512_mullo_epi32
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps emu512_reduce_add_ps
#undef _mm512_set1_ps
#define _mm512_set1_ps emu512_set1_ps
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 emu512_set1_epi32
#undef _mm512_setr_epi32
#define _mm512_setr_epi32 emu512_setr_epi32
#undef _mm512_setzero_ps
#define _mm512_setzero_ps emu512_setzero_ps
#undef _mm512_setzero_pd
#define _mm512_setzero_pd emu512_setzero_pd
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd emu512_cvtps_pd
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 emu512_castps512_ps256
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 emu512_castps256_ps512
#undef _mm512_castps_pd
#define _mm512_castps_pd emu512_castps_pd
#undef _mm512_castpd_ps
#define _mm512_castpd_ps emu512_castpd_ps
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps emu512_extractf32x8_ps
#undef _mm512_insertf32x8
#define _mm512_insertf32x8 emu512_insertf32x8
#undef _mm512_permutexvar_ps
#define _mm512_permutexvar_ps emu512_permutexvar_ps
#undef _mm512_permutex2var_ps
#define _mm512_permutex2var_ps emu512_permutex2var_ps
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4 emu512_shuffle_f32x4
#undef _mm512_unpacklo_ps
#define _mm512_unpacklo_ps emu512_unpacklo_ps
#undef _mm512_unpackhi_ps
#define _mm512_unpackhi_ps emu512_unpackhi_ps
#undef _mm512_unpacklo_pd
#define _mm512_unpacklo_pd emu512_unpacklo_pd
#undef _mm512_unpackhi_pd
#define _mm512_unpackhi_pd emu512_unpackhi_pd
#undef _mm512_mask_blend_ps
#define _mm512_mask_blend_ps emu512_mask_blend_ps
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps emu512_maskz_mov_ps
#undef _mm512_movepi32_mask
#define _mm512_movepi32_mask emu512_movepi32_mask
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask emu512_cmp_ps_mask
#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask emu512_mask_cmp_ps_mask
