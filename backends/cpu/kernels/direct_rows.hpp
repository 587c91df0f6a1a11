#pragma once
// Private to backends/cpu/kernels/direct.cpp, inside its level region (isa_begin.hpp):
// the register-blocked row engine.
//
// A RowJob computes nb destination rows of J elements each:
//   dst[cb][j * dst_step] = sum_q sum_{row tap r} sum_{col tap c}
//       w[cb * w_cstride + q * w_qstride + r.w_off + c.w_off]
//     * src[q * src_qstride + r.src_off + c.src_off + j * src_step]
// where a source index outside [r.src_off, r.src_off + src_row_len) is padding (zero).
// Every destination element is written exactly once (zero when nothing contributes).
//
// Positions are computed in tiles of kLanes positions for a block of KB destination rows,
// with the KB x kLanes accumulators held in vector registers (GCC vector extensions: one
// 512-bit register per 16 floats or 8 doubles; narrower ISAs split them). A tile whose
// reads all lie inside the source row loads straight from it. A border tile uses AVX-512
// masked loads at the AVX-512 level (lanes reading padding are masked off: zero, and
// never touched in memory), else it first copies the span it reads into a small
// zero-padded window; either way every position runs vectorised.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if CONVGRAPH_ISA_AVX512
#define CONVGRAPH_DIRECT_MASKED_LOADS 1
#else
#define CONVGRAPH_DIRECT_MASKED_LOADS 0
#endif

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

using vec_f32 = float __attribute__((vector_size(64)));
using vec_f64 = double __attribute__((vector_size(64)));
template <class A>
using VecOf = std::conditional_t<std::is_same_v<A, float>, vec_f32, vec_f64>;

/// Positions per tile: 16, i.e. one float vector or two double vectors.
inline constexpr int kLanes = 16;
/// Destination rows per register block: 16 x 1 float vectors or 8 x 2 double vectors, 16
/// accumulators either way.
template <class A>
inline constexpr int kBlockOf = std::is_same_v<A, float> ? 16 : 8;
/// Longest zero-padded window a border tile may copy (elements); wider spans (huge dilated
/// kernels) fall back to one position at a time.
inline constexpr std::int64_t kMaxWindow = 1024;

struct RowTap {
  std::int64_t src_off;
  std::int64_t w_off;
};
struct ColTap {
  std::int64_t src_off;
  std::int64_t w_off;
  std::int64_t lo, hi;  ///< positions j whose read src_off + j * src_step is inside the row
};

template <class T>
struct RowJob {
  T* dst = nullptr;
  std::int64_t dst_cstride = 0, dst_step = 1, J = 0;
  const T* src = nullptr;
  std::int64_t src_qstride = 0, src_step = 1, src_row_len = 0, nq = 0;
  const T* w = nullptr;
  std::int64_t w_cstride = 0, w_qstride = 0;
  std::int64_t nb = 0;
  std::vector<RowTap> row_taps;  ///< outer-axes taps that read a real (non-padding) row
  std::vector<ColTap> col_taps;  ///< innermost-axis taps reaching at least one position
};

namespace detail {

// Vectors are passed back through references: returning a 512-bit vector by value from a
// function changes the ABI on builds without AVX-512 (g++ -Wpsabi).
template <class A, class T, bool kUnit>
inline void load_lanes(VecOf<A>& v, const T* p, std::int64_t step) {
  constexpr int L = static_cast<int>(64 / sizeof(A));
  if constexpr (kUnit && std::is_same_v<A, T>) {
    std::memcpy(&v, p, sizeof(v));
  } else {
    for (int l = 0; l < L; ++l) v[l] = static_cast<A>(p[(kUnit ? l : l * step)]);
  }
}

/// Lanes [0, n) from p[l * step], the rest zero (and not read): masked loads where the build
/// has AVX-512, else one lane at a time.
template <class A, class T>
inline void load_first_lanes(VecOf<A>& v, const T* p, std::int64_t step, int n) {
  constexpr int L = static_cast<int>(64 / sizeof(A));
#if CONVGRAPH_ISA_AVX512
  if (step == 1) {
    const unsigned mask = n >= L ? (1u << L) - 1u : (1u << n) - 1u;
    if constexpr (std::is_same_v<A, float>) {
      v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), p);
    } else if constexpr (std::is_same_v<T, double>) {
      v = _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p);
    } else {
      v = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), p)));
    }
    return;
  }
#endif
  alignas(64) A lanes[L];
  for (int l = 0; l < L; ++l) lanes[l] = l < n ? static_cast<A>(p[l * step]) : A(0);
  std::memcpy(&v, lanes, sizeof(v));
}

