#pragma once
// Private to backends/cpu, for test builds only (CMake CONVGRAPH_EMULATE_AVX512=ON): the
// AVX-512 intrinsics the kernels use, written with AVX2 and plain loops, so that the
// AVX-512 level's own logic (16-lane vectors, its tile shapes, its masks and tails) runs
// and is checked on a host without AVX-512. qemu-user cannot run AVX-512 and no other
// emulator comes from Debian, so before this a change to that level's code ran first on
// whichever Zen 4 or Intel machine a later session drew.
//
// Each name is a macro for the function of the same contract (Intel's intrinsics guide) in
// namespace emu512: included after <immintrin.h>, every later use in the file calls the
// emulation. Results are the hardware's bit for bit, lane by lane, except where the
// hardware leaves them open: reduce_add sums in the tree GCC's header uses, and the upper
// half of castps256_ps512 is NaN. Masked lanes go through AVX's masked loads and stores,
// which the AVX2 level relies on already. Only what the kernels call is here: a new
// intrinsic in an AVX-512 branch fails to compile in the emulated build until it is added
// (the AVX2 target refuses the real one).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

// ---- loads and stores (masked lanes are never touched: they may lie past a buffer's end)
CONVGRAPH_EMU512 __m512 loadu_ps(const void* p) {
  __m512 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
CONVGRAPH_EMU512 __m512i loadu_si512(const void* p) {
  __m512i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
CONVGRAPH_EMU512 void storeu_ps(void* p, __m512 v) { std::memcpy(p, &v, sizeof v); }
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
CONVGRAPH_EMU512 __m512 maskz_loadu_ps(__mmask16 k, const void* p) {
  const auto* f = static_cast<const float*>(p);
  return join(_mm256_maskload_ps(f, lane_bits(k, 0)), _mm256_maskload_ps(f + 8, lane_bits(k, 8)));
}
CONVGRAPH_EMU512 __m512d maskz_loadu_pd(__mmask8 k, const void* p) {
  const auto* d = static_cast<const double*>(p);
  const __m256d lo = _mm256_maskload_pd(d, lane_bits_pd(k, 0)), hi = _mm256_maskload_pd(d + 4, lane_bits_pd(k, 4));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
}
CONVGRAPH_EMU512 void mask_storeu_ps(void* p, __mmask16 k, __m512 v) {
  auto* f = static_cast<float*>(p);
  const auto h = split(v);
  _mm256_maskstore_ps(f, lane_bits(k, 0), h.lo);
  _mm256_maskstore_ps(f + 8, lane_bits(k, 8), h.hi);
}
CONVGRAPH_EMU512 void mask_storeu_pd(void* p, __mmask8 k, __m512d v) {
  auto* d = static_cast<double*>(p);
  _mm256_maskstore_pd(d, lane_bits_pd(k, 0), __builtin_shufflevector(v, v, 0, 1, 2, 3));
  _mm256_maskstore_pd(d + 4, lane_bits_pd(k, 4), __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
CONVGRAPH_EMU512 __m512 mask_i32gather_ps(__m512 src, __mmask16 k, __m512i index, const void* base, int scale) {
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) {
      const auto at = static_cast<std::int64_t>(lane<std::int32_t>(index, i)) * scale;
      float x;
      std::memcpy(&x, static_cast<const char*>(base) + at, sizeof x);
      set_lane(src, i, x);
    }
  return src;
}

// ---- arithmetic: add and mul as GCC's and clang's vector operators (two AVX2 instructions
// each, IEEE like the hardware's); fmadd by 256-bit halves, so it stays fused
CONVGRAPH_EMU512 __m512 add_ps(__m512 a, __m512 b) { return a + b; }
CONVGRAPH_EMU512 __m512 mul_ps(__m512 a, __m512 b) { return a * b; }
CONVGRAPH_EMU512 __m512 fmadd_ps(__m512 a, __m512 b, __m512 c) {
  const auto x = split(a), y = split(b), z = split(c);
  return join(_mm256_fmadd_ps(x.lo, y.lo, z.lo), _mm256_fmadd_ps(x.hi, y.hi, z.hi));
}
CONVGRAPH_EMU512 __m512i mullo_epi32(__m512i a, __m512i b) {
  __m512i r = a;
  for (int i = 0; i < 16; ++i)
    set_lane(r, i,
             static_cast<std::int32_t>(static_cast<std::uint32_t>(lane<std::int32_t>(a, i)) *
                                       static_cast<std::uint32_t>(lane<std::int32_t>(b, i))));
  return r;
}
/// GCC's order: the 256-bit halves added, then the 128-bit halves, then pairs.
CONVGRAPH_EMU512 float reduce_add_ps(__m512 a) {
  const auto h = split(a);
  const __m256 s8 = _mm256_add_ps(h.lo, h.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// ---- constants and conversions
CONVGRAPH_EMU512 __m512 set1_ps(float x) {
  const __m256 h = _mm256_set1_ps(x);
  return join(h, h);
}
CONVGRAPH_EMU512 __m512i set1_epi32(int x) {
  __m512i v{};
  for (int i = 0; i < 16; ++i) set_lane<std::int32_t>(v, i, x);
  return v;
}
CONVGRAPH_EMU512 __m512i setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8, int e9,
                                    int e10, int e11, int e12, int e13, int e14, int e15) {
  const std::int32_t e[16] = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
  __m512i v;
  std::memcpy(&v, e, sizeof v);
  return v;
}
CONVGRAPH_EMU512 __m512d cvtps_pd(__m256 a) {
  __m512d v;
  for (int i = 0; i < 8; ++i) set_lane(v, i, static_cast<double>(lane<float>(a, i)));
  return v;
}
CONVGRAPH_EMU512 __m256 castps512_ps256(__m512 a) { return split(a).lo; }
/// The upper half is undefined on the hardware: NaN here, so code that reads it shows.
CONVGRAPH_EMU512 __m512 castps256_ps512(__m256 a) { return join(a, _mm256_set1_ps(__builtin_nanf(""))); }
CONVGRAPH_EMU512 __m256 extractf32x8_ps(__m512 a, int imm) {
  const auto h = split(a);
  return (imm & 1) != 0 ? h.hi : h.lo;
}
CONVGRAPH_EMU512 __m512 insertf32x8(__m512 a, __m256 b, int imm) {
  const auto h = split(a);
  return (imm & 1) != 0 ? join(h.lo, b) : join(b, h.hi);
}

// ---- lane moves
CONVGRAPH_EMU512 __m512 permutexvar_ps(__m512i index, __m512 a) {
  __m512 r = a;
  for (int i = 0; i < 16; ++i) set_lane(r, i, lane<float>(a, lane<std::int32_t>(index, i) & 15));
  return r;
}
CONVGRAPH_EMU512 __m512 permutex2var_ps(__m512 a, __m512i index, __m512 b) {
  __m512 r = a;
  for (int i = 0; i < 16; ++i) {
    const std::int32_t j = lane<std::int32_t>(index, i);
    set_lane(r, i, lane<float>((j & 16) != 0 ? b : a, j & 15));
  }
  return r;
}
/// 128-bit blocks: two of a (imm bits 0-1, 2-3), then two of b (4-5, 6-7).
CONVGRAPH_EMU512 __m512 shuffle_f32x4(__m512 a, __m512 b, int imm) {
  __m512 r = a;
  for (int q = 0; q < 4; ++q) {
    const int from = (imm >> (2 * q)) & 3;
    std::memcpy(reinterpret_cast<char*>(&r) + 16 * q, reinterpret_cast<const char*>(q < 2 ? &a : &b) + 16 * from, 16);
  }
  return r;
}
/// Within each 128-bit block: unpacklo_ps gives a0 b0 a1 b1, unpackhi_ps a2 b2 a3 b3;
/// unpacklo_pd a0 b0, unpackhi_pd a1 b1 (in doubles). Lanes of b count from 16 (8).
CONVGRAPH_EMU512 __m512 unpacklo_ps(__m512 a, __m512 b) {
  return __builtin_shufflevector(a, b, 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
}
CONVGRAPH_EMU512 __m512 unpackhi_ps(__m512 a, __m512 b) {
  return __builtin_shufflevector(a, b, 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
}
CONVGRAPH_EMU512 __m512d unpacklo_pd(__m512d a, __m512d b) {
  return __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14);
}
CONVGRAPH_EMU512 __m512d unpackhi_pd(__m512d a, __m512d b) {
  return __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
}

// ---- masks
CONVGRAPH_EMU512 __m512 mask_blend_ps(__mmask16 k, __m512 a, __m512 b) {
  const auto x = split(a), y = split(b);
  return join(_mm256_blendv_ps(x.lo, y.lo, _mm256_castsi256_ps(lane_bits(k, 0))),
              _mm256_blendv_ps(x.hi, y.hi, _mm256_castsi256_ps(lane_bits(k, 8))));
}
CONVGRAPH_EMU512 __m512 maskz_mov_ps(__mmask16 k, __m512 a) { return mask_blend_ps(k, __m512{}, a); }
CONVGRAPH_EMU512 __mmask16 movepi32_mask(__m512i a) {
  unsigned k = 0;
  for (int i = 0; i < 16; ++i) k |= (lane<std::int32_t>(a, i) < 0 ? 1u : 0u) << i;
  return static_cast<__mmask16>(k);
}
/// The predicate is an immediate in the instruction: a template argument here (the macros
/// below pass it), so every predicate AVX has works and a bad one does not compile.
template <int kPredicate>
CONVGRAPH_EMU512 __mmask16 cmp_ps_mask(__m512 a, __m512 b) {
  const auto x = split(a), y = split(b);
  return static_cast<__mmask16>(static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(x.lo, y.lo, kPredicate))) |
                                static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(x.hi, y.hi, kPredicate))) << 8);
}
template <int kPredicate>
CONVGRAPH_EMU512 __mmask16 mask_cmp_ps_mask(__mmask16 k, __m512 a, __m512 b) {
  return static_cast<__mmask16>(k & cmp_ps_mask<kPredicate>(a, b));
}

// The rest carry the AVX-512 target in GCC's headers, though they need no instruction of it.
CONVGRAPH_EMU512 __m512 setzero_ps() { return __m512{}; }
CONVGRAPH_EMU512 __m512d setzero_pd() { return __m512d{}; }
CONVGRAPH_EMU512 __m512d castps_pd(__m512 a) { return reinterpret_cast<__m512d>(a); }
CONVGRAPH_EMU512 __m512 castpd_ps(__m512d a) { return reinterpret_cast<__m512>(a); }
// The aligned forms fault on an unaligned address, as the hardware's do.
CONVGRAPH_EMU512 void check_aligned(const void* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) __builtin_trap();
}
CONVGRAPH_EMU512 __m512 load_ps(const void* p) {
  check_aligned(p);
  return loadu_ps(p);
}
CONVGRAPH_EMU512 void store_ps(void* p, __m512 v) {
  check_aligned(p);
  storeu_ps(p, v);
}
CONVGRAPH_EMU512 void stream_ps(void* p, __m512 v) {
  check_aligned(p);
  storeu_ps(p, v);
}

}  // namespace convgraph::cpu::emu512

