// The pooling loops (ops/pool.cpp: max and average pooling over 1 to 3 axes, their
// gradients and max_pool<d>d_grad_grad), compiled once per CPU level.
// backends/cpu/pool_kernels.cpp splits the work over the thread pool.
//
// Every pooling is a 3-D one (depth, rows, columns; PoolParams). The work unit is an
// output row (plane, output depth, output row): its window covers a few input rows, each
// reduced along the columns straight into the output row (horizontal first, then across
// rows in order, which keeps the row-major "first maximum" of the window). Windows whose
// columns lie wholly inside the row take a loop specialised for common window/stride pairs,
// which the compiler vectorises; the clipped windows at the borders take the general one.
#include <cstdint>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/core/error.hpp"
#include "ops/pool_internal.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

namespace {

using detail::PoolMode;
using detail::PoolParams;

template <class F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(std::int32_t{});
    case DType::int64: return f(std::int64_t{});
    default: throw TypeError(msg(op, ": no kernel for dtype ", dtype_name(t)));
  }
}

/// Input positions [lo, hi) covered by output position o along internal axis `axis`, and
/// the divisor the average uses there.
struct Span {
  std::int64_t lo, hi, count;
};
Span span(const PoolParams& p, int axis, std::int64_t o, std::int64_t n) {
  const std::int64_t start = o * p.stride[axis] - p.pad[axis];
  const std::int64_t end = start + p.window[axis];
  Span s{start > 0 ? start : 0, end < n ? end : n, 0};
  // With padding counted, the window is still clipped at the padded border (Theano).
  s.count = p.inc_pad ? (end < n + p.pad[axis] ? end : n + p.pad[axis]) - start : s.hi - s.lo;
  return s;
}

/// What a kernel call needs besides the data: every output position's window along each
/// axis (computed once per call, so the row loop does no division), the reciprocals of the
/// column counts, and the output columns [j0, j1) whose windows lie wholly inside the row.
/// The most input rows (depth x rows) a window may span on the vector paths.
constexpr std::int64_t kMaxWindowRows = 64;

template <class T>
struct Plan {
  const PoolParams& p;
  const PoolGeometry& g;
  std::vector<Span> dspans, hspans, cols;
  std::vector<T> inv;  ///< 1 / column count (average pooling)
  std::int64_t j0 = 0, j1 = 0, k = 1, s = 1, pad = 0;
  bool vec = false;  ///< float32 with column stride 1 or 2: the vector paths below
  /// vec, and the windows tile the input exactly (window = stride, no padding, no input
  /// left over): average pooling's gradient stores each input once, with no zeroing pass.
  bool tiles = false;

  Plan(const PoolParams& pp, const PoolGeometry& gg) : p(pp), g(gg) {
    auto spans = [&](int axis, std::int64_t outs, std::int64_t n) {
      std::vector<Span> v(static_cast<std::size_t>(outs));
      for (std::int64_t o = 0; o < outs; ++o) v[static_cast<std::size_t>(o)] = span(p, axis, o, n);
      return v;
    };
    dspans = spans(0, g.od, g.d);
    hspans = spans(1, g.oh, g.h);
    cols = spans(2, g.ow, g.w);
    for (const Span& c : cols) inv.push_back(static_cast<T>(1.0 / static_cast<double>(c.count)));
    k = p.window[2];
    s = p.stride[2];
    pad = p.pad[2];
    j0 = (pad + s - 1) / s;
    j1 = g.w + pad >= k ? (g.w + pad - k) / s + 1 : 0;
    j1 = j1 < g.ow ? j1 : g.ow;
    if (j1 < j0) j1 = j0 = 0;
    vec = std::is_same_v<T, float> && (s == 1 || s == 2) && p.window[0] * p.window[1] <= kMaxWindowRows;
    tiles = vec;
    const std::int64_t n[3] = {g.d, g.h, g.w}, outs[3] = {g.od, g.oh, g.ow};
    for (int a = 0; a < 3; ++a)
      tiles = tiles && p.window[a] == p.stride[a] && p.pad[a] == 0 && outs[a] * p.stride[a] == n[a];
  }
};

/// Calls fn(j, span) for the output columns whose windows are clipped at a border.
template <class T, class F>
void for_border_columns(const Plan<T>& c, F&& fn) {
  for (std::int64_t j = 0; j < c.j0; ++j) fn(j, c.cols[static_cast<std::size_t>(j)]);
  for (std::int64_t j = c.j1; j < c.g.ow; ++j) fn(j, c.cols[static_cast<std::size_t>(j)]);
}

/// An output row (plane, output depth, output row), stepped through in order.
struct Cursor {
  std::int64_t pl, od, oh;
  Cursor(const PoolGeometry& g, std::int64_t row)
      : pl(row / (g.od * g.oh)), od(row % (g.od * g.oh) / g.oh), oh(row % g.oh) {}
  void next(const PoolGeometry& g) {
    if (++oh < g.oh) return;
    oh = 0;
    if (++od < g.od) return;
    od = 0;
    ++pl;
  }
};

/// Calls fn(offset of the input row in x, first) for each input row of the cursor's
/// window, in order; returns the number of (depth, row) cells the average divides by.
template <class T, class F>
std::int64_t for_window_rows(const Plan<T>& c, const Cursor& at, F&& fn) {
  const PoolGeometry& g = c.g;
  const Span &sd = c.dspans[static_cast<std::size_t>(at.od)], &sh = c.hspans[static_cast<std::size_t>(at.oh)];
  bool first = true;
  for (std::int64_t d = sd.lo; d < sd.hi; ++d)
    for (std::int64_t r = sh.lo; r < sh.hi; ++r) {
      fn(((at.pl * g.d + d) * g.h + r) * g.w, first);
      first = false;
    }
  return sd.count * sh.count;
}

/// Whether v replaces m as the first maximum so far. Exact: a NaN wins and stays; fast:
/// plain comparison (a branch-free select), valid while no NaN is seen (the callers
/// count NaNs and redo the row exactly when there was one).
template <bool Exact, class T>
inline bool replaces(T m, T v) {
  if constexpr (Exact) return (m == m) & !(v <= m);
  return v > m;
}

// ---- float32, column stride 1 or 2: all the windows of an output row in vector registers,
// V output columns at a time, every window row folded in before anything is stored, so a
// short row costs one step rather than a pass per window row. Stride 2 splits two loads
// into even and odd columns (window columns i and i + 1); a partial vector at a row's end
// uses masked (AVX-512) or staged loads and stores, so rows shorter than V take one step.
// Per-row scratch (codes, maxima) is written and read as whole vectors: a masked store, or
// scalar stores, read back by a wider load cannot be forwarded and stall the next step.

