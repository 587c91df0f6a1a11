// im2col / col2im (declared in ../im2col.hpp), compiled once per CPU level.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backends/cpu/conv_geometry.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/native_vec.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

/// Walks the output positions [p_begin, p_end) of one column-matrix row (taps t) as runs
/// along the innermost axis. For each run it calls
///   fn(col_offset, n, src_row, a, b, src_start)
/// meaning: run entries [0, n) start at column col_offset; src_row < 0 when the tap reads a
/// padding row (all n entries are zero); otherwise entries [a, b) read the input at
/// src_row + src_start + j * stride2 (j = 0 at entry a) and the rest are padding.
/// The first position is decoded once; then counters walk the rows (divisions would
/// dominate short rows).
template <class Fn>
inline void for_each_run(const ConvGeometry& g, const i64 t[3], i64 p_begin, i64 p_end, Fn&& fn) {
  i64 lo2, hi2;
  g.valid_out_range(2, t[2], lo2, hi2);
  const i64 off2 = t[2] * g.dil[2] - g.pad[2];
  const i64 W = g.out[2];
  i64 o2 = p_begin % W;
  i64 o1 = (p_begin / W) % g.out[1];
  i64 i0 = (p_begin / W / g.out[1]) * g.stride[0] - g.pad[0] + t[0] * g.dil[0];
  i64 i1 = o1 * g.stride[1] - g.pad[1] + t[1] * g.dil[1];
  const i64 i1_first = t[1] * g.dil[1] - g.pad[1];
  for (i64 p = p_begin; p < p_end;) {
    const i64 n = std::min(W - o2, p_end - p);
    if (i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1]) {
      const i64 a = std::clamp(lo2 - o2, i64{0}, n), b = std::clamp(hi2 - o2, a, n);
      fn(p - p_begin, n, (i0 * g.in[1] + i1) * g.in[2], a, b, off2 + (o2 + a) * g.stride[2]);
    } else {
      fn(p - p_begin, n, i64{-1}, i64{0}, i64{0}, i64{0});
    }
    p += n;
    o2 = 0;
    if (++o1 == g.out[1]) {
      o1 = 0;
      i1 = i1_first;
      i0 += g.stride[0];
    } else {
      i1 += g.stride[1];
    }
  }
}

/// out[i] = src[i * S] for i in [0, n): a strided convolution's row of taps. The level's
/// vectors take S vectors of the source and keep every S-th lane with one shuffle (S = 2)
/// or three (S = 4); the scalar copy was a third of cpu.corrmm's time on resnet_stem.
/// A vector step reads up to src[(i + kVL) * S - 1], so it runs only while i + kVL < n:
/// never past the last element the row needs.
template <int S>
inline void copy_strided(float* __restrict out, const float* __restrict src, i64 n) {
  static_assert(S == 2 || S == 4);
  constexpr vnati even = lane_mask([](int i) { return 2 * i; });
  i64 i = 0;
  for (; i + kVL < n; i += kVL) {
    const float* p = src + i * S;
    vnat r = shufn(loadn(p), loadn(p + kVL), even);
    if constexpr (S == 4) r = shufn(r, shufn(loadn(p + 2 * kVL), loadn(p + 3 * kVL), even), even);
    storen(out + i, r);
  }
  for (; i < n; ++i) out[i] = src[i * S];
}

/// out[j] = src[j * s] for j in [0, n).
inline void copy_strided(float* __restrict out, const float* __restrict src, i64 n, i64 s) {
  if (s == 1) std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float));
  else if (s == 2) copy_strided<2>(out, src, n);
  else if (s == 4) copy_strided<4>(out, src, n);
  else for (i64 j = 0; j < n; ++j) out[j] = src[j * s];
}
inline void copy_strided(double* __restrict out, const double* __restrict src, i64 n, i64 s) {
  if (s == 1) std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(double));
  else for (i64 j = 0; j < n; ++j) out[j] = src[j * s];
}

