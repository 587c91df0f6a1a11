#pragma once
// Private to backends/cpu (used by conv_direct.cpp): the register-blocked row engine.
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
// reads all lie inside the source row loads straight from it; a border tile first copies
// the span it reads into a small zero-padded window, so every position runs vectorised.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace convgraph::cpu {

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

template <class A, class T, bool kUnit>
inline VecOf<A> load_lanes(const T* p, std::int64_t step) {
  constexpr int L = static_cast<int>(64 / sizeof(A));
  VecOf<A> v;
  if constexpr (kUnit && std::is_same_v<A, T>) {
    std::memcpy(&v, p, sizeof(v));
  } else {
    for (int l = 0; l < L; ++l) v[l] = static_cast<A>(p[(kUnit ? l : l * step)]);
  }
  return v;
}

/// One tile: positions [j, j + kLanes) for destination rows [c0, c0 + KB). With kWindow,
/// each (q, row tap) source span is first copied into a zero-padded window so no read
/// leaves the row. Stores the first `nstore` positions.
template <class T, class A, int KB, bool kUnit, bool kWindow>
void row_tile(const RowJob<T>& job, std::int64_t c0, std::int64_t j, int nstore,
              std::int64_t min_off, std::int64_t max_off) {
  using V = VecOf<A>;
  constexpr int L = static_cast<int>(64 / sizeof(A));
  constexpr int NV = kLanes / L;
  const std::int64_t step = kUnit ? 1 : job.src_step;
  // The span of source indices this tile reads, relative to the row start.
  const std::int64_t win_lo = j * step + min_off;
  const std::int64_t win_len = (kLanes - 1) * step + (max_off - min_off) + 1;
  T window[kWindow ? kMaxWindow : 1];
  V acc[KB][NV];
  for (int kk = 0; kk < KB; ++kk)
    for (int v = 0; v < NV; ++v) acc[kk][v] = V{};
  for (std::int64_t q = 0; q < job.nq; ++q) {
    const T* sq = job.src + q * job.src_qstride;
    const T* wq = job.w + c0 * job.w_cstride + q * job.w_qstride;
    for (const RowTap& rt : job.row_taps) {
      const T* base;  // base[c.src_off + lane * step] is the value for column tap c
      std::int64_t base_shift;
      if constexpr (kWindow) {
        const T* row = sq + rt.src_off;
        for (std::int64_t i = 0; i < win_len; ++i) {
          const std::int64_t s = win_lo + i;
          window[i] = (s >= 0 && s < job.src_row_len) ? row[s] : T(0);
        }
        base = window;
        base_shift = -min_off;
      } else {
        base = sq + rt.src_off + j * step;
        base_shift = 0;
      }
      const T* wr = wq + rt.w_off;
      for (const ColTap& ct : job.col_taps) {
        const T* sp = base + (ct.src_off + base_shift);
        V xv[NV];
        for (int v = 0; v < NV; ++v) xv[v] = load_lanes<A, T, kUnit>(sp + v * L * step, step);
        const T* wp = wr + ct.w_off;
        for (int kk = 0; kk < KB; ++kk) {
          const A wv = static_cast<A>(wp[kk * job.w_cstride]);
          for (int v = 0; v < NV; ++v) acc[kk][v] += wv * xv[v];
        }
      }
    }
  }
  for (int kk = 0; kk < KB; ++kk) {
    T* d = job.dst + (c0 + kk) * job.dst_cstride + j * job.dst_step;
    if (nstore == kLanes && job.dst_step == 1 && std::is_same_v<A, T>) {
      std::memcpy(d, &acc[kk][0], sizeof(acc[kk]));
    } else {
      for (int l = 0; l < nstore; ++l) d[l * job.dst_step] = static_cast<T>(acc[kk][l / L][l % L]);
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
      row_tile<T, A, KB, kUnit, false>(job, c0, j, nstore, min_off, max_off);
    } else if (window_fits) {
      row_tile<T, A, KB, kUnit, true>(job, c0, j, nstore, min_off, max_off);
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
