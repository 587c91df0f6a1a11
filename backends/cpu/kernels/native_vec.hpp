#pragma once
// Private to backends/cpu/kernels: the level's native float vector (GCC vector extensions)
// and its two-source lane permutations, for kernels written once for every level.
// Include it after isa_begin.hpp (its functions take the level's target), and <cstring> and
// <utility> before isa_begin.hpp (standard headers keep the baseline target).
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

inline vnat loadn(const float* p) {
  vnat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storen(float* p, vnat v) { std::memcpy(p, &v, sizeof v); }

/// A two-source lane permutation of kVL lanes: lane i takes index f(i) of (a, b).
template <class F, std::size_t... I>
constexpr vnati lane_mask(F f, std::index_sequence<I...>) {
  return vnati{f(static_cast<int>(I))...};
}
template <class F>
constexpr vnati lane_mask(F f) {
  return lane_mask(f, std::make_index_sequence<kVL>{});
}
/// Lanes of (a, b) picked by m (indices below kVL from a, the rest from b).
inline vnat shufn(vnat a, vnat b, vnati m) {
#if defined(__GNUC__) && !defined(__clang__)
  return __builtin_shuffle(a, b, m);
#else
  vnat r;
  for (int i = 0; i < kVL; ++i) r[i] = m[i] < kVL ? a[m[i]] : b[m[i] - kVL];
  return r;
#endif
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
