// "cpu.direct": convolution by direct loops, every direction and parameter, no workspace
// (the float32 channel-vectorised path, which uses one, is in direct_kvec.cpp).
//
// Forward and grad-inputs share one row engine (direct_rows.hpp): a block of destination
// rows is a sum over source channels and filter taps of weighted, contiguous (or strided)
// source rows. Forward: destination = output row, sources = input channels.
// Grad-inputs: destination = the input positions of one stride phase (i = r + s*j), sources =
// output-gradient channels; choosing the phase makes the source read contiguous and every
// tap's stride divisibility a per-phase constant. Grad-weights is a blocked dot product.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/conv_geometry.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/direct_rows.hpp"
#include "backends/cpu/kernels/conv_epilogue.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

// ---- forward --------------------------------------------------------------------------------

template <class T, class A>
void forward(const ConvGeometry& g, const T* x, const T* w, T* y, const ConvEpilogue& ep, const ConvContext& ctx) {
  constexpr i64 kBlock = kBlockOf<A>;
  const i64 nkb = (g.Kg + kBlock - 1) / kBlock;
  const i64 rows = g.out[0] * g.out[1];
  const i64 KS = g.ker_numel;
  parallel_over(ctx, g.N * g.G * nkb * rows, [&](i64 begin, i64 end) {
    RowJob<T> job;
    // Column taps depend only on the geometry: build them once per chunk of rows.
    for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
      i64 lo, hi;
      g.valid_out_range(2, t2, lo, hi);
      if (lo < hi) job.col_taps.push_back({t2 * g.dil[2] - g.pad[2], g.wtap(2, t2), lo, hi});
    }
    job.J = g.out[2];
    job.dst_cstride = g.out_numel;
    job.dst_step = 1;
    job.src_qstride = g.in_numel;
    job.src_step = g.stride[2];
    job.src_row_len = g.in[2];
    job.nq = g.Cg;
    job.w_cstride = g.Cg * KS;
    job.w_qstride = KS;
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 row = idx % rows;
      const i64 kb = (idx / rows) % nkb;
      const i64 grp = (idx / rows / nkb) % g.G;
      const i64 n = idx / rows / nkb / g.G;
      const i64 o0 = row / g.out[1], o1 = row % g.out[1];
      const i64 k0 = grp * g.Kg + kb * kBlock;
      job.nb = std::min<i64>(kBlock, g.Kg - kb * kBlock);
      job.dst = y + (n * g.K + k0) * g.out_numel + row * g.out[2];
      job.src = x + (n * g.C + grp * g.Cg) * g.in_numel;
      job.w = w + k0 * g.Cg * KS;
      job.row_taps.clear();
      for (i64 t0 = 0; t0 < g.ker[0]; ++t0) {
        const i64 i0 = o0 * g.stride[0] - g.pad[0] + t0 * g.dil[0];
        if (i0 < 0 || i0 >= g.in[0]) continue;
        for (i64 t1 = 0; t1 < g.ker[1]; ++t1) {
          const i64 i1 = o1 * g.stride[1] - g.pad[1] + t1 * g.dil[1];
          if (i1 < 0 || i1 >= g.in[1]) continue;
          job.row_taps.push_back(
              {(i0 * g.in[1] + i1) * g.in[2], (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2]});
        }
      }
      run_row_job<T, A>(job);
      if (!ep.empty())  // the fused epilogue on the rows just written
        for (i64 kk = 0; kk < job.nb; ++kk) {
          const i64 at = (n * g.K + k0 + kk) * g.out_numel + row * g.out[2];
          conv_epilogue_run(ep, y + at, at, k0 + kk, g.out[2]);
        }
    }
  });
}

// ---- grad inputs ----------------------------------------------------------------------------

/// The output position whose tap reads input position i on one axis, or -1.
inline i64 source_pos(i64 i, i64 t, i64 pad, i64 dil, i64 stride, i64 out) {
  const i64 num = i + pad - t * dil;
  if (num < 0 || num % stride != 0) return -1;
  const i64 o = num / stride;
  return o < out ? o : -1;
}