#if CONVGRAPH_ISA_AVX512
constexpr int kV = 16;
using vf = __m512;
using vmask = __mmask16;
inline __mmask16 lanes(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline vf vload(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
inline vf vload_full(const float* p) { return _mm512_loadu_ps(p); }
/// Stores lanes [a, b) of v to p[a..b).
inline void vstore_range(float* p, vf v, int a, int b) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>(lanes(b) & ~lanes(a)), v);
}
inline void vstore_full(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline void vstore(float* p, vf v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
inline vf vset(float x) { return _mm512_set1_ps(x); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vmask veq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline vmask vgt0(vf a) { return _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_GT_OQ); }
inline vf vsel(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
/// replaces<true> (max pooling's rule: a NaN wins and stays) on every lane.
inline vmask vreplaces(vf m, vf v) {
  return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(m, m, _CMP_ORD_Q), v, m, _CMP_NLE_UQ);
}
inline vf veven(vf a, vf b) {
  return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
}
inline vf vodd(vf a, vf b) {
  return _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}
/// The even / odd columns in a lane order of the level's choosing, the same for every
/// call (folds are lane-wise); vsplit_order puts a folded result in column order.
inline vf veven_split(vf a, vf b) { return veven(a, b); }
inline vf vodd_split(vf a, vf b) { return vodd(a, b); }
inline vf vsplit_order(vf v) { return v; }
inline void vzip(vf e, vf o, vf& lo, vf& hi) {
  lo = _mm512_permutex2var_ps(e, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), o);
  hi = _mm512_permutex2var_ps(e, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), o);
}
inline void vzip_split(vf e, vf o, vf& lo, vf& hi) { vzip(e, o, lo, hi); }
#else
#if CONVGRAPH_ISA_AVX2
constexpr int kV = 8;
using vf = __m256;
inline vf vload_full(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore_full(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vset(float x) { return _mm256_set1_ps(x); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf veq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
inline vf vgt0(vf a) { return _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GT_OQ); }
inline vf vsel(vf m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
inline vf vreplaces(vf m, vf v) {
  return _mm256_and_ps(_mm256_cmp_ps(m, m, _CMP_ORD_Q), _mm256_cmp_ps(v, m, _CMP_NLE_UQ));
}
// In-lane shuffles give [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit permute puts the halves in order.
inline vf veven(vf a, vf b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
}
inline vf vodd(vf a, vf b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}
// Without the permute: columns [0 1 4 5 2 3 6 7]; a window fold permutes once at its end
// rather than twice per column pair (the permute crosses lanes: it was the hot spot).
inline vf veven_split(vf a, vf b) { return _mm256_shuffle_ps(a, b, 0x88); }
inline vf vodd_split(vf a, vf b) { return _mm256_shuffle_ps(a, b, 0xDD); }
inline vf vsplit_order(vf v) { return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8)); }
inline void vzip(vf e, vf o, vf& lo, vf& hi) {
  const vf u0 = _mm256_unpacklo_ps(e, o), u1 = _mm256_unpackhi_ps(e, o);
  lo = _mm256_permute2f128_ps(u0, u1, 0x20);
  hi = _mm256_permute2f128_ps(u0, u1, 0x31);
}
/// vzip of even and odd columns in the split order: the in-lane unpacks alone.
inline void vzip_split(vf e, vf o, vf& lo, vf& hi) {
  lo = _mm256_unpacklo_ps(e, o);
  hi = _mm256_unpackhi_ps(e, o);
}
#else
constexpr int kV = 4;
using vf = __m128;
inline vf vload_full(const float* p) { return _mm_loadu_ps(p); }
inline void vstore_full(float* p, vf v) { _mm_storeu_ps(p, v); }
inline vf vset(float x) { return _mm_set1_ps(x); }
inline vf vadd(vf a, vf b) { return _mm_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm_mul_ps(a, b); }
inline vf veq(vf a, vf b) { return _mm_cmpeq_ps(a, b); }
inline vf vgt0(vf a) { return _mm_cmpgt_ps(a, _mm_setzero_ps()); }
inline vf vsel(vf m, vf a, vf b) { return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)); }
inline vf vreplaces(vf m, vf v) { return _mm_and_ps(_mm_cmpord_ps(m, m), _mm_cmpnle_ps(v, m)); }
inline vf veven(vf a, vf b) { return _mm_shuffle_ps(a, b, 0x88); }
inline vf vodd(vf a, vf b) { return _mm_shuffle_ps(a, b, 0xDD); }
inline vf veven_split(vf a, vf b) { return veven(a, b); }
inline vf vodd_split(vf a, vf b) { return vodd(a, b); }
inline vf vsplit_order(vf v) { return v; }
inline void vzip(vf e, vf o, vf& lo, vf& hi) {
  lo = _mm_unpacklo_ps(e, o);
  hi = _mm_unpackhi_ps(e, o);
}
inline void vzip_split(vf e, vf o, vf& lo, vf& hi) { vzip(e, o, lo, hi); }
#endif
using vmask = vf;
#if CONVGRAPH_ISA_AVX2
/// Lanes [0, n) of p, zeros above; a masked load (a load staged through the stack after
/// scalar stores cannot be forwarded and stalls: it was most of w3 s2's time).
inline vf vload(const float* p, int n) {
  if (n == kV) return vload_full(p);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
#else
// Partial vectors go through a buffer on the stack.
inline vf vload(const float* p, int n) {
  if (n == kV) return vload_full(p);
  alignas(64) float b[kV] = {};
  for (int i = 0; i < n; ++i) b[i] = p[i];
  return vload_full(b);
}
#endif
inline void vstore(float* p, vf v, int n) {
  if (n == kV) return vstore_full(p, v);
  alignas(64) float b[kV];
  vstore_full(b, v);
  for (int i = 0; i < n; ++i) p[i] = b[i];
}
inline void vstore_range(float* p, vf v, int a, int b) {
  if (a == 0 && b == kV) return vstore_full(p, v);
  alignas(64) float buf[kV];
  vstore_full(buf, v);
  for (int i = a; i < b; ++i) p[i] = buf[i];
}
#endif

/// Folds the window rows `rows` (window order) for the output columns [c.j0, c.j1), whose
/// windows lie inside the row. Max: each window's first maximum (the first NaN if any: the
/// rule of replaces<true>) in best[j] and, with Codes, its code (rank * k + column, as a
/// float) in code[j]; both are then scratch arrays of at least c.j1 + kV entries, written in
/// whole vectors. Sum: the sum times `scale` in best[j]. KW: the window's width when known
/// at compile time.
template <int S, int KW, bool Max, bool Codes>
[[gnu::always_inline]] inline void fold_interior(const Plan<float>& c, const float* const* rows, int nrows,
                                                 float* best, float* code, float scale) {
  const std::int64_t k = KW ? KW : c.k;
  for (std::int64_t j = c.j0; j < c.j1; j += kV) {
    const int n = static_cast<int>(c.j1 - j < kV ? c.j1 - j : kV);
    // Each window row folds on its own, then the rows in order: the rule is associative (a
    // NaN or the first maximum of a sequence is that of its two halves' results), and the
    // rows' chains of dependent compares run side by side.
    vf m = vset(0.0f), a = vset(0.0f);
    auto fold = [&](vf& fm, vf& fa, vf v, vf va, bool first) {
      if (first) {
        fm = v;
        fa = va;
      } else if constexpr (Max) {
        const vmask u = vreplaces(fm, v);
        if constexpr (Codes) fa = vsel(u, va, fa);
        fm = vsel(u, v, fm);
      } else {
        fm = vadd(fm, v);
      }
    };
    for (int r = 0; r < nrows; ++r) {
      const float* base = rows[r] + j * S - c.pad;
      vf rm = vset(0.0f), ra = vset(0.0f);
      auto col = [&](vf v, std::int64_t i) { fold(rm, ra, v, vset(static_cast<float>(r * k + i)), i == 0); };
      if constexpr (S == 1) {
        for (std::int64_t i = 0; i < k; ++i) col(vload(base + i, n), i);
      } else {
        for (std::int64_t i = 0; i < k; i += 2) {
          const int len = 2 * n - (i + 1 < k ? 0 : 1);  // read no further than the last window
          const vf lo = vload(base + i, len < kV ? len : kV);
          const vf hi = len > kV ? vload(base + i + kV, len - kV) : vset(0.0f);
          col(veven_split(lo, hi), i);
          if (i + 1 < k) col(vodd_split(lo, hi), i + 1);
        }
      }
      fold(m, a, rm, ra, r == 0);
    }
    if constexpr (S == 2) {
      m = vsplit_order(m);
      if constexpr (Codes) a = vsplit_order(a);
    }
    if constexpr (Codes) {
      vstore_full(best + j, m);
      vstore_full(code + j, a);
    } else {
      vstore(best + j, Max ? m : vmul(m, vset(scale)), n);
    }
  }
}

/// The same for the border columns (windows clipped at the row's ends), scalar; the codes
/// count columns from the unclipped window start. Sum: times inv_cells / column count.
template <bool Max>
void fold_border(const Plan<float>& c, const float* const* rows, int nrows, float* best, float* code,
                 float inv_cells) {
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    const std::int64_t start = j * c.s - c.pad;
    float m = Max ? -std::numeric_limits<float>::infinity() : 0.0f, a = static_cast<float>(sp.lo - start);
    for (int r = 0; r < nrows; ++r)
      for (std::int64_t i = sp.lo; i < sp.hi; ++i) {
        const float v = rows[r][i];
        if constexpr (Max) {
          const bool u = replaces<true>(m, v);
          a = u ? static_cast<float>(r * c.k + i - start) : a;
          m = u ? v : m;
        } else {
          m += v;
        }
      }
    best[j] = Max ? m : m * (inv_cells * c.inv[static_cast<std::size_t>(j)]);
    if (code) code[j] = a;
  });
}

/// Every window of output row `at`: maxima (with codes when Codes) or, with Max false,
/// averages, into best (and code). `offs` (optional) receives each window row's offset in x.
template <int KW, bool Max, bool Codes>
[[gnu::always_inline]] inline void fold_windows(const Plan<float>& c, const float* x, const Cursor& at, float* best,
                                                float* code, std::int64_t* offs = nullptr) {
  const float* rows[kMaxWindowRows];
  int nr = 0;
  const std::int64_t cells = for_window_rows(c, at, [&](std::int64_t off, bool) {
    if (offs) offs[nr] = off;
    rows[nr++] = x + off;
  });
  float scale = 1.0f, inv_cells = 1.0f;
  if constexpr (!Max) {
    inv_cells = static_cast<float>(1.0 / static_cast<double>(cells));
    scale = c.j1 > c.j0 ? inv_cells * c.inv[static_cast<std::size_t>(c.j0)] : 0.0f;
  }
  if (c.s == 1)
    fold_interior<1, KW, Max, Codes>(c, rows, nr, best, code, scale);
  else
    fold_interior<2, KW, Max, Codes>(c, rows, nr, best, code, scale);
  if (c.j0 > 0 || c.j1 < c.g.ow) fold_border<Max>(c, rows, nr, best, Codes ? code : nullptr, inv_cells);
}

/// Adds gy[j] * scale to every input column of the windows [c.j0, c.j1) in input row gx;
/// Store: stores it instead (c.tiles: every column is in exactly one window).
template <int S, bool Store = false>
void spread_interior(const float* gy, float scale, const Plan<float>& c, float* gx) {
  const std::int64_t k = c.k;
  for (std::int64_t j = c.j0; j < c.j1; j += kV) {
    const int n = static_cast<int>(c.j1 - j < kV ? c.j1 - j : kV);
    const vf g = vmul(vload(gy + j, n), vset(scale));
    float* base = gx + j * S - c.pad;
    if constexpr (S == 1) {
      for (std::int64_t i = 0; i < k; ++i) vstore(base + i, Store ? g : vadd(vload(base + i, n), g), n);
    } else {
      for (std::int64_t i = 0; i < k; i += 2) {
        const bool pair = i + 1 < k;
        const int len = 2 * n - (pair ? 0 : 1), l0 = len < kV ? len : kV;  // write no further than the window
        vf lo, hi;
        vzip(g, pair ? g : vset(0.0f), lo, hi);
        float* q = base + i;
        vstore(q, Store ? lo : vadd(vload(q, l0), lo), l0);
        if (len > kV) vstore(q + kV, Store ? hi : vadd(vload(q + kV, len - kV), hi), len - kV);
      }
    }
  }
}