/// The adjoint of copy_strided<2>: dst[2j] += in[j] for j in [0, n). A vector step of L
/// entries spreads them over the even lanes of two L-lane vectors of dst and adds zero to
/// the odd lanes between them, so it stays within dst[0 .. 2(n-1)], which the caller owns
/// (one row of one input plane; col2im's tasks own whole planes). Steps of kVL lanes, then
/// of 8 and 4, as ResNet's stride-2 rows are short (14 and 28 outputs); the scalar scatter
/// this replaces took 17% of cpu.corrmm's grad inputs on res_down_3x3.
using v8 = float __attribute__((vector_size(8 * sizeof(float))));
using v8i = int __attribute__((vector_size(8 * sizeof(int))));
using v4 = float __attribute__((vector_size(4 * sizeof(float))));
using v4i = int __attribute__((vector_size(4 * sizeof(int))));
template <class V, class VI>
inline void add_strided2_steps(float* __restrict dst, const float* __restrict in, i64& j, i64 n) {
  constexpr int L = sizeof(V) / sizeof(float);
  constexpr VI lo = lane_mask<VI>([](int l) { return l % 2 == 0 ? l / 2 : L; });
  constexpr VI hi = lane_mask<VI>([](int l) { return l % 2 == 0 ? L / 2 + l / 2 : L; });
  for (; j + L < n; j += L) {
    const V v = loadn<V>(in + j);
    float* d = dst + 2 * j;
    storen(d, loadn<V>(d) + shufn(v, V{}, lo));
    storen(d + L, loadn<V>(d + L) + shufn(v, V{}, hi));
  }
}
inline void add_strided2(float* __restrict dst, const float* __restrict in, i64 n) {
  i64 j = 0;
  add_strided2_steps<vnat, vnati>(dst, in, j, n);
  if constexpr (kVL > 8) add_strided2_steps<v8, v8i>(dst, in, j, n);
  if constexpr (kVL > 4) add_strided2_steps<v4, v4i>(dst, in, j, n);
  for (; j < n; ++j) dst[2 * j] += in[j];
}

/// dst[j * s] += in[j] for j in [0, n).
inline void add_strided(float* __restrict dst, const float* __restrict in, i64 n, i64 s) {
  if (s == 1) for (i64 j = 0; j < n; ++j) dst[j] += in[j];
  else if (s == 2) add_strided2(dst, in, n);
  else for (i64 j = 0; j < n; ++j) dst[j * s] += in[j];
}
inline void add_strided(double* __restrict dst, const double* __restrict in, i64 n, i64 s) {
  for (i64 j = 0; j < n; ++j) dst[j * s] += in[j];
}

}  // namespace

template <class T>
void im2col(const ConvGeometry& g, const T* x, i64 channels, i64 p_begin, i64 p_end, T* col) {
  const i64 np = p_end - p_begin;
  const i64 rows = channels * g.ker_numel;
  const i64 s2 = g.stride[2];
  for (i64 r = 0; r < rows; ++r) {
    i64 t[3];
    const T* xq = x + g.column_row(r, t) * g.in_numel;
    T* row = col + r * np;
    for_each_run(g, t, p_begin, p_end, [=](i64 at, i64 n, i64 src_row, i64 a, i64 b, i64 start) {
      T* __restrict out = row + at;
      if (src_row < 0) {
        for (i64 j = 0; j < n; ++j) out[j] = T(0);
        return;
      }
      const T* __restrict src = xq + (src_row + start);
      for (i64 j = 0; j < a; ++j) out[j] = T(0);
      if (b > a) copy_strided(out + a, src, b - a, s2);
      for (i64 j = b; j < n; ++j) out[j] = T(0);
    });
  }
}