template <class T, class A>
void grad_inputs(const ConvGeometry& g, T* dx, const T* w, const T* dy, const ConvContext& ctx) {
  constexpr i64 kBlock = kBlockOf<A>;
  const i64 ncb = (g.Cg + kBlock - 1) / kBlock;
  const i64 s2 = g.stride[2];
  const i64 phases = std::min(s2, g.in[2]);
  const i64 rows = g.in[0] * g.in[1] * phases;
  const i64 KS = g.ker_numel;
  parallel_over(ctx, g.N * g.G * ncb * rows, [&](i64 begin, i64 end) {
    RowJob<T> job;
    job.dst_cstride = g.in_numel;
    job.dst_step = s2;
    job.src_qstride = g.out_numel;
    job.src_step = 1;
    job.src_row_len = g.out[2];
    job.nq = g.Kg;
    job.w_cstride = KS;
    job.w_qstride = g.Cg * KS;
    i64 built_phase = -1;
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 r = idx % phases;
      const i64 row = (idx / phases) % (g.in[0] * g.in[1]);
      const i64 cb = (idx / rows) % ncb;
      const i64 grp = (idx / rows / ncb) % g.G;
      const i64 n = idx / rows / ncb / g.G;
      const i64 i0 = row / g.in[1], i1 = row % g.in[1];
      const i64 c0 = grp * g.Cg + cb * kBlock;
      if (r != built_phase) {
        // Positions i2 = r + s2 * j. Tap t2 reaches them iff (r + pad - t2 * dil) is a
        // multiple of s2; it then reads output o2 = base + j.
        job.J = (g.in[2] - r + s2 - 1) / s2;
        job.col_taps.clear();
        for (i64 t2 = 0; t2 < g.ker[2]; ++t2) {
          const i64 num = r + g.pad[2] - t2 * g.dil[2];
          if (floor_div(num, s2) * s2 != num) continue;
          const i64 base = num / s2;
          const i64 lo = std::max<i64>(0, -base), hi = std::min(job.J, g.out[2] - base);
          if (lo < hi) job.col_taps.push_back({base, g.wtap(2, t2), lo, hi});
        }
        built_phase = r;
      }
      job.nb = std::min<i64>(kBlock, g.Cg - cb * kBlock);
      job.dst = dx + (n * g.C + c0) * g.in_numel + row * g.in[2] + r;
      job.src = dy + (n * g.K + grp * g.Kg) * g.out_numel;
      job.w = w + grp * g.Kg * g.Cg * KS + (cb * kBlock) * KS;
      job.row_taps.clear();
      for (i64 t0 = 0; t0 < g.ker[0]; ++t0) {
        const i64 o0 = source_pos(i0, t0, g.pad[0], g.dil[0], g.stride[0], g.out[0]);
        if (o0 < 0) continue;
        for (i64 t1 = 0; t1 < g.ker[1]; ++t1) {
          const i64 o1 = source_pos(i1, t1, g.pad[1], g.dil[1], g.stride[1], g.out[1]);
          if (o1 < 0) continue;
          job.row_taps.push_back({(o0 * g.out[1] + o1) * g.out[2],
                                  (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2]});
        }
      }
      run_row_job<T, A>(job);
    }
  });
}

// ---- grad weights ---------------------------------------------------------------------------

/// Output-gradient rows per grad-weights block, and innermost taps per pass: KB x TB vector
/// accumulators (16 for float) over kLanes positions, fed by KB + TB loads.
template <class A>
inline constexpr int kWgradRowsOf = std::is_same_v<A, float> ? 4 : 2;

