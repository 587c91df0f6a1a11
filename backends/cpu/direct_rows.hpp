#pragma once
// Private to backends/cpu (used by conv_direct.cpp): the register-blocked row engine.
//
// A RowJob computes nb (<= kBlock) destination rows of J elements each:
//   dst[cb][j * dst_step] = sum_q sum_{row tap r} sum_{col tap c valid at j}
//       w[cb * w_cstride + q * w_qstride + r.w_off + c.w_off]
//     * src[q * src_qstride + r.src_off + c.src_off + j * src_step]
// where column tap c contributes only for j in [c.lo, c.hi). Every destination element is
// written exactly once (zero when nothing contributes), never accumulated into.
//
// Positions inside every tap's valid range are computed in tiles of kBlock x kLanes
// accumulators kept in registers; the few border positions go through a checked scalar path.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace convgraph::cpu {

/// Destination channels per register block.
inline constexpr int kBlock = 8;
/// Positions per register block: one 512-bit vector of float, two of double.
template <class A>
inline constexpr int kLanes = 16;

struct RowTap {
  std::int64_t src_off;
  std::int64_t w_off;
};
struct ColTap {
  std::int64_t src_off;
  std::int64_t w_off;
  std::int64_t lo, hi;  ///< destination positions j this tap reaches
};

template <class T>
struct RowJob {
  T* dst = nullptr;
  std::int64_t dst_cstride = 0, dst_step = 1, J = 0;
  const T* src = nullptr;
  std::int64_t src_qstride = 0, src_step = 1, nq = 0;
  const T* w = nullptr;
  std::int64_t w_cstride = 0, w_qstride = 0;
  std::int64_t nb = 0;
  std::vector<RowTap> row_taps;  ///< valid (outer-axes) taps of this destination row
  std::vector<ColTap> col_taps;  ///< innermost-axis taps reaching at least one position
};

namespace detail {

/// kLanes consecutive positions starting at j, every column tap valid for all of them.
template <class T, class A, int KB, bool kUnitStep>
inline void row_tile(const RowJob<T>& job, std::int64_t c0, std::int64_t j) {
  constexpr int V = kLanes<A>;
  const std::int64_t step = kUnitStep ? 1 : job.src_step;
  A acc[KB][V] = {};
  for (std::int64_t q = 0; q < job.nq; ++q) {
    const T* sq = job.src + q * job.src_qstride;
    const T* wq = job.w + c0 * job.w_cstride + q * job.w_qstride;
    for (const RowTap& rt : job.row_taps) {
      for (const ColTap& ct : job.col_taps) {
        const T* sp = sq + (rt.src_off + ct.src_off + j * step);
        const T* wp = wq + (rt.w_off + ct.w_off);
        A xv[V];
        for (int v = 0; v < V; ++v) xv[v] = static_cast<A>(sp[v * step]);
        for (int kk = 0; kk < KB; ++kk) {
          const A wv = static_cast<A>(wp[kk * job.w_cstride]);
          for (int v = 0; v < V; ++v) acc[kk][v] += wv * xv[v];
        }
      }
    }
  }
  for (int kk = 0; kk < KB; ++kk) {
    T* d = job.dst + (c0 + kk) * job.dst_cstride + j * job.dst_step;
    for (int v = 0; v < V; ++v) d[v * job.dst_step] = static_cast<T>(acc[kk][v]);
  }
}

/// One position j, checking each column tap's range.
template <class T, class A, int KB>
inline void row_point(const RowJob<T>& job, std::int64_t c0, std::int64_t j) {
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

template <class T, class A, int KB>
void row_block(const RowJob<T>& job, std::int64_t c0) {
  constexpr int V = kLanes<A>;
  // Positions where every column tap is valid: tiles there need no checks.
  std::int64_t in_lo = 0, in_hi = job.J;
  for (const ColTap& ct : job.col_taps) {
    in_lo = std::max(in_lo, ct.lo);
    in_hi = std::min(in_hi, ct.hi);
  }
  if (job.col_taps.empty() || job.row_taps.empty() || in_hi - in_lo < V) {
    for (std::int64_t j = 0; j < job.J; ++j) row_point<T, A, KB>(job, c0, j);
    return;
  }
  for (std::int64_t j = 0; j < in_lo; ++j) row_point<T, A, KB>(job, c0, j);
  auto tile = job.src_step == 1 ? &row_tile<T, A, KB, true> : &row_tile<T, A, KB, false>;
  std::int64_t j = in_lo;
  for (; j + V <= in_hi; j += V) tile(job, c0, j);
  // A ragged end re-computes an overlapping last tile: outputs are written, not added, so
  // computing a position twice is harmless and keeps the remainder vectorised.
  if (j < in_hi) tile(job, c0, in_hi - V);
  for (j = in_hi; j < job.J; ++j) row_point<T, A, KB>(job, c0, j);
}

}  // namespace detail

/// Computes all nb destination rows of the job.
template <class T, class A>
void run_row_job(const RowJob<T>& job) {
  std::int64_t c = 0;
  for (; c + kBlock <= job.nb; c += kBlock) detail::row_block<T, A, kBlock>(job, c);
  if (c + 4 <= job.nb) {
    detail::row_block<T, A, 4>(job, c);
    c += 4;
  }
  if (c + 2 <= job.nb) {
    detail::row_block<T, A, 2>(job, c);
    c += 2;
  }
  if (c < job.nb) detail::row_block<T, A, 1>(job, c);
}

}  // namespace convgraph::cpu