/// Average pooling's gradient for planes [p0, p1), gathered: every input row is the sum,
/// over the output rows whose windows cover it, of their gy spread along the row, stored
/// once. The spread is a sum of shifted vector loads of a scaled copy of each gy row
/// (gy / cell count, with zero margins); stride 2 forms the even and odd input columns
/// apart and interleaves them. No zeroing pass and no read-modify-write of gx: overlapping
/// windows added in place make every load wait for the masked store before it.
void avg_grad_planes_gather(const Plan<float>& c, const float* gy, float* gx, std::int64_t p0, std::int64_t p1) {
  const PoolGeometry& g = c.g;
  const std::int64_t k = c.k, s = c.s, margin = k + 1;
  // Output column (s = 1) or column pair (s = 2) t covers input columns s * t - pad (+ 1).
  const std::int64_t tb = s == 1 ? c.pad : c.pad / 2, te = s == 1 ? g.w - 1 + c.pad : (g.w - 1 + c.pad) / 2;
  const std::int64_t len = margin + (g.ow > te + 1 ? g.ow : te + 1) + kV + margin;
  std::vector<float> scaled(static_cast<std::size_t>(g.od * g.oh * len), 0.0f);
  // The output positions [first, last) whose windows cover each input position.
  auto cover = [](const std::vector<Span>& spans, std::int64_t n) {
    std::vector<Span> v(static_cast<std::size_t>(n), Span{0, 0, 0});
    for (std::int64_t o = 0; o < static_cast<std::int64_t>(spans.size()); ++o)
      for (std::int64_t i = spans[static_cast<std::size_t>(o)].lo; i < spans[static_cast<std::size_t>(o)].hi; ++i) {
        Span& e = v[static_cast<std::size_t>(i)];
        if (e.hi == 0) e.lo = o;
        e.hi = o + 1;
      }
    return v;
  };
  const std::vector<Span> dc = cover(c.dspans, g.d), hc = cover(c.hspans, g.h);
  const float* src[kMaxWindowRows];
  for (std::int64_t pl = p0; pl < p1; ++pl) {
    for (std::int64_t od = 0; od < g.od; ++od)
      for (std::int64_t oh = 0; oh < g.oh; ++oh) {
        const float inv_cells = static_cast<float>(
            1.0 / static_cast<double>(c.dspans[static_cast<std::size_t>(od)].count *
                                      c.hspans[static_cast<std::size_t>(oh)].count));
        float* dst = scaled.data() + (od * g.oh + oh) * len + margin;
        const float* gyr = gy + ((pl * g.od + od) * g.oh + oh) * g.ow;
        for (std::int64_t j = 0; j < g.ow; ++j) dst[j] = gyr[j] * (inv_cells * c.inv[static_cast<std::size_t>(j)]);
      }
    for (std::int64_t d = 0; d < g.d; ++d)
      for (std::int64_t r = 0; r < g.h; ++r) {
        float* out = gx + ((pl * g.d + d) * g.h + r) * g.w;
        const Span &cd = dc[static_cast<std::size_t>(d)], &ch = hc[static_cast<std::size_t>(r)];
        int n = 0;
        for (std::int64_t od = cd.lo; od < cd.hi; ++od)
          for (std::int64_t oh = ch.lo; oh < ch.hi; ++oh) src[n++] = scaled.data() + (od * g.oh + oh) * len + margin;
        if (n == 0) {
          std::memset(out, 0, static_cast<std::size_t>(g.w) * sizeof(float));
          continue;
        }
        for (std::int64_t t = tb; t <= te; t += kV) {
          vf even = vset(0.0f), odd = vset(0.0f);
          for (int q = 0; q < n; ++q)
            for (std::int64_t i = 0; i < k; ++i) {
              if (s == 1) even = vadd(even, vload_full(src[q] + t - i));
              else if (i % 2 == 0) even = vadd(even, vload_full(src[q] + t - i / 2));
              else odd = vadd(odd, vload_full(src[q] + t - i / 2));
            }
          const std::int64_t x0 = s * t - c.pad;  // the input column of lane 0
          if (s == 1) {
            vstore(out + x0, even, static_cast<int>(te + 1 - t < kV ? te + 1 - t : kV));
            continue;
          }
          vf lo, hi;
          vzip(even, odd, lo, hi);
          const std::int64_t end = g.w - x0;  // lanes past the row's end are not stored
          vstore_range(out + x0, lo, x0 < 0 ? static_cast<int>(-x0) : 0, static_cast<int>(end < kV ? end : kV));
          if (end > kV) vstore_range(out + x0 + kV, hi, 0, static_cast<int>(end - kV < kV ? end - kV : kV));
        }
      }
  }
}

// ---- one input row into one output row. KW, SW: the column window and stride when known
// at compile time (0: read them from the plan). Each returns the number of NaNs it saw
// (always 0 when Exact). ----------------------------------------------------------------

template <bool Exact, int KW, int SW, class T>
int max_row(const T* in, const Plan<T>& c, T* out, bool first) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s;
  int nans = 0;
  auto put = [&](std::int64_t j, T m) { out[j] = first || replaces<Exact>(out[j], m) ? m : out[j]; };
  for (std::int64_t j = c.j0; j < c.j1; ++j) {
    const T* q = in + j * s - c.pad;
    T m = q[0];
    nans += !Exact && q[0] != q[0];
    for (std::int64_t i = 1; i < k; ++i) {
      nans += !Exact && q[i] != q[i];
      m = replaces<Exact>(m, q[i]) ? q[i] : m;
    }
    put(j, m);
  }
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    T m = in[sp.lo];
    for (std::int64_t i = sp.lo; i < sp.hi; ++i) {
      nans += !Exact && in[i] != in[i];
      m = replaces<Exact>(m, in[i]) ? in[i] : m;
    }
    put(j, m);
  });
  return nans;
}

template <int KW, int SW, class T>
void sum_row(const T* in, const Plan<T>& c, T* out, bool first) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s;
  auto put = [&](std::int64_t j, T v) { out[j] = first ? v : out[j] + v; };
  for (std::int64_t j = c.j0; j < c.j1; ++j) {
    const T* q = in + j * s - c.pad;
    T v = q[0];
    for (std::int64_t i = 1; i < k; ++i) v += q[i];
    put(j, v);
  }
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    T v = 0;
    for (std::int64_t i = sp.lo; i < sp.hi; ++i) v += in[i];
    put(j, v);
  });
}

/// Makes (m, a) the first maximum of (m, a) and (v, i). The fast form is two selects the
/// compiler makes branch-free (a max and a conditional move): random data would mispredict
/// a branch on every other element.
template <bool Exact, class T>
inline void keep_first_max(T& m, std::int64_t& a, T v, std::int64_t i) {
  if constexpr (Exact) {
    if (replaces<true>(m, v)) m = v, a = i;
  } else {
    a = v > m ? i : a;
    m = v > m ? v : m;
  }
}

/// The first maximum of each window so far: its value in best[j], its offset (from the
/// plane's start) in at[j]; `base` is the row's offset in its plane.
template <bool Exact, int KW, int SW, class T>
int argmax_row(const T* in, std::int64_t base, const Plan<T>& c, T* best, std::int64_t* at, bool first) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s;
  int nans = 0;
  auto put = [&](std::int64_t j, T m, std::int64_t a) {
    if (first) {
      best[j] = m;
      at[j] = base + a;
    } else {
      keep_first_max<Exact>(best[j], at[j], m, base + a);
    }
  };
  for (std::int64_t j = c.j0; j < c.j1; ++j) {
    const std::int64_t lo = j * s - c.pad;
    T m = in[lo];
    std::int64_t a = lo;
    nans += !Exact && m != m;
    for (std::int64_t i = lo + 1; i < lo + k; ++i) {
      nans += !Exact && in[i] != in[i];
      keep_first_max<Exact>(m, a, in[i], i);
    }
    put(j, m, a);
  }
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    T m = in[sp.lo];
    std::int64_t a = sp.lo;
    for (std::int64_t i = sp.lo; i < sp.hi; ++i) {
      nans += !Exact && in[i] != in[i];
      keep_first_max<Exact>(m, a, in[i], i);
    }
    put(j, m, a);
  });
  return nans;
}

/// Adds share[j] to every input column of window j.
template <int KW, int SW, class T>
void spread_row(const T* share, const Plan<T>& c, T* gx) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s;
  for (std::int64_t j = c.j0; j < c.j1; ++j) {
    T* q = gx + j * s - c.pad;
    for (std::int64_t i = 0; i < k; ++i) q[i] += share[j];
  }
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    for (std::int64_t i = sp.lo; i < sp.hi; ++i) gx[i] += share[j];
  });
}

/// Calls f.template operator()<KW, SW>() with the specialisation for the column window.
template <class T, class F>
void dispatch_columns(const Plan<T>& c, F&& f) {
  if (c.k == 2 && c.s == 2)
    f.template operator()<2, 2>();
  else if (c.k == 3 && c.s == 2)
    f.template operator()<3, 2>();
  else if (c.k == 3 && c.s == 3)
    f.template operator()<3, 3>();
  else
    f.template operator()<0, 0>();
}

/// Output row `at`'s pooled values into out (ow entries).
template <int KW, int SW, class T>
void pool_row(const Plan<T>& c, const T* x, const Cursor& at, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (c.vec) {
      if (c.p.mode == PoolMode::max)
        fold_windows<KW, true, false>(c, x, at, out, nullptr);
      else
        fold_windows<KW, false, false>(c, x, at, out, nullptr);
      return;
    }
  }
  if (c.p.mode == PoolMode::max) {
    int nans = 0;
    for_window_rows(c, at, [&](std::int64_t off, bool first) { nans += max_row<false, KW, SW>(x + off, c, out, first); });
    if (nans)
      for_window_rows(c, at, [&](std::int64_t off, bool first) { max_row<true, 0, 0>(x + off, c, out, first); });
    return;
  }
  const std::int64_t cells =
      for_window_rows(c, at, [&](std::int64_t off, bool first) { sum_row<KW, SW>(x + off, c, out, first); });
  const T inv_cells = static_cast<T>(1.0 / static_cast<double>(cells));
  for (std::int64_t j = 0; j < c.g.ow; ++j) out[j] *= inv_cells * c.inv[static_cast<std::size_t>(j)];
}