/// dw[k0 .. k0+KB, q, (t0, t1, t2 .. t2+TB)]: for each tap a dot product of output-gradient
/// rows with the input rows the tap reads, over the batch and every output position.
///
/// Each input row is first copied into a zero-padded window, so every tap loads whole
/// vectors. The short last tile of a row loads only its valid lanes of both operands (the
/// others are zero on both sides), so padding lanes add exactly 0 * 0, whatever the data.
template <class T, class A, int KB, int TB>
void grad_weights_taps(const ConvGeometry& g, const T* x, T* dw, const T* dy, i64 grp, i64 k0,
                       i64 q, i64 t0, i64 t1, i64 t2) {
  using V = VecOf<A>;
  constexpr int L = static_cast<int>(64 / sizeof(A));
  constexpr int NV = kLanes / L;
  const i64 s2 = g.stride[2];
  const i64 W = g.out[2];
  i64 lo0, hi0, lo1, hi1;
  g.valid_out_range(0, t0, lo0, hi0);
  g.valid_out_range(1, t1, lo1, hi1);
  i64 off[TB];  // tap b reads x at o2 * s2 + off[b]; off grows with b
  for (int b = 0; b < TB; ++b) off[b] = (t2 + b) * g.dil[2] - g.pad[2];
  const i64 span = (W + kLanes - 1) / kLanes * kLanes;  // positions the tiles touch
  const i64 win_len = (span - 1) * s2 + (off[TB - 1] - off[0]) + 1;

  V acc[KB][TB][NV];
  for (int kk = 0; kk < KB; ++kk)
    for (int b = 0; b < TB; ++b)
      for (int v = 0; v < NV; ++v) acc[kk][b][v] = V{};
  T xw[kMaxWindow];
  for (i64 n = 0; n < g.N; ++n) {
    const T* xq = x + (n * g.C + grp * g.Cg + q) * g.in_numel;
    const T* dyk = dy + (n * g.K + k0) * g.out_numel;
    for (i64 o0 = lo0; o0 < hi0; ++o0)
      for (i64 o1 = lo1; o1 < hi1; ++o1) {
        const i64 i0 = o0 * g.stride[0] - g.pad[0] + t0 * g.dil[0];
        const i64 i1 = o1 * g.stride[1] - g.pad[1] + t1 * g.dil[1];
        const T* xr = xq + (i0 * g.in[1] + i1) * g.in[2];
        const T* dr = dyk + (o0 * g.out[1] + o1) * g.out[2];
        // xw[i] = input element off[0] + i of the row, zero in the padding.
        const i64 c_lo = std::clamp<i64>(-off[0], 0, win_len);
        const i64 c_hi = std::clamp<i64>(g.in[2] - off[0], c_lo, win_len);
        for (i64 i = 0; i < c_lo; ++i) xw[i] = T(0);
        std::memcpy(xw + c_lo, xr + (off[0] + c_lo), static_cast<std::size_t>(c_hi - c_lo) * sizeof(T));
        for (i64 i = c_hi; i < win_len; ++i) xw[i] = T(0);
        // Whole tiles, then the short last tile (if any) with masked loads. Two separate
        // loops with their own loads keep g++ from spilling the accumulators.
        i64 o2 = 0;
        for (; o2 + kLanes <= W; o2 += kLanes) {
          V xv[TB][NV], dv[KB][NV];
          for (int b = 0; b < TB; ++b)
            for (int v = 0; v < NV; ++v) {
              const T* p = xw + (o2 + v * L) * s2 + (off[b] - off[0]);
              if (s2 == 1) detail::load_lanes<A, T, true>(xv[b][v], p, 1);
              else detail::load_lanes<A, T, false>(xv[b][v], p, s2);
            }
          for (int kk = 0; kk < KB; ++kk)
            for (int v = 0; v < NV; ++v)
              detail::load_lanes<A, T, true>(dv[kk][v], dr + kk * g.out_numel + o2 + v * L, 1);
          for (int kk = 0; kk < KB; ++kk)
            for (int b = 0; b < TB; ++b)
              for (int v = 0; v < NV; ++v) acc[kk][b][v] += dv[kk][v] * xv[b][v];
        }
        if (o2 < W) {
          const int nvalid = static_cast<int>(W - o2);
          V xv[TB][NV], dv[KB][NV];
          for (int v = 0; v < NV; ++v) {
            const int n_v = std::clamp(nvalid - v * L, 0, L);
            for (int b = 0; b < TB; ++b)
              detail::load_first_lanes<A, T>(xv[b][v], xw + (o2 + v * L) * s2 + (off[b] - off[0]), s2, n_v);
            for (int kk = 0; kk < KB; ++kk)
              detail::load_first_lanes<A, T>(dv[kk][v], dr + kk * g.out_numel + o2 + v * L, 1, n_v);
          }
          for (int kk = 0; kk < KB; ++kk)
            for (int b = 0; b < TB; ++b)
              for (int v = 0; v < NV; ++v) acc[kk][b][v] += dv[kk][v] * xv[b][v];
        }
      }
  }
  for (int kk = 0; kk < KB; ++kk)
    for (int b = 0; b < TB; ++b) {
      // Reduce through a copy: taking acc's address would keep it in memory in the loop.
      A sum = 0;
      for (int v = 0; v < NV; ++v) {
        const V t = acc[kk][b][v];
        alignas(64) A lanes[L];
        std::memcpy(lanes, &t, sizeof(t));
        for (int l = 0; l < L; ++l) sum += lanes[l];
      }
      const i64 wt = (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2] + g.wtap(2, t2 + b);
      dw[((k0 + kk) * g.Cg + q) * g.ker_numel + wt] = static_cast<T>(sum);
    }
}

