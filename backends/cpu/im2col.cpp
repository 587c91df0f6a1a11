#include "backends/cpu/im2col.hpp"

#include <algorithm>

namespace convgraph::cpu {
namespace {

/// Walks one column-matrix row: for each run of positions that share an output row
/// (o0, o1), calls row_fn(dst_offset, src_row_or_null, o2_begin, o2_end, lo2, hi2, off2)
/// where src positions are o2 * stride2 + off2, valid for o2 in [lo2, hi2).
template <class RowFn>
void for_each_run(const ConvGeometry& g, const i64 t[3], i64 p_begin, i64 p_end, RowFn&& row_fn) {
  i64 lo2, hi2;
  g.valid_out_range(2, t[2], lo2, hi2);
  const i64 off2 = t[2] * g.dil[2] - g.pad[2];
  const i64 plane_row = g.out[2];
  i64 p = p_begin;
  i64 o2 = p % plane_row;
  i64 o01 = p / plane_row;
  while (p < p_end) {
    const i64 o1 = o01 % g.out[1], o0 = o01 / g.out[1];
    const i64 run_end = std::min(plane_row, o2 + (p_end - p));
    const i64 i0 = o0 * g.stride[0] - g.pad[0] + t[0] * g.dil[0];
    const i64 i1 = o1 * g.stride[1] - g.pad[1] + t[1] * g.dil[1];
    const bool row_ok = i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1];
    const i64 src_row = row_ok ? (i0 * g.in[1] + i1) * g.in[2] : -1;
    row_fn(p - p_begin, src_row, o2, run_end, lo2, hi2, off2);
    p += run_end - o2;
    o2 = 0;
    ++o01;
  }
}

/// Decodes column-matrix row r into channel q and the *unflipped* taps t[3].
inline i64 decode_row(const ConvGeometry& g, i64 r, i64 t[3]) {
  i64 rem = r % g.ker_numel;
  const i64 q = r / g.ker_numel;
  const i64 w2 = rem % g.ker[2];
  rem /= g.ker[2];
  const i64 w1 = rem % g.ker[1];
  const i64 w0 = rem / g.ker[1];
  t[0] = g.wtap(0, w0);
  t[1] = g.wtap(1, w1);
  t[2] = g.wtap(2, w2);
  return q;
}

}  // namespace

template <class T>
void im2col(const ConvGeometry& g, const T* x, i64 channels, i64 p_begin, i64 p_end, T* col) {
  const i64 np = p_end - p_begin;
  const i64 rows = channels * g.ker_numel;
  const i64 s2 = g.stride[2];
  for (i64 r = 0; r < rows; ++r) {
    i64 t[3];
    const i64 q = decode_row(g, r, t);
    const T* xq = x + q * g.in_numel;
    T* dst_row = col + r * np;
    for_each_run(g, t, p_begin, p_end,
                 [&](i64 dst, i64 src_row, i64 b, i64 e, i64 lo, i64 hi, i64 off) {
                   // out[j] is output position o2 = b + j, which reads input element
                   // src_row + off + o2 * s2: inside the plane for o2 in [lo, hi).
                   T* out = dst_row + dst;
                   const i64 n = e - b;
                   if (src_row < 0) {
                     std::fill(out, out + n, T(0));
                     return;
                   }
                   const i64 vb = std::clamp(lo, b, e) - b, ve = std::clamp(hi, b + vb, e) - b;
                   std::fill(out, out + vb, T(0));
                   if (vb < ve) {
                     const T* src = xq + (src_row + off + (b + vb) * s2);  // input of j = vb
                     if (s2 == 1) {
                       std::copy(src, src + (ve - vb), out + vb);
                     } else {
                       for (i64 j = 0; j < ve - vb; ++j) out[vb + j] = src[j * s2];
                     }
                   }
                   std::fill(out + ve, out + n, T(0));
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
    const i64 q = decode_row(g, r, t);
    T* xq = x + q * g.in_numel;
    const T* src_row = col + r * np;
    for_each_run(g, t, p_begin, p_end,
                 [&](i64 src, i64 dst_row, i64 b, i64 e, i64 lo, i64 hi, i64 off) {
                   if (dst_row < 0) return;  // the whole run read padding
                   const i64 vb = std::clamp(lo, b, e) - b, ve = std::clamp(hi, b + vb, e) - b;
                   if (vb >= ve) return;
                   const T* in = src_row + src;
                   T* dst = xq + (dst_row + off + (b + vb) * s2);  // input of o2 = b + vb
                   if (s2 == 1) {
                     for (i64 j = vb; j < ve; ++j) dst[j - vb] += in[j];
                   } else {
                     for (i64 j = vb; j < ve; ++j) dst[(j - vb) * s2] += in[j];
                   }
                 });
  }
}

template void im2col<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void im2col<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);
template void col2im_add<float>(const ConvGeometry&, const float*, i64, i64, i64, float*);
template void col2im_add<double>(const ConvGeometry&, const double*, i64, i64, i64, double*);

}  // namespace convgraph::cpu