/// Per-call scratch of the argmax loops (one output row's best values and positions).
template <class T>
struct Argmax {
  std::vector<T> best, code;
  std::vector<std::int64_t> at;
  explicit Argmax(std::int64_t ow)  // best and code: whole vectors past the row's end (fold_interior)
      : best(static_cast<std::size_t>(ow + kV)), code(best.size()), at(static_cast<std::size_t>(ow)) {}

  /// Fills `at` with output row `cur`'s window argmaxes (offsets in the plane of x).
  template <int KW, int SW>
  void find(const Plan<T>& c, const T* x, const Cursor& cur) {
    const std::int64_t plane = c.g.d * c.g.h * c.g.w;
    if constexpr (std::is_same_v<T, float>) {
      std::int64_t offs[kMaxWindowRows];
      if (c.vec) {
        fold_windows<KW, true, true>(c, x, cur, best.data(), code.data(), offs);
        const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s, base = c.pad + cur.pl * plane;
        for (std::int64_t j = 0; j < c.g.ow; ++j) {
          const auto q = static_cast<std::int64_t>(code[static_cast<std::size_t>(j)]);
          at[static_cast<std::size_t>(j)] = offs[q / k] + j * s + q % k - base;
        }
        return;
      }
    }
    int nans = 0;
    for_window_rows(c, cur, [&](std::int64_t off, bool first) {
      nans += argmax_row<false, KW, SW>(x + off, off - cur.pl * plane, c, best.data(), at.data(), first);
    });
    if (nans)
      for_window_rows(c, cur, [&](std::int64_t off, bool first) {
        argmax_row<true, 0, 0>(x + off, off - cur.pl * plane, c, best.data(), at.data(), first);
      });
  }
};

/// gx for output row `cur` (whose window rows the caller has zeroed): max routes gy to the
/// argmax, avg spreads gy / count.
template <int KW, int SW, class T>
void grad_row(const Plan<T>& c, const T* x, const T* gy, T* gx, const Cursor& cur, Argmax<T>& scratch) {
  const PoolGeometry& g = c.g;
  const T* gyr = gy + ((cur.pl * g.od + cur.od) * g.oh + cur.oh) * g.ow;
  if (c.p.mode == PoolMode::max) {
    scratch.template find<KW, SW>(c, x, cur);
    T* gxp = gx + cur.pl * (g.d * g.h * g.w);
    const bool relu = c.p.relu_grad;  // gy lands on the window's maximum: masked unless it is > 0
    for (std::int64_t j = 0; j < g.ow; ++j) {
      const auto u = static_cast<std::size_t>(j);
      gxp[scratch.at[u]] += !relu || scratch.best[u] > T(0) ? gyr[j] : T(0);
    }
    return;
  }
  T* share = scratch.best.data();
  const std::int64_t cells =
      c.dspans[static_cast<std::size_t>(cur.od)].count * c.hspans[static_cast<std::size_t>(cur.oh)].count;
  const T inv_cells = static_cast<T>(1.0 / static_cast<double>(cells));
  if constexpr (std::is_same_v<T, float>) {
    if (c.vec) {  // the interior's share is formed in registers; the border's here
      const float scale = c.j1 > c.j0 ? inv_cells * c.inv[static_cast<std::size_t>(c.j0)] : 0.0f;
      for_border_columns(c, [&](std::int64_t j, const Span&) {
        share[j] = gyr[j] * (inv_cells * c.inv[static_cast<std::size_t>(j)]);
      });
      for_window_rows(c, cur, [&](std::int64_t off, bool) {
        float* row = gx + off;
        if (c.tiles)
          c.s == 1 ? spread_interior<1, true>(gyr, scale, c, row) : spread_interior<2, true>(gyr, scale, c, row);
        else
          c.s == 1 ? spread_interior<1>(gyr, scale, c, row) : spread_interior<2>(gyr, scale, c, row);
        for_border_columns(c, [&](std::int64_t j, const Span& sp) {
          for (std::int64_t i = sp.lo; i < sp.hi; ++i) row[i] += share[j];
        });
      });
      return;
    }
  }
  for (std::int64_t j = 0; j < g.ow; ++j) share[j] = gyr[j] * (inv_cells * c.inv[static_cast<std::size_t>(j)]);
  for_window_rows(c, cur, [&](std::int64_t off, bool) { spread_row<KW, SW>(share, c, gx + off); });
}

/// Zeroes the input rows that output row `cur` owns: its window's rows and, with stride >
/// window, the gap after them (the last output row owns the rest of the axis).
template <class T>
void zero_owned_rows(const Plan<T>& c, T* gx, const Cursor& cur) {
  const PoolParams& p = c.p;
  const PoolGeometry& g = c.g;
  auto owned = [&](int axis, std::int64_t o, std::int64_t outs, std::int64_t n) {
    const std::int64_t lo = o * p.stride[axis] - p.pad[axis], hi = lo + p.stride[axis];
    return Span{lo > 0 ? lo : 0, o + 1 == outs || hi > n ? n : hi, 0};
  };
  const Span sd = owned(0, cur.od, g.od, g.d), sh = owned(1, cur.oh, g.oh, g.h);
  for (std::int64_t d = sd.lo; d < sd.hi; ++d)
    if (sh.hi > sh.lo)
      std::memset(gx + ((cur.pl * g.d + d) * g.h + sh.lo) * g.w, 0,
                  static_cast<std::size_t>((sh.hi - sh.lo) * g.w) * sizeof(T));
}

// ---- max gradient when no two windows share an input element (stride >= window on every
// axis). Each output row finds its windows' first maxima as small codes (the candidate's
// rank in window order: window row * column window + column offset), vectorisable across
// the row's windows, then writes every input element it owns exactly once: gy at the
// argmax, 0 elsewhere (so gx needs no zeroing pass). ----------------------------------------

/// Per-call scratch: one output row's running maxima and their codes, and the output
/// columns [c.j0, je) that own the whole [j*s - pad, j*s - pad + s) of an input row (the
/// others own a clipped range; the last one also owns the columns after its window).
template <class T>
struct FirstMax {
  std::vector<T> best, masked;  ///< masked: gy with relu's gradient applied (relu_grad)
  std::vector<std::int32_t> code;
  std::vector<float> fcode;  ///< the codes as floats (the vector paths)
  std::int64_t je;
  explicit FirstMax(const Plan<T>& c)
      : best(static_cast<std::size_t>(c.g.ow + kV)),  // whole vectors past the row's end (fold_interior)
        masked(best.size()),
        code(static_cast<std::size_t>(c.g.ow)),
        fcode(best.size()) {
    const std::int64_t w = c.g.w, s = c.s;
    const std::int64_t whole = w + c.pad >= s ? (w + c.pad - s) / s + 1 : 0;  // j*s - pad + s <= w
    je = c.j1 < whole ? c.j1 : whole;
    if (je == c.g.ow && c.g.ow * s - c.pad != w) je = c.g.ow - 1;  // the last owns more
    je = je > c.j0 ? je : c.j0;
  }
};

/// c ? a : b with bit masks: the compiler turns a plain select into a branch in scalar
/// loops and loop tails, which random data mispredicts on every other window.
template <class T>
inline T pick(bool c, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const U mask = U(0) - U(c);
  return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(a) & mask) | (std::bit_cast<U>(b) & ~mask)));
}

/// v where keep, else 0 (all-zero bits in every dtype).
template <class T>
inline T keep_or_zero(T v, bool keep) {
  return pick(keep, v, T(0));
}

/// Below every value but NaN (-inf, not lowest(): a window of -inf then -FLT_MAX has its
/// maximum second).
template <class T>
constexpr T bottom() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}

/// Folds window row `rank` (input row `in`) into best/code. On the window's first row the
/// running maximum starts at bottom() with code 0 (the window's first candidate), so
/// strict comparisons in window order keep the first maximum. Fast: v > m, returns the NaNs seen (the caller
/// redoes the row with Exact); Exact: the current code's rule (the first NaN wins).
template <bool Exact, int KW, int SW, class T>
int first_max_row(const T* in, const Plan<T>& c, FirstMax<T>& f, std::int32_t rank, bool first) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s;
  const std::int32_t base = rank * static_cast<std::int32_t>(k);
  T* best = f.best.data();
  std::int32_t* code = f.code.data();
  int nans = 0;
  for (std::int64_t j = c.j0; j < c.j1; ++j) {  // whole windows: the vectorised loop
    const T* q = in + j * s - c.pad;
    T m = first ? bottom<T>() : best[j];
    std::int32_t a = first ? 0 : code[j];
    for (std::int64_t i = 0; i < k; ++i) {
      const T v = q[i];
      nans += !Exact && v != v;
      const bool u = replaces<Exact>(m, v);
      a = u ? base + static_cast<std::int32_t>(i) : a;
      m = pick(u, v, m);
    }
    best[j] = m;
    code[j] = a;
  }
  for_border_columns(c, [&](std::int64_t j, const Span& sp) {
    const std::int64_t start = j * s - c.pad;  // offsets count from the unclipped start
    if (first) best[j] = bottom<T>(), code[j] = base + static_cast<std::int32_t>(sp.lo - start);  // first real one
    for (std::int64_t i = sp.lo; i < sp.hi; ++i) {
      nans += !Exact && in[i] != in[i];
      if (replaces<Exact>(best[j], in[i])) best[j] = in[i], code[j] = base + static_cast<std::int32_t>(i - start);
    }
  });
  return nans;
}