#if CONVGRAPH_DIRECT_MASKED_LOADS
/// L lanes from p, lane l only when bit l of `mask` is set (others zero, never read).
template <class A, class T>
inline void masked_lanes(VecOf<A>& v, const T* p, unsigned mask) {
  if constexpr (std::is_same_v<A, float>) {
    v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), p);
  } else if constexpr (std::is_same_v<T, double>) {
    v = _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p);
  } else {  // float storage, double accumulation
    v = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(static_cast<__mmask16>(mask & 0xffu), p)));
  }
}
#endif

/// How a tile reads its source rows.
enum class TileMode { direct, window, masked };

/// One tile: positions [j, j + kLanes) for destination rows [c0, c0 + KB); stores the first
/// `nstore` positions. kMode direct: every read is inside the row. window: each (q, row tap)
/// span is first copied into a zero-padded window. masked (unit step, AVX-512 builds):
/// lanes whose read falls outside the row are masked off.
template <class T, class A, int KB, bool kUnit, TileMode kMode>
void row_tile(const RowJob<T>& job, std::int64_t c0, std::int64_t j, int nstore,
              std::int64_t min_off, std::int64_t max_off) {
  using V = VecOf<A>;
  constexpr int L = static_cast<int>(64 / sizeof(A));
  constexpr int NV = kLanes / L;
  constexpr bool kWindow = kMode == TileMode::window;
  const std::int64_t step = kUnit ? 1 : job.src_step;
  // The span of source indices this tile reads, relative to the row start.
  const std::int64_t win_lo = j * step + min_off;
  const std::int64_t win_len = (kLanes - 1) * step + (max_off - min_off) + 1;
  T window[kWindow ? kMaxWindow : 1];
  // Every loop over kk / v is fully unrolled so that the accumulators live in registers
  // (without the pragmas g++ 12 keeps storing them to the stack).
  V acc[KB][NV];
#pragma GCC unroll 16
  for (int kk = 0; kk < KB; ++kk)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[kk][v] = V{};
  for (std::int64_t q = 0; q < job.nq; ++q) {
    const T* sq = job.src + q * job.src_qstride;
    const T* wq = job.w + c0 * job.w_cstride + q * job.w_qstride;
    for (const RowTap& rt : job.row_taps) {
      const T* wr = wq + rt.w_off;
      if constexpr (kWindow) {
        // window[i] = row[win_lo + i], zero outside [0, src_row_len).
        const T* row = sq + rt.src_off;
        for (std::int64_t i = 0; i < win_len; ++i) {
          const std::int64_t s = win_lo + i;
          window[i] = (s >= 0 && s < job.src_row_len) ? row[s] : T(0);
        }
      }
      for (const ColTap& ct : job.col_taps) {
        V xv[NV];
        if constexpr (kMode == TileMode::window) {
          const T* sp = window + (ct.src_off - min_off);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) load_lanes<A, T, kUnit>(xv[v], sp + v * L * step, step);
        } else if constexpr (kMode == TileMode::masked) {
#if CONVGRAPH_DIRECT_MASKED_LOADS
          // Lanes l with ct.lo <= j + l < ct.hi read inside the row.
          const auto a = static_cast<unsigned>(std::clamp<std::int64_t>(ct.lo - j, 0, kLanes));
          const auto b = static_cast<unsigned>(std::clamp<std::int64_t>(ct.hi - j, a, kLanes));
          const unsigned mask = ((1u << b) - 1u) & ~((1u << a) - 1u);
          // Address arithmetic only: masked-off lanes (before or after the row) are not read.
          const auto addr = reinterpret_cast<std::uintptr_t>(sq) +
                            static_cast<std::uintptr_t>(rt.src_off + ct.src_off + j) * sizeof(T);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v)
            masked_lanes<A, T>(xv[v], reinterpret_cast<const T*>(addr) + v * L, (mask >> (v * L)) & ((1u << L) - 1u));
#endif
        } else {
          const T* sp = sq + (rt.src_off + ct.src_off + j * step);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) load_lanes<A, T, kUnit>(xv[v], sp + v * L * step, step);
        }
        const T* wp = wr + ct.w_off;
#pragma GCC unroll 16
        for (int kk = 0; kk < KB; ++kk) {
          const A wv = static_cast<A>(wp[kk * job.w_cstride]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[kk][v] += wv * xv[v];
        }
      }
    }
  }
  // Copy out through a separate array: taking acc's address would make g++ keep it in
  // memory (and store every accumulator on every iteration).
#pragma GCC unroll 16
  for (int kk = 0; kk < KB; ++kk) {
    alignas(64) A out[kLanes];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(out + v * L, &acc[kk][v], sizeof(V)) ;
    T* d = job.dst + (c0 + kk) * job.dst_cstride + j * job.dst_step;
    if (nstore == kLanes && job.dst_step == 1) {
      for (int l = 0; l < kLanes; ++l) d[l] = static_cast<T>(out[l]);
    } else {
      for (int l = 0; l < nstore; ++l) d[l * job.dst_step] = static_cast<T>(out[l]);
    }
  }
}