/// The same sums one position at a time, for taps whose window would exceed kMaxWindow.
template <class T, class A, int KB>
void grad_weights_tap_scalar(const ConvGeometry& g, const T* x, T* dw, const T* dy, i64 grp,
                             i64 k0, i64 q, i64 t0, i64 t1, i64 t2) {
  i64 lo0, hi0, lo1, hi1, lo2, hi2;
  g.valid_out_range(0, t0, lo0, hi0);
  g.valid_out_range(1, t1, lo1, hi1);
  g.valid_out_range(2, t2, lo2, hi2);
  const i64 off2 = t2 * g.dil[2] - g.pad[2];
  A acc[KB] = {};
  for (i64 n = 0; n < g.N; ++n)
    for (i64 o0 = lo0; o0 < hi0; ++o0)
      for (i64 o1 = lo1; o1 < hi1; ++o1) {
        const i64 i0 = o0 * g.stride[0] - g.pad[0] + t0 * g.dil[0];
        const i64 i1 = o1 * g.stride[1] - g.pad[1] + t1 * g.dil[1];
        const T* xr = x + (n * g.C + grp * g.Cg + q) * g.in_numel + (i0 * g.in[1] + i1) * g.in[2];
        const T* dr = dy + (n * g.K + k0) * g.out_numel + (o0 * g.out[1] + o1) * g.out[2];
        for (i64 o2 = lo2; o2 < hi2; ++o2) {
          const A xv = static_cast<A>(xr[o2 * g.stride[2] + off2]);
          for (int kk = 0; kk < KB; ++kk) acc[kk] += static_cast<A>(dr[kk * g.out_numel + o2]) * xv;
        }
      }
  const i64 wt = (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2] + g.wtap(2, t2);
  for (int kk = 0; kk < KB; ++kk) dw[((k0 + kk) * g.Cg + q) * g.ker_numel + wt] = static_cast<T>(acc[kk]);
}

/// All taps of filters [k0, k0 + KB) and input channel q, innermost taps in passes of <= 3.
template <class T, class A, int KB>
void grad_weights_block(const ConvGeometry& g, const T* x, T* dw, const T* dy, i64 grp, i64 k0, i64 q) {
  for (i64 t0 = 0; t0 < g.ker[0]; ++t0)
    for (i64 t1 = 0; t1 < g.ker[1]; ++t1) {
      // The window of a pass spans the tiles (rounded up to kLanes), plus the pass's taps
      // (dilated), plus stride gaps.
      const i64 span = (g.out[2] + kLanes - 1) / kLanes * kLanes;
      if ((span - 1) * g.stride[2] + 2 * g.dil[2] + 1 > kMaxWindow) {
        for (i64 t2 = 0; t2 < g.ker[2]; ++t2) grad_weights_tap_scalar<T, A, KB>(g, x, dw, dy, grp, k0, q, t0, t1, t2);
        continue;
      }
      i64 t2 = 0;
      for (; t2 + 3 <= g.ker[2]; t2 += 3) grad_weights_taps<T, A, KB, 3>(g, x, dw, dy, grp, k0, q, t0, t1, t2);
      if (t2 + 2 <= g.ker[2]) {
        grad_weights_taps<T, A, KB, 2>(g, x, dw, dy, grp, k0, q, t0, t1, t2);
        t2 += 2;
      }
      if (t2 < g.ker[2]) grad_weights_taps<T, A, KB, 1>(g, x, dw, dy, grp, k0, q, t0, t1, t2);
    }
}

template <class T, class A>
void grad_weights(const ConvGeometry& g, const T* x, T* dw, const T* dy, const ConvContext& ctx) {
  constexpr i64 kBlock = kWgradRowsOf<A>;
  const i64 nkb = (g.Kg + kBlock - 1) / kBlock;
  parallel_over(ctx, g.G * nkb * g.Cg, [&](i64 begin, i64 end) {
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 q = idx % g.Cg;
      const i64 kb = (idx / g.Cg) % nkb;
      const i64 grp = idx / g.Cg / nkb;
      i64 k = grp * g.Kg + kb * kBlock;
      const i64 k_end = grp * g.Kg + std::min<i64>(g.Kg, (kb + 1) * kBlock);
      // Full blocks use all accumulators; a ragged end goes through narrower blocks.
      for (; k + kBlock <= k_end; k += kBlock) grad_weights_block<T, A, kBlock>(g, x, dw, dy, grp, k, q);
      for (; k + 2 <= k_end; k += 2) grad_weights_block<T, A, 2>(g, x, dw, dy, grp, k, q);
      for (; k < k_end; ++k) grad_weights_block<T, A, 1>(g, x, dw, dy, grp, k, q);
    }
  });
}

// ---- entry --------------------------------------------------------------------------

template <class T, class A>
void run_typed(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const ConvGeometry g(p);
  auto* x = static_cast<T*>(t.x);
  auto* w = static_cast<T*>(t.w);
  auto* y = static_cast<T*>(t.y);
  switch (p.direction) {
    case ConvDirection::forward: forward<T, A>(g, x, w, y, t.epilogue, ctx); break;
    case ConvDirection::grad_inputs: grad_inputs<T, A>(g, x, w, y, ctx); break;
    case ConvDirection::grad_weights: grad_weights<T, A>(g, x, w, y, ctx); break;
  }
}

}  // namespace

/// Entry point of this level's cpu.direct kernels (called by conv_direct.cpp).
void direct_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  if (p.dtype == DType::float64) run_typed<double, double>(p, t, ctx);
  else if (p.compute == DType::float64) run_typed<float, double>(p, t, ctx);
  else run_typed<float, float>(p, t, ctx);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