/// Writes input row `out` (window row `rank`, or -1 for a row no window covers) of the
/// gradient: each output column j owns input columns [j*s - pad, j*s - pad + s) clipped
/// to the row, the last one also the columns after it.
/// gy_raw: gy before relu's mask (the vector path applies it from f.best itself).
template <int KW, int SW, class T>
void write_grad_row(const Plan<T>& c, const FirstMax<T>& f, const T* gyr, const T* gy_raw, std::int32_t rank,
                    T* out) {
  const std::int64_t k = KW ? KW : c.k, s = SW ? SW : c.s, w = c.g.w, ow = c.g.ow;
  if (rank < 0) {
    std::memset(out, 0, static_cast<std::size_t>(w) * sizeof(T));
    return;
  }
  const std::int32_t base = rank * static_cast<std::int32_t>(k);
  const std::int32_t* code = f.code.data();
  const std::int64_t je = f.je;
  // Interior columns: for a 2-wide window of stride 2, gy where the code matches the
  // even and the odd column, interleaved.
  std::int64_t j = c.j0;
  if constexpr (std::is_same_v<T, float> && KW == 2 && SW == 2) {
    if (c.vec && c.pad == 0)
      for (const vf even = vset(static_cast<float>(base)), odd = vset(static_cast<float>(base + 1)); j < je; j += kV) {
        const int n = static_cast<int>(je - j < kV ? je - j : kV), l0 = 2 * n < kV ? 2 * n : kV;
        const vf a = vload_full(f.fcode.data() + j), zero = vset(0.0f);
        vf g = vload(gy_raw + j, n);
        if (c.p.relu_grad) g = vsel(vgt0(vload_full(f.best.data() + j)), g, zero);
        vf lo, hi;
        vzip(vsel(veq(a, even), g, zero), vsel(veq(a, odd), g, zero), lo, hi);
        vstore(out + 2 * j, lo, l0);
        if (2 * n > kV) vstore(out + 2 * j + kV, hi, 2 * n - kV);
      }
  }
  for (; j < je; ++j) {
    T* q = out + j * s - c.pad;
    const T v = gyr[j];
    const std::int32_t at = code[j] - base;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(k); ++i) q[i] = keep_or_zero(v, at == i);
    for (std::int64_t i = k; i < s; ++i) q[i] = T(0);  // the gap after the window
  }
  auto general = [&](std::int64_t j) {
    const std::int64_t start = j * s - c.pad, end = j + 1 == ow ? w : start + s;
    const std::int64_t at = code[j] - base;
    const T v = gyr[j];
    for (std::int64_t x = start > 0 ? start : 0; x < (end < w ? end : w); ++x)
      out[x] = keep_or_zero(v, (x - start == at) & (x - start < k));
  };
  for (std::int64_t j = 0; j < c.j0; ++j) general(j);
  for (std::int64_t j = je; j < ow; ++j) general(j);
}

/// The max gradient for output row `cur` over the input rows it owns (see zero_owned_rows).
template <int KW, int SW, class T>
void max_grad_row_disjoint(const Plan<T>& c, const T* x, const T* gy, T* gx, const Cursor& cur, FirstMax<T>& f) {
  const PoolParams& p = c.p;
  const PoolGeometry& g = c.g;
  const T *gyr = gy + ((cur.pl * g.od + cur.od) * g.oh + cur.oh) * g.ow, *gy_raw = gyr;
  // 1. The first maximum of each window, as a code.
  auto find = [&]<bool Exact, int K, int S>() {
    int nans = 0;
    std::int32_t rank = 0;
    for_window_rows(c, cur, [&](std::int64_t off, bool first) {
      nans += first_max_row<Exact, K, S>(x + off, c, f, rank++, first);
    });
    return nans;
  };
  bool fast = false;  // the vector path: codes in f.fcode
  if constexpr (std::is_same_v<T, float>) {
    fast = c.vec;
    if (fast) fold_windows<KW, true, true>(c, x, cur, f.best.data(), f.fcode.data());
  }
  // The scalar loops below serve the columns the vector write does not (all of them
  // without it): from `scalar` on.
  const std::int64_t scalar = fast && KW == 2 && SW == 2 && c.pad == 0 ? f.je : 0;
  if (fast) {
    for (std::int64_t j = scalar; j < g.ow; ++j)
      f.code[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(f.fcode[static_cast<std::size_t>(j)]);
  } else if (find.template operator()<false, KW, SW>()) {
    find.template operator()<true, 0, 0>();  // a NaN: the exact rule
  }
  if (p.relu_grad) {  // where(x > 0, gx, 0): gy lands on its window's maximum
    T* masked = f.masked.data();
    const T* best = f.best.data();
    for (std::int64_t j = scalar; j < g.ow; ++j) masked[j] = keep_or_zero(gyr[j], best[j] > T(0));
    gyr = masked;
  }
  // 2. Every owned input row, written once.
  auto owned = [&](int axis, std::int64_t o, std::int64_t outs, std::int64_t n) {
    const std::int64_t lo = o * p.stride[axis] - p.pad[axis], hi = lo + p.stride[axis];
    return Span{lo > 0 ? lo : 0, o + 1 == outs || hi > n ? n : hi, 0};
  };
  const Span od = owned(0, cur.od, g.od, g.d), oh = owned(1, cur.oh, g.oh, g.h);
  const Span &wd = c.dspans[static_cast<std::size_t>(cur.od)], &wh = c.hspans[static_cast<std::size_t>(cur.oh)];
  for (std::int64_t d = od.lo; d < od.hi; ++d)
    for (std::int64_t r = oh.lo; r < oh.hi; ++r) {
      const bool in_window = d >= wd.lo && d < wd.hi && r >= wh.lo && r < wh.hi;
      const std::int32_t rank = in_window ? static_cast<std::int32_t>((d - wd.lo) * (wh.hi - wh.lo) + (r - wh.lo)) : -1;
      write_grad_row<KW, SW>(c, f, gyr, gy_raw, rank, gx + ((cur.pl * g.d + d) * g.h + r) * g.w);
    }
}

// ---- float32 2x2 windows of stride 2 tiling the planes exactly (no padding, even sizes):
// output row R reads input rows 2R and 2R + 1, so the output is one contiguous stream of
// chunks of Q outputs, each from 2Q consecutive floats of each of its two input rows. A
// vector pair holds kV / Q chunks, possibly of different rows: small planes (8x8) take
// whole vectors instead of a partial one per row, and there is no per-row window
// bookkeeping. Q is kV / 2 (a chunk reads one full vector a row) where the output rows are
// whole half-vectors; AVX-512 also takes Q = 4 (two 8-float halves make each vector), so
// 12- and 4-wide output rows (LeNet's 24x24 and 8x8 planes) stay on this path there (the
// general path ran them at 13-44% of STREAM triad on Zen 4). The window is folded in the
// order of fold_interior (each row's two columns, then the rows), so maxima, codes, NaNs
// and sums are bitwise those of the general path.

/// Outputs per chunk: kV / 2, or 4 on AVX-512, whichever divides ow; 0 for neither.
std::int64_t pool_quad_chunk(const PoolGeometry& g) {
  if (g.ow % (kV / 2) == 0) return kV / 2;
  if (kV == 16 && g.ow % 4 == 0) return 4;
  return 0;
}

/// Whether the plan takes the quad stream.
bool pool_quad_stream(const Plan<float>& c) {
  return c.tiles && c.p.window[0] == 1 && c.p.window[1] == 2 && c.k == 2 && pool_quad_chunk(c.g) != 0;
}

/// Calls fn(t, in, count) for the chunks [r0 * cpr, r1 * cpr) in groups of kV / Q (chunk t
/// onwards; fewer, `count`, at the end); in[k]: chunk t + k's offset in its upper input row
/// (the lower row is g.w further on), in[0] for the missing ones of a short group.
template <class F>
void pool_quad_chunks(const PoolGeometry& g, std::int64_t Q, std::int64_t r0, std::int64_t r1, F&& fn) {
  const std::int64_t cpr = g.ow / Q, end = r1 * cpr, per = kV / Q;
  std::int64_t row = r0, q = 0;
  for (std::int64_t t = r0 * cpr; t < end; t += per) {
    std::int64_t in[4];
    const int count = static_cast<int>(std::min(per, end - t));
    for (int k = 0; k < per; ++k) {
      if (k < count) {
        in[k] = 2 * row * g.w + q * 2 * Q;
        if (++q == cpr) q = 0, ++row;
      } else {
        in[k] = in[0];
      }
    }
    fn(t, in, count);
  }
}

/// Input floats of the chunk(s) from in[k] as one vector: chunk in[k] (Q = kV / 2), or the
/// halves of chunks in[k] and in[k + 1] (AVX-512, Q = 4).
inline vf pool_quad_vec(const float* x, const std::int64_t* in, int k, bool quarter) {
#if CONVGRAPH_ISA_AVX512
  if (quarter)
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(x + in[k])), _mm256_loadu_ps(x + in[k + 1]), 1);
#else
  (void)quarter;
#endif
  return vload_full(x + in[k]);
}

/// The window rows' values of chunk group `in`: ev[r], od[r] the even and odd columns of
/// window row r, kV windows (the first chunk's lowest), in the split order.
inline void pool_quad_load(const float* x, const std::int64_t* in, std::int64_t w, bool quarter, vf* ev, vf* od) {
  for (int r = 0; r < 2; ++r) {
    const vf a = pool_quad_vec(x + r * w, in, 0, quarter), b = pool_quad_vec(x + r * w, in, quarter ? 2 : 1, quarter);
    ev[r] = veven_split(a, b);
    od[r] = vodd_split(a, b);
  }
}