/// One position j with range checks: the fallback for border spans wider than kMaxWindow.
template <class T, class A, int KB>
void row_point(const RowJob<T>& job, std::int64_t c0, std::int64_t j) {
  A acc[KB] = {};
  for (std::int64_t q = 0; q < job.nq; ++q) {
    const T* sq = job.src + q * job.src_qstride;
    const T* wq = job.w + c0 * job.w_cstride + q * job.w_qstride;
    for (const RowTap& rt : job.row_taps)
      for (const ColTap& ct : job.col_taps) {
        if (j < ct.lo || j >= ct.hi) continue;
        const A xv = static_cast<A>(sq[rt.src_off + ct.src_off + j * job.src_step]);
        const T* wp = wq + (rt.w_off + ct.w_off);
        for (int kk = 0; kk < KB; ++kk) acc[kk] += static_cast<A>(wp[kk * job.w_cstride]) * xv;
      }
  }
  for (int kk = 0; kk < KB; ++kk)
    job.dst[(c0 + kk) * job.dst_cstride + j * job.dst_step] = static_cast<T>(acc[kk]);
}

template <class T, class A, int KB, bool kUnit>
void row_block(const RowJob<T>& job, std::int64_t c0) {
  if (job.col_taps.empty() || job.row_taps.empty()) {  // nothing reaches this row
    for (int kk = 0; kk < KB; ++kk)
      for (std::int64_t j = 0; j < job.J; ++j) job.dst[(c0 + kk) * job.dst_cstride + j * job.dst_step] = T(0);
    return;
  }
  // Positions where every column tap reads inside the row: tiles there need no window.
  std::int64_t in_lo = 0, in_hi = job.J, min_off = job.col_taps[0].src_off, max_off = min_off;
  for (const ColTap& ct : job.col_taps) {
    in_lo = std::max(in_lo, ct.lo);
    in_hi = std::min(in_hi, ct.hi);
    min_off = std::min(min_off, ct.src_off);
    max_off = std::max(max_off, ct.src_off);
  }
  const std::int64_t step = kUnit ? 1 : job.src_step;
  const bool window_fits = (kLanes - 1) * step + (max_off - min_off) + 1 <= kMaxWindow;
  auto tile = [&](std::int64_t j, int nstore) {
    if (j >= in_lo && j + kLanes <= in_hi) {
      row_tile<T, A, KB, kUnit, TileMode::direct>(job, c0, j, nstore, min_off, max_off);
      return;
    }
    if constexpr (CONVGRAPH_DIRECT_MASKED_LOADS && kUnit) {
      row_tile<T, A, KB, kUnit, TileMode::masked>(job, c0, j, nstore, min_off, max_off);
    } else if (window_fits) {
      row_tile<T, A, KB, kUnit, TileMode::window>(job, c0, j, nstore, min_off, max_off);
    } else {
      for (int l = 0; l < nstore; ++l) row_point<T, A, KB>(job, c0, j + l);
    }
  };
  if (job.J <= kLanes) {
    tile(0, static_cast<int>(job.J));
    return;
  }
  std::int64_t j = 0;
  for (; j + kLanes <= job.J; j += kLanes) tile(j, kLanes);
  // A ragged end re-computes an overlapping last tile: outputs are written, not added, so
  // computing a position twice is harmless and keeps the remainder vectorised.
  if (j < job.J) tile(job.J - kLanes, kLanes);
}

}  // namespace detail

/// Computes all nb destination rows of the job: full blocks of kBlockOf<A>, then 8, 4, 2, 1.
template <class T, class A>
void run_row_job(const RowJob<T>& job) {
  constexpr int KB = kBlockOf<A>;
  auto block = [&](auto kb_const, std::int64_t c) {
    constexpr int kb = decltype(kb_const)::value;
    if (job.src_step == 1) detail::row_block<T, A, kb, true>(job, c);
    else detail::row_block<T, A, kb, false>(job, c);
  };
  std::int64_t c = 0;
  for (; c + KB <= job.nb; c += KB) block(std::integral_constant<int, KB>{}, c);
  if constexpr (KB > 8) {
    if (c + 8 <= job.nb) {
      block(std::integral_constant<int, 8>{}, c);
      c += 8;
    }
  }
  if (c + 4 <= job.nb) {
    block(std::integral_constant<int, 4>{}, c);
    c += 4;
  }
  if (c + 2 <= job.nb) {
    block(std::integral_constant<int, 2>{}, c);
    c += 2;
  }
  if (c < job.nb) block(std::integral_constant<int, 1>{}, c);
}

}  // namespace convgraph::cpu