template <class T>
void col2im_add(const ConvGeometry& g, const T* col, i64 channels, i64 p_begin, i64 p_end, T* x) {
  const i64 np = p_end - p_begin;
  const i64 rows = channels * g.ker_numel;
  const i64 s2 = g.stride[2];
  for (i64 r = 0; r < rows; ++r) {
    i64 t[3];
    T* xq = x + g.column_row(r, t) * g.in_numel;
    const T* row = col + r * np;
    for_each_run(g, t, p_begin, p_end, [=](i64 at, i64 n, i64 src_row, i64 a, i64 b, i64 start) {
      if (src_row < 0 || a >= b) return;  // entries that came from padding are dropped
      add_strided(xq + (src_row + start), row + at + a, b - a, s2);
    });
  }
}

namespace {
/// Run entries e in [from, to) to out[(e - from) * step]: zero below a and from b on, else
/// src[(e - a) * s2].
inline void put_run(float* __restrict out, i64 step, i64 from, i64 to, const float* __restrict src,
                    i64 a, i64 b, i64 s2) {
  const i64 z1 = std::min(to, std::max(from, a)), c1 = std::min(to, std::max(z1, b));
  for (i64 e = from; e < z1; ++e) out[(e - from) * step] = 0.0f;
  if (step == 1) {
    if (c1 > z1) copy_strided(out + (z1 - from), src + (z1 - a) * s2, c1 - z1, s2);
  } else {
    for (i64 e = z1; e < c1; ++e) out[(e - from) * step] = src[(e - a) * s2];
  }
  for (i64 e = c1; e < to; ++e) out[(e - from) * step] = 0.0f;
}
}  // namespace

void im2col_pack(const ConvGeometry& g, const float* x, i64 r0, i64 kc, i64 p0, i64 n, int nr, float* dst) {
  const i64 sliver = kc * nr, tail = n % nr, last = n / nr;
  const i64 s2 = g.stride[2];
  for (i64 k = 0; k < kc; ++k) {
    i64 t[3];
    const float* xq = x + g.column_row(r0 + k, t) * g.in_numel;
    float* row = dst + k * nr;  // position j of the panel at row[(j / nr) * sliver + j % nr]
    if (tail) std::memset(row + last * sliver + tail, 0, static_cast<std::size_t>(nr - tail) * sizeof(float));
    for_each_run(g, t, p0, p0 + n, [&](i64 at, i64 len, i64 src_row, i64 a, i64 b, i64 start) {
      const float* src = xq + (src_row < 0 ? 0 : src_row + start);
      if (src_row < 0) a = b = len;  // all padding
      // The run in pieces that stay within one sliver; piece entries are run entries e.
      for (i64 e = 0; e < len;) {
        const i64 j = at + e, m = std::min(len - e, nr - j % nr);
        put_run(row + (j / nr) * sliver + j % nr, 1, e, e + m, src, a, b, s2);
        e += m;
      }
    });
  }
}

void im2col_pack_t(const ConvGeometry& g, const float* x, i64 p0, i64 kc, i64 r0, i64 n, int nr, float* dst) {
  const i64 sliver = kc * nr, tail = n % nr, last = n / nr;
  const i64 s2 = g.stride[2];
  if (tail)
    for (i64 k = 0; k < kc; ++k)
      std::memset(dst + last * sliver + k * nr + tail, 0, static_cast<std::size_t>(nr - tail) * sizeof(float));
  for (i64 j = 0; j < n; ++j) {
    i64 t[3];
    const float* xq = x + g.column_row(r0 + j, t) * g.in_numel;
    float* col = dst + (j / nr) * sliver + j % nr;  // depth k at col[k * nr]
    for_each_run(g, t, p0, p0 + kc, [&](i64 at, i64 len, i64 src_row, i64 a, i64 b, i64 start) {
      if (src_row < 0) a = b = len;
      put_run(col + at * nr, nr, 0, len, xq + (src_row < 0 ? 0 : src_row + start), a, b, s2);
    });
  }
}

template void im2col<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void im2col<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);
template void col2im_add<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void col2im_add<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