/// Stores the gradient of one input row of the group: lo holds the first kV input floats
/// (chunk in[0], or in[0] and in[1]), hi the rest.
inline void pool_quad_store_row(float* gx, const std::int64_t* in, int count, bool quarter, vf lo, vf hi) {
#if CONVGRAPH_ISA_AVX512
  if (quarter) {
    const __m256 part[4] = {_mm512_castps512_ps256(lo), _mm512_extractf32x8_ps(lo, 1), _mm512_castps512_ps256(hi),
                            _mm512_extractf32x8_ps(hi, 1)};
    for (int k = 0; k < count; ++k) _mm256_storeu_ps(gx + in[k], part[k]);
    return;
  }
#else
  (void)quarter;
#endif
  vstore_full(gx + in[0], lo);
  if (count > 1) vstore_full(gx + in[1], hi);
}

/// avg's factor of a 2x2 window, as the general path computes it.
inline vf pool_quad_scale(const Plan<float>& c) {
  return vset(static_cast<float>(1.0 / static_cast<double>(c.dspans[0].count * c.hspans[0].count)) * c.inv[0]);
}

void pool_quad_forward(const Plan<float>& c, const float* x, float* y, std::int64_t r0, std::int64_t r1) {
  const bool max = c.p.mode == PoolMode::max;
  const vf scale = pool_quad_scale(c);
  const std::int64_t Q = pool_quad_chunk(c.g);
  const bool quarter = Q < kV / 2;
  pool_quad_chunks(c.g, Q, r0, r1, [&](std::int64_t t, const std::int64_t* in, int count) {
    vf ev[2], od[2];
    pool_quad_load(x, in, c.g.w, quarter, ev, od);
    vf m;
    if (max) {
      const vf m0 = vsel(vreplaces(ev[0], od[0]), od[0], ev[0]), m1 = vsel(vreplaces(ev[1], od[1]), od[1], ev[1]);
      m = vsel(vreplaces(m0, m1), m1, m0);
    } else {
      m = vmul(vadd(vadd(ev[0], od[0]), vadd(ev[1], od[1])), scale);
    }
    vstore(y + t * Q, vsplit_order(m), static_cast<int>(count * Q));
  });
}

/// gx, every element written once: max puts gy at its window's first maximum (relu_grad:
/// only where that maximum is > 0), avg spreads gy / 4.
void pool_quad_backward(const Plan<float>& c, const float* x, const float* gy, float* gx, std::int64_t r0,
                        std::int64_t r1) {
  const std::int64_t w = c.g.w;
  const bool max = c.p.mode == PoolMode::max, relu = c.p.relu_grad;
  const vf scale = pool_quad_scale(c);
  const vf zero = vset(0.0f), c1 = vset(1.0f), c2 = vset(2.0f), c3 = vset(3.0f);
  const std::int64_t Q = pool_quad_chunk(c.g);
  const bool quarter = Q < kV / 2;
  pool_quad_chunks(c.g, Q, r0, r1, [&](std::int64_t t, const std::int64_t* in, int count) {
    vf g = vsplit_order(vload(gy + t * Q, static_cast<int>(count * Q)));  // its own inverse
    vf lo[2], hi[2];
    if (max) {
      vf ev[2], od[2];
      pool_quad_load(x, in, w, quarter, ev, od);
      // Codes 0..3: the window's cells in row-major order.
      const vmask u0 = vreplaces(ev[0], od[0]), u1 = vreplaces(ev[1], od[1]);
      const vf m0 = vsel(u0, od[0], ev[0]), m1 = vsel(u1, od[1], ev[1]);
      const vmask u = vreplaces(m0, m1);
      const vf code = vsel(u, vsel(u1, c3, c2), vsel(u0, c1, zero));
      if (relu) g = vsel(vgt0(vsel(u, m1, m0)), g, zero);
      vzip_split(vsel(veq(code, zero), g, zero), vsel(veq(code, c1), g, zero), lo[0], hi[0]);
      vzip_split(vsel(veq(code, c2), g, zero), vsel(veq(code, c3), g, zero), lo[1], hi[1]);
    } else {
      g = vmul(g, scale);
      vzip_split(g, g, lo[0], hi[0]);
      lo[1] = lo[0];
      hi[1] = hi[0];
    }
    for (int r = 0; r < 2; ++r) pool_quad_store_row(gx + r * w, in, count, quarter, lo[r], hi[r]);
  });
}


// ---- float32 windows of 3 with stride 2 on rows and columns, padding 0 or 1 on each (the
// overlapping pooling of most networks; depth, if any, untouched). Output row i reads input
// rows 2i - pad .. 2i - pad + 2, so an input row is shared by two output rows and a column
// by two windows. Each input row is folded along its columns once, kV windows a step:
// window columns 0, 1 and 2 are the even and odd columns of two vector pairs (the second
// pair one column on), in the split order, with masked loads where a chunk leaves the row.
// An output row then folds its three rows' results in order (row-major: the first maximum
// and the sums of fold_interior). The row it shares with the next output row keeps, in a
// per-chunk buffer, its fold (forward, max's gradient) and its part of the gradient so far.
// The gradient writes every input element once, its windows' shares summed in registers in
// the windows' order (row-major), the order of the general path, so max's bits match it.

#if CONVGRAPH_ISA_AVX512
/// Lanes whose column within the chunk (in the split order) is in [a, b), 0 <= a, b <= kV.
inline vmask pool_w3_cols(int a, int b) { return static_cast<__mmask16>(lanes(b) & ~lanes(a)); }
/// Lanes [a, b) of p, zeros elsewhere (nothing outside read).
inline vf pool_w3_load(const float* p, int a, int b) { return _mm512_maskz_loadu_ps(pool_w3_cols(a, b), p); }
/// Each column takes the one before (column 0 the last); join: column 0 from `prev`.
inline vf pool_w3_rot_right(vf v) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14), v);
}
inline vf pool_w3_join_right(vf rot, vf prev) { return _mm512_mask_blend_ps(0x0001, rot, prev); }
/// Each column takes the one after (the last column 0); join: the last column from `next`.
inline vf pool_w3_rot_left(vf v) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0), v);
}
inline vf pool_w3_join_left(vf rot, vf next) { return _mm512_mask_blend_ps(static_cast<__mmask16>(0x8000), rot, next); }
#elif CONVGRAPH_ISA_AVX2
// The split order holds columns [0 1 4 5 2 3 6 7].
inline vmask pool_w3_cols(int a, int b) {
  const __m256i col = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  return _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_cmpgt_epi32(col, _mm256_set1_epi32(a - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(b), col)));
}
inline vf pool_w3_load(const float* p, int a, int b) {
  if (a == 0 && b == kV) return vload_full(p);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(
      p, _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(a - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(b), lane)));
}
inline vf pool_w3_rot_right(vf v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(7, 0, 5, 2, 1, 4, 3, 6)); }
inline vf pool_w3_join_right(vf rot, vf prev) { return _mm256_blend_ps(rot, prev, 0x01); }
inline vf pool_w3_rot_left(vf v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(1, 4, 3, 6, 5, 2, 7, 0)); }
inline vf pool_w3_join_left(vf rot, vf next) { return _mm256_blend_ps(rot, next, 0x80); }
#else
inline vmask pool_w3_cols(int a, int b) {
  const __m128i col = _mm_setr_epi32(0, 1, 2, 3);
  return _mm_castsi128_ps(_mm_and_si128(_mm_cmpgt_epi32(col, _mm_set1_epi32(a - 1)), _mm_cmpgt_epi32(_mm_set1_epi32(b), col)));
}
inline vf pool_w3_load(const float* p, int a, int b) {
  if (a == 0 && b == kV) return vload_full(p);
  alignas(16) float buf[kV] = {};
  for (int i = a; i < b; ++i) buf[i] = p[i];
  return vload_full(buf);
}
inline vf pool_w3_rot_right(vf v) { return _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 1, 0, 3)); }
inline vf pool_w3_join_right(vf rot, vf prev) { return _mm_move_ss(rot, prev); }
inline vf pool_w3_rot_left(vf v) { return _mm_shuffle_ps(v, v, _MM_SHUFFLE(0, 3, 2, 1)); }
inline vf pool_w3_join_left(vf rot, vf next) { return vsel(pool_w3_cols(kV - 1, kV), next, rot); }
#endif

/// v clamped to [0, kV].
inline int pool_w3_clamp(std::int64_t v) { return static_cast<int>(v < 0 ? 0 : v > kV ? kV : v); }

/// v where m, else +0 (a bitwise and, cheaper than a blend).
inline vf pool_w3_keep(vmask m, vf v) {
#if CONVGRAPH_ISA_AVX512
  return _mm512_maskz_mov_ps(m, v);
#elif CONVGRAPH_ISA_AVX2
  return _mm256_and_ps(m, v);
#else
  return _mm_and_ps(m, v);
#endif
}

/// Whether the plan takes the w3 s2 path: every window's middle row and column lie inside
/// the input (always but for a 1-wide axis in ceil mode).
bool pool_w3_takes(const Plan<float>& c) {
  const PoolParams& p = c.p;
  const PoolGeometry& g = c.g;
  return p.window[0] == 1 && p.stride[0] == 1 && p.pad[0] == 0 && p.window[1] == 3 && p.stride[1] == 2 &&
         p.window[2] == 3 && p.stride[2] == 2 && p.pad[1] <= 1 && p.pad[2] <= 1 && 2 * (g.oh - 1) - p.pad[1] + 1 < g.h &&
         2 * (g.ow - 1) - p.pad[2] + 1 < g.w && g.oh * g.ow > 0;
}

/// How a chunk's loads meet the row: all inside; only the first lane of the first load
/// before the row (padding 1, first chunk); anything else.
enum PoolW3Kind { kPoolW3Inside, kPoolW3LeftPad, kPoolW3Border };

