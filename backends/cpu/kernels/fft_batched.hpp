#pragma once
// Private to kernels/fft.cpp, inside its level region (isa_begin.hpp): the batched 1-D
// FFT under cpu.fft (../FFT.md says why it is our own). A Stockham mixed-radix (4, 2, 3, 5) transform of many signals at
// once: element j of signal l sits at re[j*es + l] / im[j*es + l], so every butterfly is a
// contiguous loop over signals that the compiler vectorises. Forward and unnormalised:
// X[f] = sum_m x[m] exp(-2 pi i f m / n); the inverse is the same call with re and im
// exchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <utility>
#include <vector>

#include "convgraph/core/error.hpp"

// The butterfly loops read and write distinct buffers; say so, so they vectorise.
#if defined(__clang__)
#define CG_FFT_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define CG_FFT_IVDEP _Pragma("GCC ivdep")
#endif

namespace convgraph::cpu::CONVGRAPH_ISA_NS::fft {

using i64 = std::int64_t;

/// Smallest 2^a 3^b 5^c >= n: the lengths our radices cover.
inline i64 good_size(i64 n) {
  if (n <= 1) return 1;
  i64 best = 1;
  while (best < n) best *= 2;
  for (i64 p5 = 1; p5 < 2 * n; p5 *= 5)
    for (i64 p3 = p5; p3 < 2 * n; p3 *= 3) {
      i64 v = p3;
      while (v < n) v *= 2;
      best = std::min(best, v);
    }
  return best;
}

template <class T>
struct Plan {
  i64 n = 1;
  std::vector<int> radix;  ///< factors of n, applied in order
  std::vector<T> wr, wi;   ///< exp(-2 pi i k / n), k in [0, n)