// Every later use in the including file calls the emulation (some are macros in GCC's
// headers without optimisation: replaced the same way).
#undef _mm512_loadu_ps
#define _mm512_loadu_ps ::convgraph::cpu::emu512::loadu_ps
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 ::convgraph::cpu::emu512::loadu_si512
#undef _mm512_load_ps
#define _mm512_load_ps ::convgraph::cpu::emu512::load_ps
#undef _mm512_storeu_ps
#define _mm512_storeu_ps ::convgraph::cpu::emu512::storeu_ps
#undef _mm512_store_ps
#define _mm512_store_ps ::convgraph::cpu::emu512::store_ps
#undef _mm512_stream_ps
#define _mm512_stream_ps ::convgraph::cpu::emu512::stream_ps
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps ::convgraph::cpu::emu512::maskz_loadu_ps
#undef _mm512_maskz_loadu_pd
#define _mm512_maskz_loadu_pd ::convgraph::cpu::emu512::maskz_loadu_pd
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps ::convgraph::cpu::emu512::mask_storeu_ps
#undef _mm512_mask_storeu_pd
#define _mm512_mask_storeu_pd ::convgraph::cpu::emu512::mask_storeu_pd
#undef _mm512_mask_i32gather_ps
#define _mm512_mask_i32gather_ps ::convgraph::cpu::emu512::mask_i32gather_ps
#undef _mm512_add_ps
#define _mm512_add_ps ::convgraph::cpu::emu512::add_ps
#undef _mm512_mul_ps
#define _mm512_mul_ps ::convgraph::cpu::emu512::mul_ps
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps ::convgraph::cpu::emu512::fmadd_ps
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 ::convgraph::cpu::emu512::mullo_epi32
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps ::convgraph::cpu::emu512::reduce_add_ps
#undef _mm512_set1_ps
#define _mm512_set1_ps ::convgraph::cpu::emu512::set1_ps
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 ::convgraph::cpu::emu512::set1_epi32
#undef _mm512_setr_epi32
#define _mm512_setr_epi32 ::convgraph::cpu::emu512::setr_epi32
#undef _mm512_setzero_ps
#define _mm512_setzero_ps ::convgraph::cpu::emu512::setzero_ps
#undef _mm512_setzero_pd
#define _mm512_setzero_pd ::convgraph::cpu::emu512::setzero_pd
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd ::convgraph::cpu::emu512::cvtps_pd
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 ::convgraph::cpu::emu512::castps512_ps256
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 ::convgraph::cpu::emu512::castps256_ps512
#undef _mm512_castps_pd
#define _mm512_castps_pd ::convgraph::cpu::emu512::castps_pd
#undef _mm512_castpd_ps
#define _mm512_castpd_ps ::convgraph::cpu::emu512::castpd_ps
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps ::convgraph::cpu::emu512::extractf32x8_ps
#undef _mm512_insertf32x8
#define _mm512_insertf32x8 ::convgraph::cpu::emu512::insertf32x8
#undef _mm512_permutexvar_ps
#define _mm512_permutexvar_ps ::convgraph::cpu::emu512::permutexvar_ps
#undef _mm512_permutex2var_ps
#define _mm512_permutex2var_ps ::convgraph::cpu::emu512::permutex2var_ps
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4 ::convgraph::cpu::emu512::shuffle_f32x4
#undef _mm512_unpacklo_ps
#define _mm512_unpacklo_ps ::convgraph::cpu::emu512::unpacklo_ps
#undef _mm512_unpackhi_ps
#define _mm512_unpackhi_ps ::convgraph::cpu::emu512::unpackhi_ps
#undef _mm512_unpacklo_pd
#define _mm512_unpacklo_pd ::convgraph::cpu::emu512::unpacklo_pd
#undef _mm512_unpackhi_pd
#define _mm512_unpackhi_pd ::convgraph::cpu::emu512::unpackhi_pd
#undef _mm512_mask_blend_ps
#define _mm512_mask_blend_ps ::convgraph::cpu::emu512::mask_blend_ps
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps ::convgraph::cpu::emu512::maskz_mov_ps
#undef _mm512_movepi32_mask
#define _mm512_movepi32_mask ::convgraph::cpu::emu512::movepi32_mask
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask(a, b, predicate) ::convgraph::cpu::emu512::cmp_ps_mask<(predicate)>(a, b)
#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask(k, a, b, predicate) ::convgraph::cpu::emu512::mask_cmp_ps_mask<(predicate)>(k, a, b)