struct PoolW3 {
  std::int64_t w, h, ow, oh, pc, pr;  ///< pc, pr: the column and row padding
  /// Chunks of kV windows a row: wchunks cover the windows, chunks every column pair of the
  /// input row (the gradient writes whole rows).
  std::int64_t wchunks, chunks;
  /// Windows [c0_first, ow) have their first column inside the row, [0, c2_end) their last.
  std::int64_t c0_first, c2_end;
  std::vector<PoolW3Kind> kind;  ///< per chunk
  std::vector<float> colinv;     ///< avg: 1 / the window's column count, 0 past ow (whole chunks)
  std::vector<float> rowinv;     ///< avg: 1 / the window's row count, per output row

  explicit PoolW3(const Plan<float>& c)
      : w(c.g.w), h(c.g.h), ow(c.g.ow), oh(c.g.oh), pc(c.p.pad[2]), pr(c.p.pad[1]) {
    wchunks = (ow + kV - 1) / kV;
    chunks = ((w + 1) / 2 + kV - 1) / kV;  // >= wchunks: ow <= ceil(w / 2) here
    c0_first = pc;
    c2_end = w - 3 + pc >= 0 ? (w - 3 + pc) / 2 + 1 : 0;
    for (std::int64_t t = 0; t < chunks; ++t) {
      const std::int64_t x0 = 2 * t * kV - pc;  // the row column of the chunk's first load
      const bool right = x0 + 2 * kV + 1 <= w;
      kind.push_back(x0 >= 0 && right ? kPoolW3Inside : x0 == -1 && right ? kPoolW3LeftPad : kPoolW3Border);
    }
    colinv.assign(static_cast<std::size_t>(chunks * kV), 0.0f);
    for (std::int64_t j = 0; j < ow; ++j) colinv[static_cast<std::size_t>(j)] = c.inv[static_cast<std::size_t>(j)];
    for (const Span& s : c.hspans) rowinv.push_back(static_cast<float>(1.0 / static_cast<double>(s.count)));
  }
};

/// Input row `row`'s windows [j0, j0 + kV) folded along their 3 columns, in the split order:
/// max: the first maximum (a NaN if any) in m and, with Codes, its column (0 to 2) in col;
/// sum otherwise. At a border, loads that leave the row are masked, and max gives a
/// window's missing first or last column its middle one's value, which never wins over it.
template <bool Max, bool Codes, int Kind>
[[gnu::always_inline]] inline void pool_w3_hfold(const PoolW3& w, const float* row, std::int64_t j0, vf& m, vf& col) {
  const std::int64_t x0 = 2 * j0 - w.pc;  // the row column of window j0's first column
  const float* b = row + x0;
  auto load = [&](std::int64_t off) {
    if constexpr (Kind == kPoolW3Border)
      return pool_w3_load(b + off, pool_w3_clamp(-(x0 + off)), pool_w3_clamp(w.w - (x0 + off)));
    return vload_full(b + off);
  };
  const vf l0 = Kind == kPoolW3LeftPad ? pool_w3_load(b, 1, kV) : load(0), l1 = load(kV), l2 = load(1),
           l3 = load(1 + kV);
  vf c0 = veven_split(l0, l1), c1 = vodd_split(l0, l1), c2 = vodd_split(l2, l3);
  if constexpr (!Max) {
    m = vadd(vadd(c0, c1), c2);
  } else {
    vf a = vset(0.0f);
    if constexpr (Kind != kPoolW3Inside) {
      const vmask has0 = Kind == kPoolW3LeftPad ? pool_w3_cols(1, kV) : pool_w3_cols(pool_w3_clamp(w.c0_first - j0), kV);
      c0 = vsel(has0, c0, c1);
      if constexpr (Kind == kPoolW3Border) c2 = vsel(pool_w3_cols(0, pool_w3_clamp(w.c2_end - j0)), c2, c1);
      if constexpr (Codes) a = vsel(has0, a, vset(1.0f));
    }
    m = c0;
    vmask u = vreplaces(m, c1);
    m = vsel(u, c1, m);
    if constexpr (Codes) a = vsel(u, vset(1.0f), a);
    u = vreplaces(m, c2);
    m = vsel(u, c2, m);
    if constexpr (Codes) {
      a = vsel(u, vset(2.0f), a);
      col = a;
    }
  }
}

/// Calls body.template operator()<Kind>() with chunk t's kind.
template <class F>
[[gnu::always_inline]] inline void pool_w3_by_kind(const PoolW3& w, std::int64_t t, F&& body) {
  switch (w.kind[static_cast<std::size_t>(t)]) {
    case kPoolW3Inside: return body.template operator()<kPoolW3Inside>();
    case kPoolW3LeftPad: return body.template operator()<kPoolW3LeftPad>();
    default: return body.template operator()<kPoolW3Border>();
  }
}

template <bool Max>
void pool_w3_forward(const Plan<float>& c, const float* x, float* y, std::int64_t r0, std::int64_t r1) {
  const PoolW3 w(c);
  std::vector<float> shared(static_cast<std::size_t>(w.wchunks * kV));  // the last window row's fold
  std::int64_t pl = r0 / w.oh, i = r0 % w.oh;
  for (std::int64_t row = r0; row < r1; ++row) {
    const std::int64_t top = 2 * i - w.pr;
    const float *plane = x + pl * w.h * w.w, *above = plane + top * w.w, *middle = above + w.w, *below = middle + w.w;
    const bool has_top = top >= 0, has_bot = top + 2 < w.h, cached = has_top && row > r0 && i > 0;
    const vf inv_cells = vset(Max ? 1.0f : w.rowinv[static_cast<std::size_t>(i)]);
    float* out = y + row * w.ow;
    for (std::int64_t t = 0; t < w.wchunks; ++t) {
      pool_w3_by_kind(w, t, [&]<int Kind>() {
        const std::int64_t j0 = t * kV;
        float* keep = shared.data() + j0;
        vf mid, up, down, unused;
        pool_w3_hfold<Max, false, Kind>(w, middle, j0, mid, unused);
        if (has_top) {
          if (cached)
            up = vload_full(keep);
          else
            pool_w3_hfold<Max, false, Kind>(w, above, j0, up, unused);
        }
        if (has_bot) {
          pool_w3_hfold<Max, false, Kind>(w, below, j0, down, unused);
          vstore_full(keep, down);
        }
        vf m = has_top ? up : mid;
        if constexpr (Max) {
          if (has_top) m = vsel(vreplaces(m, mid), mid, m);
          if (has_bot) m = vsel(vreplaces(m, down), down, m);
          m = vsplit_order(m);
        } else {
          if (has_top) m = vadd(m, mid);
          if (has_bot) m = vadd(m, down);
          m = vmul(vsplit_order(m), vmul(inv_cells, vload_full(w.colinv.data() + j0)));
        }
        if (j0 + kV <= w.ow)
          vstore_full(out + j0, m);
        else
          vstore(out + j0, m, static_cast<int>(w.ow - j0));
      });
    }
    if (++i == w.oh) i = 0, ++pl;
  }
}

