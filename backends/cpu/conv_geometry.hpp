#pragma once
// Private to backends/cpu: a ConvProblem's geometry normalised to exactly three spatial
// axes, which lets every CPU kernel use one code path for 1D, 2D and 3D. The problem's axes
// are right-aligned: axis 2 is always the innermost (contiguous) one, and the leading unused
// axes have size 1, stride 1, dilation 1 and no padding.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph::cpu {

using i64 = std::int64_t;

/// Floor division for a possibly negative numerator and a positive divisor.
inline i64 floor_div(i64 a, i64 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
/// Ceiling division for a possibly negative numerator and a positive divisor.
inline i64 ceil_div(i64 a, i64 b) { return -floor_div(-a, b); }

/// The taps t in [0, ker) of dilation dil with first <= t * dil <= last: those of an output
/// that read inside its source, given the source's extent [first, last] as offsets from
/// the output's first tap. Empty ({lo, lo}) where none does.
inline std::array<i64, 2> taps_inside(i64 first, i64 last, i64 dil, i64 ker) {
  const i64 lo = std::clamp<i64>(ceil_div(first, dil), 0, ker);
  return {lo, last < 0 ? lo : std::clamp<i64>(last / dil + 1, lo, ker)};
}

struct ConvGeometry {
  std::array<i64, 3> in{1, 1, 1}, ker{1, 1, 1}, out{1, 1, 1};
  std::array<i64, 3> stride{1, 1, 1}, dil{1, 1, 1}, pad{0, 0, 0};
  bool flip = false;
  i64 N = 1, C = 1, K = 1, G = 1, Cg = 1, Kg = 1;
  i64 in_numel = 1, ker_numel = 1, out_numel = 1;

  ConvGeometry() = default;
  explicit ConvGeometry(const ConvProblem& p) : flip(p.flip), N(p.N), C(p.C), K(p.K), G(p.G) {
    // Right-aligned: the problem's last (contiguous) axis is always axis 2 here, so the
    // kernels' innermost loops run along real rows; leading unused axes have size 1.
    for (int a = 0; a < p.ndim; ++a) {
      const auto src = static_cast<std::size_t>(a);
      const auto dst = static_cast<std::size_t>(3 - p.ndim + a);
      in[dst] = p.in[src];
      ker[dst] = p.kernel[src];
      out[dst] = p.out[src];
      stride[dst] = p.stride[src];
      dil[dst] = p.dilation[src];
      pad[dst] = p.pad_pre[src];
    }
    Cg = C / G;
    Kg = K / G;
    in_numel = in[0] * in[1] * in[2];
    ker_numel = ker[0] * ker[1] * ker[2];
    out_numel = out[0] * out[1] * out[2];
  }

  /// Storage index of spatial tap t on axis a: the mirrored position when flipping.
  i64 wtap(std::size_t a, i64 t) const { return flip ? ker[a] - 1 - t : t; }

  /// Decodes column-matrix row r (im2col.hpp's order: channel, then the stored filter
  /// taps) into its channel, returned, and the *unflipped* taps t[3].
  i64 column_row(i64 r, i64 t[3]) const {
    i64 rem = r % ker_numel;
    const i64 w2 = rem % ker[2];
    rem /= ker[2];
    t[0] = wtap(0, rem / ker[1]);
    t[1] = wtap(1, rem % ker[1]);
    t[2] = wtap(2, w2);
    return r / ker_numel;
  }

  /// Outputs o in [lo, hi) on axis a whose tap t reads inside the input (not the padding).
  void valid_out_range(std::size_t a, i64 t, i64& lo, i64& hi) const {
    const i64 off = t * dil[a] - pad[a];  // input index = o * stride + off
    lo = ceil_div(-off, stride[a]);
    hi = floor_div(in[a] - 1 - off, stride[a]) + 1;
    if (lo < 0) lo = 0;
    if (hi > out[a]) hi = out[a];
    if (hi < lo) hi = lo;
  }

  /// True for a 1x1(x1) filter at stride 1 without padding: the input is already the
  /// column matrix.
  bool is_pointwise() const {
    for (std::size_t a = 0; a < 3; ++a)
      if (ker[a] != 1 || stride[a] != 1 || pad[a] != 0 || out[a] != in[a]) return false;
    return true;
  }
};

/// fn(begin, end) over [0, n) on ctx.pool, or serially on the caller when there is none.
inline void parallel_over(const ConvContext& ctx, i64 n, const std::function<void(i64, i64)>& fn) {
  if (ctx.pool != nullptr) ctx.pool->parallel_for(n, fn);
  else if (n > 0) fn(0, n);
}

}  // namespace convgraph::cpu