  explicit Plan(i64 len) : n(len) {
    i64 r = n;
    while (r % 4 == 0) radix.push_back(4), r /= 4;
    for (int p : {2, 3, 5})
      while (r % p == 0) radix.push_back(p), r /= p;
    if (r != 1) throw ValueError(msg("cpu.fft: length ", n, " is not 2,3,5-smooth"));
    wr.resize(static_cast<std::size_t>(n));
    wi.resize(static_cast<std::size_t>(n));
    for (i64 k = 0; k < n; ++k) {
      const double a = -2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
      wr[static_cast<std::size_t>(k)] = static_cast<T>(std::cos(a));
      wi[static_cast<std::size_t>(k)] = static_cast<T>(std::sin(a));
    }
  }
};

// One Stockham stage of radix p on a length-`cur` transform whose elements are W-wide
// contiguous rows: y[(p*q + r)*W + l] = w^(r q) * DFT_p(x[(q + j*m)*W + l], j)[r].
template <class T>
void stage(int p, i64 cur, i64 W, const Plan<T>& pl, const T* __restrict xr,
           const T* __restrict xi, T* __restrict yr, T* __restrict yi) {
  const i64 m = cur / p, step = pl.n / cur;
  constexpr T h = T(0.5);
  const T s3 = static_cast<T>(std::sqrt(3.0) / 2);
  const T c1 = static_cast<T>(std::cos(2 * std::numbers::pi / 5)), c2 = static_cast<T>(std::cos(4 * std::numbers::pi / 5));
  const T s1 = static_cast<T>(std::sin(2 * std::numbers::pi / 5)), s2 = static_cast<T>(std::sin(4 * std::numbers::pi / 5));
  for (i64 q = 0; q < m; ++q) {
    T tr[5], ti[5];
    for (int r = 1; r < p; ++r) {
      const auto k = static_cast<std::size_t>((r * q * step) % pl.n);
      tr[r] = pl.wr[k], ti[r] = pl.wi[k];
    }
    const T* ar[5]; const T* ai[5]; T* br[5]; T* bi[5];
    for (int j = 0; j < p; ++j) {
      ar[j] = xr + (q + j * m) * W, ai[j] = xi + (q + j * m) * W;
      br[j] = yr + (p * q + j) * W, bi[j] = yi + (p * q + j) * W;
    }
    // Multiplies (vr, vi) by twiddle r and stores it as output r.
#define CG_TW(r, vr, vi)                                  \
  do {                                                    \
    const T ur = (vr), ui = (vi);                         \
    br[r][l] = ur * tr[r] - ui * ti[r];                   \
    bi[r][l] = ur * ti[r] + ui * tr[r];                   \
  } while (0)
    if (p == 2) {
CG_FFT_IVDEP
      for (i64 l = 0; l < W; ++l) {
        const T x0r = ar[0][l], x0i = ai[0][l], x1r = ar[1][l], x1i = ai[1][l];
        br[0][l] = x0r + x1r, bi[0][l] = x0i + x1i;
        CG_TW(1, x0r - x1r, x0i - x1i);
      }
    } else if (p == 4) {
CG_FFT_IVDEP
      for (i64 l = 0; l < W; ++l) {
        const T t0r = ar[0][l] + ar[2][l], t0i = ai[0][l] + ai[2][l];
        const T t1r = ar[0][l] - ar[2][l], t1i = ai[0][l] - ai[2][l];
        const T t2r = ar[1][l] + ar[3][l], t2i = ai[1][l] + ai[3][l];
        const T t3r = ai[1][l] - ai[3][l], t3i = ar[3][l] - ar[1][l];  // -i (x1 - x3)
        br[0][l] = t0r + t2r, bi[0][l] = t0i + t2i;
        CG_TW(1, t1r + t3r, t1i + t3i);
        CG_TW(2, t0r - t2r, t0i - t2i);
        CG_TW(3, t1r - t3r, t1i - t3i);
      }
    } else if (p == 3) {
CG_FFT_IVDEP
      for (i64 l = 0; l < W; ++l) {
        const T sr = ar[1][l] + ar[2][l], si = ai[1][l] + ai[2][l];
        const T dr = ar[1][l] - ar[2][l], di = ai[1][l] - ai[2][l];
        const T mr = ar[0][l] - h * sr, mi = ai[0][l] - h * si;
        br[0][l] = ar[0][l] + sr, bi[0][l] = ai[0][l] + si;
        CG_TW(1, mr + s3 * di, mi - s3 * dr);  // m - i s3 d
        CG_TW(2, mr - s3 * di, mi + s3 * dr);  // m + i s3 d
      }
    } else {  // p == 5
CG_FFT_IVDEP
      for (i64 l = 0; l < W; ++l) {
        const T x0r = ar[0][l], x0i = ai[0][l];
        const T a14r = ar[1][l] + ar[4][l], a14i = ai[1][l] + ai[4][l];
        const T d14r = ar[1][l] - ar[4][l], d14i = ai[1][l] - ai[4][l];
        const T a23r = ar[2][l] + ar[3][l], a23i = ai[2][l] + ai[3][l];
        const T d23r = ar[2][l] - ar[3][l], d23i = ai[2][l] - ai[3][l];
        const T m1r = x0r + c1 * a14r + c2 * a23r, m1i = x0i + c1 * a14i + c2 * a23i;
        const T m2r = x0r + c2 * a14r + c1 * a23r, m2i = x0i + c2 * a14i + c1 * a23i;
        const T e1r = s1 * d14r + s2 * d23r, e1i = s1 * d14i + s2 * d23i;  // X1,4 = m1 -+ i e1
        const T e2r = s2 * d14r - s1 * d23r, e2i = s2 * d14i - s1 * d23i;  // X2,3 = m2 -+ i e2
        br[0][l] = x0r + a14r + a23r, bi[0][l] = x0i + a14i + a23i;
        CG_TW(1, m1r + e1i, m1i - e1r);
        CG_TW(4, m1r - e1i, m1i + e1r);
        CG_TW(2, m2r + e2i, m2i - e2r);
        CG_TW(3, m2r - e2i, m2i + e2r);
      }
    }
#undef CG_TW
  }
}

/// Transforms `lanes` signals of length pl.n in place; element j of signal l sits at
/// re[j*es + l]. `buf` holds 4 * n * lanes values (two ping-pong buffers).
template <class T>
void fft_tile(const Plan<T>& pl, T* re, T* im, i64 es, i64 lanes, T* buf) {
  const i64 n = pl.n;
  if (n == 1) return;
  T* ar = buf; T* ai = ar + n * lanes; T* br = ai + n * lanes; T* bi = br + n * lanes;
  const auto bytes = static_cast<std::size_t>(lanes) * sizeof(T);
  for (i64 j = 0; j < n; ++j) {
    std::memcpy(ar + j * lanes, re + j * es, bytes);
    std::memcpy(ai + j * lanes, im + j * es, bytes);
  }
  i64 cur = n, s = 1;
  for (int p : pl.radix) {
    stage(p, cur, s * lanes, pl, ar, ai, br, bi);
    std::swap(ar, br), std::swap(ai, bi);
    s *= p, cur /= p;
  }
  for (i64 j = 0; j < n; ++j) {
    std::memcpy(re + j * es, ar + j * lanes, bytes);
    std::memcpy(im + j * es, ai + j * lanes, bytes);
  }
}

/// Signals one FFT tile carries: enough to fill vectors (>= 16), few enough that the four
/// ping-pong arrays (16 KiB each) stay in L1/L2 and the per-thread scratch stays small.
inline i64 tile_lanes(i64 n, i64 inner, std::size_t elem) {
  const i64 want = std::clamp<i64>((i64{16384} / static_cast<i64>(elem)) / std::max<i64>(n, 1), 16, 1024);
  return std::min(inner, want / 16 * 16);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS::fft
