#pragma once
// Private to backends/cpu/kernels: the level's native float vector (GCC vector extensions)
// and its two-source lane permutations, for kernels written once for every level.
// Include it after isa_begin.hpp (its functions take the level's target), and <cstdint>,
// <cstring> and <utility> before isa_begin.hpp (standard headers keep the baseline target).
//
// A generic vector wider than the level's registers (16 floats below AVX-512) is lowered
// through the stack in loops: hot loops use kVL lanes (the Winograd GEMM ran 4x slower on
// AVX2 with 16-float vectors).

#if defined(__GNUC__) && !defined(__clang__)
// Vectors passed by value have another ABI without AVX; these helpers are all internal to
// the level's objects, so GCC's note about it does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

constexpr int kVL = CONVGRAPH_ISA_VECTOR_BYTES / static_cast<int>(sizeof(float));
using vnat = float __attribute__((vector_size(kVL * sizeof(float))));
using vnati = int __attribute__((vector_size(kVL * sizeof(int))));

/// Unaligned load and store of a float vector: the level's, or a narrower one (V).
template <class V = vnat>
inline V loadn(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void storen(float* p, V v) { std::memcpy(p, &v, sizeof v); }
#if CONVGRAPH_ISA_AVX512
/// The level's lane mask of lanes [lo, hi) (0 <= lo <= hi <= kVL), for masked loads and stores.
inline __mmask16 lane_range(std::int64_t lo, std::int64_t hi) {
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#elif CONVGRAPH_ISA_AVX2
inline __m256i lane_range(std::int64_t lo, std::int64_t hi) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lo)), lanes),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), lanes));
}
#endif
/// Values p[i] for i in [lo, hi) (clamped to the vector), zeros elsewhere; never touches
/// memory outside [lo, hi).
inline vnat loadn_part(const float* p, std::int64_t lo, std::int64_t hi) {
  lo = lo < 0 ? 0 : lo, hi = hi > kVL ? kVL : hi;
  if (lo >= hi) return vnat{};
  if (lo == 0 && hi == kVL) return loadn(p);
#if CONVGRAPH_ISA_AVX512
  return reinterpret_cast<vnat>(_mm512_maskz_loadu_ps(lane_range(lo, hi), p));
#elif CONVGRAPH_ISA_AVX2
  return reinterpret_cast<vnat>(_mm256_maskload_ps(p, lane_range(lo, hi)));
#else
  vnat v{};
  for (std::int64_t i = lo; i < hi; ++i) v[i] = p[i];
  return v;
#endif
}
/// Values p[i] for the lanes i whose m[i] is -1, zeros in those whose m[i] is 0; never
/// touches the memory of the zero lanes.
inline vnat loadn_masked(const float* p, vnati m) {
#if CONVGRAPH_ISA_AVX512
  return reinterpret_cast<vnat>(_mm512_maskz_loadu_ps(_mm512_movepi32_mask(reinterpret_cast<__m512i>(m)), p));
#elif CONVGRAPH_ISA_AVX2
  return reinterpret_cast<vnat>(_mm256_maskload_ps(p, reinterpret_cast<__m256i>(m)));
#else
  vnat v{};
  for (int i = 0; i < kVL; ++i)
    if (m[i]) v[i] = p[i];
  return v;
#endif
}
/// Stores lanes [lo, hi) of v (clamped to the vector) at p + lane; the floats outside them
/// are not touched (nor need they exist).
inline void storen_part(float* p, vnat v, std::int64_t lo, std::int64_t hi) {
  lo = lo < 0 ? 0 : lo, hi = hi > kVL ? kVL : hi;
  if (lo >= hi) return;
#if CONVGRAPH_ISA_AVX512
  _mm512_mask_storeu_ps(p, lane_range(lo, hi), reinterpret_cast<__m512>(v));
#elif CONVGRAPH_ISA_AVX2
  _mm256_maskstore_ps(p, lane_range(lo, hi), reinterpret_cast<__m256>(v));
#else
  for (std::int64_t i = lo; i < hi; ++i) p[i] = v[i];
#endif
}
/// Stores the first n (0 to kVL) lanes of v; the floats past them are not touched.
inline void storen_first(float* p, vnat v, int n) { storen_part(p, v, 0, n); }
/// Whether p is aligned for the level's vector stores (stream_storen needs it).
inline bool vector_aligned(const float* p) { return reinterpret_cast<std::uintptr_t>(p) % sizeof(vnat) == 0; }
/// A non-temporal store of one vector to a vector-aligned p, bypassing the
/// caches (no read for ownership). The writer must _mm_sfence() before another thread reads.
inline void stream_storen(float* p, vnat v) {
#if CONVGRAPH_ISA_AVX512
  _mm512_stream_ps(p, reinterpret_cast<__m512>(v));
#elif CONVGRAPH_ISA_AVX2
  _mm256_stream_ps(p, reinterpret_cast<__m256>(v));
#else
  _mm_stream_ps(p, reinterpret_cast<__m128>(v));
#endif
}

/// A two-source lane permutation of the lanes of VI (the level's by default): lane i takes
/// index f(i) of (a, b).
template <class VI, class F, std::size_t... I>
constexpr VI lane_mask(F f, std::index_sequence<I...>) {
  return VI{f(static_cast<int>(I))...};
}
template <class VI = vnati, class F>
constexpr VI lane_mask(F f) {
  return lane_mask<VI>(f, std::make_index_sequence<sizeof(VI) / sizeof(int)>{});
}
/// Lanes of (a, b) picked by m (indices below the lane count from a, the rest from b).
template <class V, class VI>
inline V shufn(V a, V b, VI m) {
#if defined(__GNUC__) && !defined(__clang__)
  return __builtin_shuffle(a, b, m);
#else
  constexpr int L = sizeof(V) / sizeof(float);
  V r;
  for (int i = 0; i < L; ++i) r[i] = m[i] < L ? a[m[i]] : b[m[i] - L];
  return r;
#endif
}

/// r[k][l] -> r[l][k] for a kVL x kVL block in registers: log2(kVL) stages, each swapping
/// the off-diagonal sub-blocks of width B between the row pairs (k, k + B).
template <int B = kVL / 2>
inline void transposen(vnat r[kVL]) {
  if constexpr (B >= 1) {
    constexpr vnati lo = lane_mask([](int l) { return (l & B) == 0 ? l : kVL + l - B; });
    constexpr vnati hi = lane_mask([](int l) { return (l & B) == 0 ? l + B : kVL + l; });
#pragma GCC unroll 16
    for (int k = 0; k < kVL; ++k)
      if ((k & B) == 0) {
        const vnat a = r[k], b = r[k + B];
        r[k] = shufn(a, b, lo), r[k + B] = shufn(a, b, hi);
      }
    transposen<B / 2>(r);
  }
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