/// The gradient of planes [p0, p1). Pad: the column padding. Each window's share of its
/// input row (max: gy at the window's first maximum, 0 elsewhere; avg: gy / count at
/// every column) lands on column pairs (2q, 2q + 1): pad 0 puts windows q - 1 (its last
/// column) and q (its first) on column 2q and window q alone on 2q + 1; pad 1 puts window
/// q alone on 2q and windows q and q + 1 on 2q + 1. The shifted window comes from the
/// neighbouring chunk: chunks go left to right with pad 0, right to left with pad 1.
template <int Pad, bool Max>
void pool_w3_backward(const Plan<float>& c, const float* x, const float* gy, float* gx, std::int64_t p0,
                      std::int64_t p1) {
  const PoolW3 w(c);
  const std::size_t slots = static_cast<std::size_t>(w.chunks * kV);
  // The fold of the last window row (max), and its gradient so far: the columns of one
  // window, the columns of two.
  std::vector<float> shared_m(slots), shared_code(slots), pend_one(slots), pend_two(slots);
  const bool relu = c.p.relu_grad;
  const vf zero = vset(0.0f);
  // The rows after the last window (pad 0) have no gradient.
  const std::int64_t covered = 2 * (w.oh - 1) - w.pr + 3 < w.h ? 2 * (w.oh - 1) - w.pr + 3 : w.h;
  for (std::int64_t pl = p0; pl < p1; ++pl) {
    const float* plane = x + pl * w.h * w.w;
    float* gxp = gx + pl * w.h * w.w;
    for (std::int64_t i = 0; i < w.oh; ++i) {
      const std::int64_t top = 2 * i - w.pr;
      const bool has_top = top >= 0, has_bot = top + 2 < w.h, shared_top = has_top && i > 0,
                 keep_bot = has_bot && i + 1 < w.oh;
      const float *above = plane + top * w.w, *middle = above + w.w, *below = middle + w.w;
      float *gx_above = gxp + top * w.w, *gx_middle = gx_above + w.w, *gx_below = gx_middle + w.w;
      const float* gyr = gy + (pl * w.oh + i) * w.ow;
      const vf inv_cells = vset(Max ? 1.0f : w.rowinv[static_cast<std::size_t>(i)]);
      vf carry_g = zero, carry_code = zero;  // the neighbouring chunk's rotated gy and codes
      for (std::int64_t step = 0; step < w.chunks; ++step) {
        const std::int64_t t = Pad == 1 ? w.chunks - 1 - step : step, j0 = t * kV;
        const std::size_t at = static_cast<std::size_t>(j0);
        // g: the windows' gy (max: their code, 3 * window row + column, in code), split order.
        vf g, code = zero;
        if constexpr (Max) {
          pool_w3_by_kind(w, t, [&]<int Kind>() {
            vf m, v, vc;
            pool_w3_hfold<true, true, Kind>(w, middle, j0, v, vc);
            if (has_top) {
              if (shared_top) {
                m = vload_full(shared_m.data() + at);
                code = vload_full(shared_code.data() + at);
              } else {
                pool_w3_hfold<true, true, Kind>(w, above, j0, m, code);
              }
              const vmask u = vreplaces(m, v);
              m = vsel(u, v, m);
              code = vsel(u, vadd(vc, vset(3.0f)), code);
            } else {
              m = v;
              code = vadd(vc, vset(3.0f));
            }
            if (has_bot) {
              pool_w3_hfold<true, true, Kind>(w, below, j0, v, vc);
              vstore_full(shared_m.data() + at, v);
              vstore_full(shared_code.data() + at, vc);
              const vmask u = vreplaces(m, v);
              m = vsel(u, v, m);
              code = vsel(u, vadd(vc, vset(6.0f)), code);
            }
            g = vsplit_order(j0 + kV <= w.ow ? vload_full(gyr + j0) : vload(gyr + j0, pool_w3_clamp(w.ow - j0)));
            if (relu) g = pool_w3_keep(vgt0(m), g);
            g = vadd(g, zero);  // -0 to +0, as 0 + gy: the sums below keep the general path's bits
          });
        } else {
          const vf gv = j0 + kV <= w.ow ? vload_full(gyr + j0) : vload(gyr + j0, pool_w3_clamp(w.ow - j0));
          g = vsplit_order(vmul(gv, vmul(inv_cells, vload_full(w.colinv.data() + j0))));
        }
        // The neighbouring window's gy and code on each lane.
        vf gs, codes;
        if constexpr (Pad == 0) {
          const vf rg = pool_w3_rot_right(g), rc = pool_w3_rot_right(code);
          gs = pool_w3_join_right(rg, carry_g);
          codes = pool_w3_join_right(rc, carry_code);
          carry_g = rg;
          carry_code = rc;
        } else {
          const vf rg = pool_w3_rot_left(g), rc = pool_w3_rot_left(code);
          gs = pool_w3_join_left(rg, carry_g);
          codes = pool_w3_join_left(rc, carry_code);
          carry_g = rg;
          carry_code = rc;
        }
        // Window row r's shares: `one` on the columns of one window; `first` and `second`,
        // in window order, on those of two.
        auto shares = [&](float r, vf& one, vf& first, vf& second) {
          if constexpr (!Max) {
            one = g;
            first = Pad == 0 ? gs : g;
            second = Pad == 0 ? g : gs;
            return;
          }
          const vf base = vset(3.0f * r);
          one = pool_w3_keep(veq(code, vadd(base, vset(1.0f))), g);
          if constexpr (Pad == 0) {  // window q - 1's last column, then window q's first
            first = pool_w3_keep(veq(codes, vadd(base, vset(2.0f))), gs);
            second = pool_w3_keep(veq(code, base), g);
          } else {  // window q's last column, then window q + 1's first
            first = pool_w3_keep(veq(code, vadd(base, vset(2.0f))), g);
            second = pool_w3_keep(veq(codes, base), gs);
          }
        };
        const bool full = 2 * j0 + 2 * kV <= w.w;
        auto put = [&](float* row, vf one, vf two) {
          vf lo, hi;
          if constexpr (Pad == 0)
            vzip_split(two, one, lo, hi);
          else
            vzip_split(one, two, lo, hi);
          float* q = row + 2 * j0;
          if (full) {
            vstore_full(q, lo);
            vstore_full(q + kV, hi);
            return;
          }
          const int l0 = pool_w3_clamp(w.w - 2 * j0), l1 = pool_w3_clamp(w.w - 2 * j0 - kV);
          vstore(q, lo, l0);
          if (l1 > 0) vstore(q + kV, hi, l1);
        };
        vf one, first, second;
        shares(1.0f, one, first, second);
        put(gx_middle, one, vadd(first, second));
        if (has_top) {
          shares(0.0f, one, first, second);
          if (shared_top)  // the previous output row's part first: the windows' order
            put(gx_above, vadd(vload_full(pend_one.data() + at), one),
                vadd(vadd(vload_full(pend_two.data() + at), first), second));
          else
            put(gx_above, one, vadd(first, second));
        }
        if (has_bot) {
          shares(2.0f, one, first, second);
          const vf two = vadd(first, second);
          if (keep_bot) {
            vstore_full(pend_one.data() + at, one);
            vstore_full(pend_two.data() + at, two);
          } else {
            put(gx_below, one, two);
          }
        }
      }
    }
    if (covered < w.h)
      std::memset(gxp + covered * w.w, 0, static_cast<std::size_t>((w.h - covered) * w.w) * sizeof(float));
  }
}

}  // namespace

void pool_rows(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, void* y, std::int64_t r0,
               std::int64_t r1) {
  dispatch_numeric(t, "pool", [&](auto z) {
    using T = decltype(z);
    const Plan<T> c(p, g);
    if constexpr (std::is_same_v<T, float>) {
      if (pool_quad_stream(c))
        return pool_quad_forward(c, static_cast<const float*>(x), static_cast<float*>(y), r0, r1);
      if (pool_w3_takes(c)) {
        auto run = c.p.mode == PoolMode::max ? pool_w3_forward<true> : pool_w3_forward<false>;
        return run(c, static_cast<const float*>(x), static_cast<float*>(y), r0, r1);
      }
    }
    dispatch_columns(c, [&]<int KW, int SW>() {
      Cursor cur(g, r0);
      for (std::int64_t row = r0; row < r1; ++row, cur.next(g))
        pool_row<KW, SW>(c, static_cast<const T*>(x), cur, static_cast<T*>(y) + row * g.ow);
    });
  });
}

void pool_grad_rows(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, const void* gy, void* gx,
                    std::int64_t r0, std::int64_t r1) {
  dispatch_numeric(t, "pool_grad", [&](auto z) {
    using T = decltype(z);
    const Plan<T> c(p, g);
    if constexpr (std::is_same_v<T, float>) {
      if (pool_quad_stream(c))
        return pool_quad_backward(c, static_cast<const float*>(x), static_cast<const float*>(gy),
                                  static_cast<float*>(gx), r0, r1);
    }
    if (p.mode == PoolMode::max && c.s >= c.k && (g.ow >= 8 || c.vec)) {
      // No window shares an input element (the caller checked depth and rows). Rows of
      // fewer than 8 windows keep the loop below: the compiler leaves the code search
      // scalar there, with branches on the data, and it measured slower.
      FirstMax<T> f(c);
      dispatch_columns(c, [&]<int KW, int SW>() {
        Cursor cur(g, r0);
        for (std::int64_t row = r0; row < r1; ++row, cur.next(g))
          max_grad_row_disjoint<KW, SW>(c, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx),
                                        cur, f);
      });
      return;
    }
    Argmax<T> scratch(g.ow);
    dispatch_columns(c, [&]<int KW, int SW>() {
      Cursor cur(g, r0);
      for (std::int64_t row = r0; row < r1; ++row, cur.next(g)) {
        if (!c.tiles) zero_owned_rows(c, static_cast<T*>(gx), cur);
        grad_row<KW, SW>(c, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx), cur, scratch);
      }
    });
  });
}

void pool_grad_planes(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, const void* gy, void* gx,
                      std::int64_t p0, std::int64_t p1) {
  dispatch_numeric(t, "pool_grad", [&](auto z) {
    using T = decltype(z);
    const Plan<T> c(p, g);
    if constexpr (std::is_same_v<T, float>) {
      if (pool_w3_takes(c)) {
        const bool max = p.mode == PoolMode::max;
        auto run = c.pad == 0 ? (max ? pool_w3_backward<0, true> : pool_w3_backward<0, false>)
                              : (max ? pool_w3_backward<1, true> : pool_w3_backward<1, false>);
        return run(c, static_cast<const float*>(x), static_cast<const float*>(gy), static_cast<float*>(gx), p0, p1);
      }
      if (c.vec && p.mode == PoolMode::avg)
        return avg_grad_planes_gather(c, static_cast<const float*>(gy), static_cast<float*>(gx), p0, p1);
    }
    Argmax<T> scratch(g.ow);
    const std::int64_t plane = g.d * g.h * g.w, rows = g.od * g.oh;
    dispatch_columns(c, [&]<int KW, int SW>() {
      Cursor cur(g, p0 * rows);
      for (std::int64_t row = p0 * rows; row < p1 * rows; ++row, cur.next(g)) {
        if (row % rows == 0)  // zeroed plane by plane, so it is still in L1 when the windows add
          std::memset(static_cast<T*>(gx) + cur.pl * plane, 0, static_cast<std::size_t>(plane) * sizeof(T));
        grad_row<KW, SW>(c, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx), cur, scratch);
      }
    });
  });
}

void max_pool_gather_rows(const PoolParams& p, const PoolGeometry& g, DType t, const void* x, const void* gsrc,
                          void* out, std::int64_t r0, std::int64_t r1) {
  dispatch_numeric(t, "max_pool_grad_grad", [&](auto z) {
    using T = decltype(z);
    const T* gs = static_cast<const T*>(gsrc);
    T* dst = static_cast<T*>(out);
    const Plan<T> c(p, g);
    Argmax<T> scratch(g.ow);
    const std::int64_t plane = g.d * g.h * g.w;
    Cursor cur(g, r0);
    for (std::int64_t row = r0; row < r1; ++row, cur.next(g)) {
      scratch.template find<0, 0>(c, static_cast<const T*>(x), cur);
      for (std::int64_t j = 0; j < g.ow; ++j)
        dst[row * g.ow + j] = gs[cur.pl * plane + scratch.at[static_cast<std::size_t>(j)]];
    }
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
