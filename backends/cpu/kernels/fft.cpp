// "cpu.fft": convolution by FFT, stride 1, any rank, dilation, padding, groups, direction.
//
// Per spatial axis the zero-padded input is (in effective coordinates) a line of length Pe
// and the dilated kernel a line of length dk; every output, input gradient and weight
// gradient is then a linear correlation/convolution that fits in a circular one of length
// L >= Pe without wrap-around (derivation in FFT.md). Padding beyond dk - 1 only adds
// outputs that read nothing but zeros, so it is clamped (`Axis::a_off`, `Axis::pe`) and
// those outputs are written as zeros; a huge pad never grows the transform.
//
// The FFT is our own (fft_batched.hpp; FFT.md says why): a Stockham mixed-radix (4, 2, 3, 5)
// transform that runs on many signals at once. Spectra are stored split (re and im arrays)
// with the signal index innermost, [f0][f1][f2][b], so every butterfly is a contiguous
// loop over signals (and over inner axes) that the compiler vectorises, and the channel
// contraction at one frequency is a small complex matrix product over contiguous rows.
// The last (contiguous) axis is real: its length is made even and it is transformed as a
// half-length complex FFT plus a split step, so spectra hold L/2 + 1 points on that axis.
// The inverse transform is the forward one with re and im exchanged.
//
// Memory: the filter spectra grow with K * C/G; wide layers are split into chunks of
// output channels, each an independent sub-convolution (`choose_chunks`).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <thread>
#include <utility>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"
#include "backends/cpu/kernels/fft_batched.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

using i64 = std::int64_t;
using fft::good_size;
using fft::Plan;
using fft::tile_lanes;
constexpr std::size_t kAlign = 64;

std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// ---------------------------------------------------------------------------------------
// Work distribution: `slots` scratch areas, each used by one thread at a time.

/// Per-thread scratch areas the workspace holds: one per hardware thread (or per
/// CONVGRAPH_THREADS, if larger), so workspace_bytes() depends on the problem and the
/// machine only, never on which pool a run gets.
int max_slots() {
  int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n = std::max(n, configured_thread_count());  // CONVGRAPH_THREADS, parsed in one place
  return std::clamp(n, 1, 64);
}

template <class Fn>
void run_tasks(ThreadPool* pool, int slots, i64 ntasks, const Fn& fn) {
  if (ntasks <= 0) return;
  std::atomic<i64> next{0};
  const i64 used = std::min<i64>({slots, ntasks, pool ? pool->size() : 1});
  auto body = [&](i64 s0, i64 s1) {
    for (i64 slot = s0; slot < s1; ++slot)
      for (i64 t = next.fetch_add(1); t < ntasks; t = next.fetch_add(1)) fn(static_cast<int>(slot), t);
  };
  if (pool && used > 1) pool->parallel_for(used, body, 1);
  else body(0, 1);
}

// ---------------------------------------------------------------------------------------
// Geometry: three internal axes, the last one real and contiguous.

struct Axis {
  i64 in = 1, ker = 1, out = 1, dil = 1, pad = 0;
  i64 dk = 1;     ///< dilated kernel
  i64 a_off = 0;  ///< where x[0] sits in the effective padded line: min(pad_pre, dk - 1)
  i64 pe = 1;     ///< effective padded length a_off + in + min(pad_post, dk - 1)
  i64 oute = 1;   ///< outputs that read anything: pe - dk + 1
  i64 o0 = 0;     ///< output index of effective output 0: pad_pre - a_off
  i64 L = 1;      ///< transform length (>= pe; even on the last axis)
};

struct Geometry {
  std::array<Axis, 3> ax;
  i64 N, C, K, G, Cg, Kg;
  i64 half = 1;   ///< complex length of the last axis, L / 2
  std::array<i64, 3> sd{1, 1, 1};  ///< spectral dims: L0, L1, half + 1
  i64 F = 1;      ///< spectral points
  i64 nb = 1;     ///< images per chunk
  int slots = 1;
  i64 scratch = 0;  ///< per-slot FFT scratch elements

  Geometry(const ConvProblem& p, std::size_t elem) : N(p.N), C(p.C), K(p.K), G(p.G), Cg(p.C / p.G), Kg(p.K / p.G) {
    const int shift = 3 - p.ndim;
    for (int a = 0; a < p.ndim; ++a) {
      const auto s = static_cast<std::size_t>(a), d = static_cast<std::size_t>(a + shift);
      Axis& x = ax[d];
      x.in = p.in[s], x.ker = p.kernel[s], x.out = p.out[s], x.dil = p.dilation[s], x.pad = p.pad_pre[s];
      x.dk = (x.ker - 1) * x.dil + 1;
      x.a_off = std::min(p.pad_pre[s], x.dk - 1);
      x.pe = x.a_off + x.in + std::min(p.pad_post[s], x.dk - 1);
      x.oute = x.pe - x.dk + 1;
      x.o0 = x.pad - x.a_off;
    }
    for (int d = 0; d < 2; ++d) ax[static_cast<std::size_t>(d)].L = good_size(ax[static_cast<std::size_t>(d)].pe);
    half = good_size((ax[2].pe + 1) / 2);
    ax[2].L = 2 * half;
    sd = {ax[0].L, ax[1].L, half + 1};
    F = sd[0] * sd[1] * sd[2];
    slots = max_slots();
    for (i64 len : {ax[0].L, ax[1].L, half})
      scratch = std::max(scratch, 4 * len * tile_lanes(len, i64{1} << 40, elem));
  }
};

/// Maps `count` source positions s0 + i*ss to spectral-line positions d0 + i*ds.
struct Map1 { i64 count, s0, ss, d0, ds; };

/// Where plane `pl` goes among the spectral signals: (pl / inner) * m_outer + (pl % inner) * m_inner.
struct Lanes { i64 inner, m_outer, m_inner; i64 operator()(i64 pl) const { return (pl / inner) * m_outer + (pl % inner) * m_inner; } };

/// Which stored plane the pl-th plane of a channel range is: (pl / per) * stride + pl % per
/// (per = channels in the range, stride = channels of the tensor); contiguous by default.
struct Planes {
  i64 per = i64{1} << 60, stride = 0;
  i64 operator()(i64 pl) const { return (pl / per) * stride + pl % per; }
};

/// Walks every position of the mapped region for `planes` planes (sizes `sz`, plane
/// `pv(pl)`), 16 planes at a time so that the spectral accesses of one position share
/// cache lines, and calls visit(np, lane, off, si, at, odd): planes k < np sit at real
/// offset off[k] + si and spectral lane lane[k] of row `at` of the re (even position)
/// or im (odd position) array. The real last axis is packed as even -> re, odd -> im.
template <class Visit>
void for_each_mapped(ThreadPool* pool, Planes pv, i64 planes, const std::array<i64, 3>& sz,
                     const std::array<Map1, 3>& m, Lanes lanes, const Geometry& g, i64 B, Visit visit) {
  const i64 plane = sz[0] * sz[1] * sz[2];
  const i64 rows = m[0].count * m[1].count;
  auto body = [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const i64 i0 = r / m[1].count, i1 = r % m[1].count;
      const i64 s_row = ((m[0].s0 + i0 * m[0].ss) * sz[1] + (m[1].s0 + i1 * m[1].ss)) * sz[2];
      const i64 d_row = ((m[0].d0 + i0 * m[0].ds) * g.sd[1] + (m[1].d0 + i1 * m[1].ds)) * g.sd[2];
      for (i64 p0 = 0; p0 < planes; p0 += 16) {
        const i64 np = std::min<i64>(16, planes - p0);
        i64 lane[16], off[16];
        for (i64 k = 0; k < np; ++k) lane[k] = lanes(p0 + k), off[k] = pv(p0 + k) * plane + s_row;
        for (i64 i2 = 0; i2 < m[2].count; ++i2) {
          const i64 d = m[2].d0 + i2 * m[2].ds, si = m[2].s0 + i2 * m[2].ss;
          visit(np, lane, off, si, (d_row + (d >> 1)) * B, (d & 1) != 0);
        }
      }
    }
  };
  if (pool) pool->parallel_for(rows, body, 1);
  else body(0, rows);
}

/// Scatters real planes of `src` into the zeroed spectral arrays (B signals).
template <class S, class T>
void load(ThreadPool* pool, const S* src, Planes pv, i64 planes, const std::array<i64, 3>& sz,
          const std::array<Map1, 3>& m, Lanes lanes, const Geometry& g, T* re, T* im, i64 B) {
  for_each_mapped(pool, pv, planes, sz, m, lanes, g, B,
                  [&](i64 np, const i64* lane, const i64* off, i64 si, i64 at, bool odd) {
                    T* dst = (odd ? im : re) + at;
                    for (i64 k = 0; k < np; ++k) dst[lane[k]] = static_cast<T>(src[off[k] + si]);
                  });
}

/// The reverse of load: gathers real values (times `scale`) into planes of `dst`, or adds
/// them to what is there (`add`).
template <class S, class T>
void store(ThreadPool* pool, S* dst, Planes pv, i64 planes, const std::array<i64, 3>& sz,
           const std::array<Map1, 3>& m, Lanes lanes, const Geometry& g, const T* re, const T* im, i64 B,
           T scale, bool add) {
  for_each_mapped(pool, pv, planes, sz, m, lanes, g, B,
                  [&](i64 np, const i64* lane, const i64* off, i64 si, i64 at, bool odd) {
                    const T* src = (odd ? im : re) + at;
                    if (add)
                      for (i64 k = 0; k < np; ++k) dst[off[k] + si] += static_cast<S>(src[lane[k]] * scale);
                    else
                      for (i64 k = 0; k < np; ++k) dst[off[k] + si] = static_cast<S>(src[lane[k]] * scale);
                  });
}

// ---------------------------------------------------------------------------------------
// N-d real transforms of B signals laid out [sd0][sd1][sd2][b], split re/im.

template <class T>
struct Transforms {
  const Geometry& g;
  Plan<T> p0, p1, ph;
  std::vector<T> hr, hi;  ///< exp(-2 pi i f / L2), f in [0, half]: the real-axis split

  explicit Transforms(const Geometry& geo)
      : g(geo), p0(geo.ax[0].L), p1(geo.ax[1].L), ph(geo.half) {
    const i64 L2 = 2 * g.half;
    for (i64 f = 0; f <= g.half; ++f) {
      const double a = -2.0 * std::numbers::pi * static_cast<double>(f) / static_cast<double>(L2);
      hr.push_back(static_cast<T>(std::cos(a)));
      hi.push_back(static_cast<T>(std::sin(a)));
    }
  }

  /// Complex FFT along internal axis `a` (line length pl.n <= sd[a]) of every line.
  void axis(ThreadPool* pool, T* scratch, int a, const Plan<T>& pl, T* re, T* im, i64 B) const {
    if (pl.n == 1) return;
    i64 outer = 1, inner = B;
    for (int d = 0; d < a; ++d) outer *= g.sd[static_cast<std::size_t>(d)];
    for (int d = a + 1; d < 3; ++d) inner *= g.sd[static_cast<std::size_t>(d)];
    const i64 lanes = tile_lanes(pl.n, inner, sizeof(T));
    const i64 tiles = (inner + lanes - 1) / lanes;
    const i64 line = g.sd[static_cast<std::size_t>(a)] * inner;
    run_tasks(pool, g.slots, outer * tiles, [&](int slot, i64 t) {
      const i64 o = t / tiles, l0 = (t % tiles) * lanes;
      const i64 off = o * line + l0;
      fft::fft_tile(pl, re + off, im + off, inner, std::min(lanes, inner - l0), scratch + slot * g.scratch);
    });
  }

  /// Packed real lines (even samples in re, odd in im) -> half spectrum on the last axis.
  void split(ThreadPool* pool, T* re, T* im, i64 B, bool inverse) const {
    const i64 h = g.half, lines = g.sd[0] * g.sd[1];
    auto body = [&](i64 l0, i64 l1) {
      for (i64 line = l0; line < l1; ++line)
        for (i64 f = 0; f <= h / 2; ++f) {
          const i64 gi = h - f;
          T* fr = re + (line * (h + 1) + f) * B; T* fi = im + (line * (h + 1) + f) * B;
          T* gr = re + (line * (h + 1) + (inverse ? gi : gi % h)) * B;
          T* gim = im + (line * (h + 1) + (inverse ? gi : gi % h)) * B;
          T* outr = re + (line * (h + 1) + gi) * B; T* outi = im + (line * (h + 1) + gi) * B;
          const T wr = hr[static_cast<std::size_t>(f)], wi = hi[static_cast<std::size_t>(f)];
          const bool write_g = inverse ? (f != 0 && gi != f) : (gi != f);
          for (i64 b = 0; b < B; ++b) {
            const T zfr = fr[b], zfi = fi[b], zgr = gr[b], zgi = gim[b];
            if (!inverse) {
              // E = (Zf + conj Zg) / 2, O = -i (Zf - conj Zg) / 2, X[f] = E + w O, X[g] = conj(E - w O).
              const T er = T(0.5) * (zfr + zgr), ei = T(0.5) * (zfi - zgi);
              const T orr = T(0.5) * (zfi + zgi), oi = T(0.5) * (zgr - zfr);
              const T pr = wr * orr - wi * oi, pi = wr * oi + wi * orr;
              fr[b] = er + pr, fi[b] = ei + pi;
              if (write_g) outr[b] = er - pr, outi[b] = pi - ei;
            } else {
              // E = X[f] + conj X[g], O = (X[f] - conj X[g]) conj(w); Z[f] = E + i O, Z[g] = conj E + i conj O.
              const T er = zfr + zgr, ei = zfi - zgi;
              const T dr = zfr - zgr, di = zfi + zgi;
              const T orr = dr * wr + di * wi, oi = di * wr - dr * wi;
              fr[b] = er - oi, fi[b] = ei + orr;
              if (write_g) outr[b] = er + oi, outi[b] = orr - ei;
            }
          }
        }
    };
    if (pool) pool->parallel_for(lines, body, 1);
    else body(0, lines);
  }

  void forward(ThreadPool* pool, T* scratch, T* re, T* im, i64 B) const {
    axis(pool, scratch, 2, ph, re, im, B);
    split(pool, re, im, B, false);
    axis(pool, scratch, 1, p1, re, im, B);
    axis(pool, scratch, 0, p0, re, im, B);
  }
  /// Unnormalised inverse (exchanging re and im turns the forward FFT into the inverse).
  void inverse(ThreadPool* pool, T* scratch, T* re, T* im, i64 B) const {
    axis(pool, scratch, 0, p0, im, re, B);
    axis(pool, scratch, 1, p1, im, re, B);
    split(pool, re, im, B, true);
    axis(pool, scratch, 2, ph, im, re, B);
  }
};

// ---------------------------------------------------------------------------------------
// The channel contraction at every frequency (complex, split storage).

enum class Product { fwd, gi, gw };

/// fwd: Y[n][k] = sum_c X[n][c] conj(W[c][k]);  gi: X[n][c] = sum_k Y[n][k] W[k][c];
/// gw: W[c][k] += sum_n X[n][c] conj(Y[n][k]). Layouts: X b = n*C + c, Y b = n*K + k,
/// W b = c*K + k (fwd, gw) or k*Cg + c (gi).
template <class T>
void contract(ThreadPool* pool, Product kind, const Geometry& g, i64 nbc, T* xr, T* xi, i64 Bx,
              T* yr, T* yi, i64 By, T* wr, T* wi, i64 Bw) {
  const i64 C = g.C, K = g.K, Cg = g.Cg, Kg = g.Kg;
  auto body = [&](i64 f0, i64 f1) {
    for (i64 f = f0; f < f1; ++f) {
      T* Xr = xr + f * Bx; T* Xi = xi + f * Bx;
      T* Yr = yr + f * By; T* Yi = yi + f * By;
      T* Wr = wr + f * Bw; T* Wi = wi + f * Bw;
      for (i64 n = 0; n < nbc; ++n)
        for (i64 gr = 0; gr < g.G; ++gr) {
          if (kind == Product::fwd) {
            T* __restrict orr = Yr + n * K + gr * Kg; T* __restrict oi = Yi + n * K + gr * Kg;
            std::fill(orr, orr + Kg, T(0)), std::fill(oi, oi + Kg, T(0));
            for (i64 c = 0; c < Cg; ++c) {
              const T ar = Xr[n * C + gr * Cg + c], ai = Xi[n * C + gr * Cg + c];
              const T* __restrict br = Wr + c * K + gr * Kg; const T* __restrict bi = Wi + c * K + gr * Kg;
              for (i64 k = 0; k < Kg; ++k) orr[k] += ar * br[k] + ai * bi[k], oi[k] += ai * br[k] - ar * bi[k];
            }
          } else if (kind == Product::gi) {
            T* __restrict orr = Xr + n * C + gr * Cg; T* __restrict oi = Xi + n * C + gr * Cg;
            std::fill(orr, orr + Cg, T(0)), std::fill(oi, oi + Cg, T(0));
            for (i64 k = 0; k < Kg; ++k) {
              const T ar = Yr[n * K + gr * Kg + k], ai = Yi[n * K + gr * Kg + k];
              const T* __restrict br = Wr + (gr * Kg + k) * Cg; const T* __restrict bi = Wi + (gr * Kg + k) * Cg;
              for (i64 c = 0; c < Cg; ++c) orr[c] += ar * br[c] - ai * bi[c], oi[c] += ar * bi[c] + ai * br[c];
            }
          } else {
            const T* __restrict br = Yr + n * K + gr * Kg; const T* __restrict bi = Yi + n * K + gr * Kg;
            for (i64 c = 0; c < Cg; ++c) {
              const T ar = Xr[n * C + gr * Cg + c], ai = Xi[n * C + gr * Cg + c];
              T* __restrict orr = Wr + c * K + gr * Kg; T* __restrict oi = Wi + c * K + gr * Kg;
              for (i64 k = 0; k < Kg; ++k) orr[k] += ar * br[k] + ai * bi[k], oi[k] += ai * br[k] - ar * bi[k];
            }
          }
        }
    }
  };
  if (pool) pool->parallel_for(g.F, body, 16);
  else body(0, g.F);
}

// ---------------------------------------------------------------------------------------
// Workspace plan and the three directions.

template <class T>
struct Layout {
  i64 w = 0, a = 0, b = 0, s = 0;  ///< element offsets: W spectra, x-side, y-side, scratch
  i64 total = 0;
  static i64 al(i64 v) { return static_cast<i64>(align_up(static_cast<std::size_t>(v) * sizeof(T)) / sizeof(T)); }
  explicit Layout(const Geometry& g) {
    w = 0;
    a = al(2 * g.F * g.K * g.Cg);
    b = a + al(2 * g.F * g.nb * g.C);
    s = b + al(2 * g.F * g.nb * g.K);
    total = s + g.slots * g.scratch;
  }
};

/// Picks the images per chunk: as many as fit a soft cap (and the limit); 0 if even one
/// image does not fit the limit.
template <class T>
Geometry plan(const ConvProblem& p) {
  Geometry g(p, sizeof(T));
  constexpr std::size_t kSoftCap = std::size_t{512} << 20;
  g.nb = 1;
  const auto bytes1 = static_cast<std::size_t>(Layout<T>(g).total) * sizeof(T);
  const std::size_t per_image = static_cast<std::size_t>(2 * g.F * (g.C + g.K)) * sizeof(T);
  const std::size_t budget = std::min(p.workspace_limit, std::max(kSoftCap, bytes1));
  if (bytes1 > p.workspace_limit) {
    g.nb = 0;
    return g;
  }
  g.nb = std::clamp<i64>(static_cast<i64>((budget - bytes1) / per_image) + 1, 1, g.N);
  while (g.nb > 1 && static_cast<std::size_t>(Layout<T>(g).total) * sizeof(T) > p.workspace_limit) --g.nb;
  return g;
}

/// The filter spectra (K * C/G of them) are what grows: for wide layers they are split
/// into chunks of output channels, each an independent sub-convolution (whole groups when
/// G > 1; for G == 1 a range of filters, whose grad-inputs contributions add up).
struct Chunks {
  i64 k = 0;          ///< output channels per chunk (a multiple of K/G when G > 1)
  ConvProblem first;  ///< the sub-problem of the first (largest) chunk
  i64 nb = 0;         ///< images per inner chunk, for every filter chunk; 0: does not fit
  std::size_t bytes = 0;
};

ConvProblem sub_problem(const ConvProblem& p, i64 k0, i64 k1) {
  ConvProblem s = p;
  s.K = k1 - k0;
  if (p.G > 1) {
    s.G = (k1 - k0) / p.Kg();
    s.C = s.G * p.Cg();
  }
  return s;
}

template <class T>
Chunks choose_chunks(const ConvProblem& p) {
  constexpr std::size_t kFilterCap = std::size_t{256} << 20;  // filter spectra per chunk
  const Geometry full(p, sizeof(T));
  const i64 unit = p.G > 1 ? p.Kg() : 1;  // chunk granularity in output channels
  const std::size_t per_unit = static_cast<std::size_t>(2 * full.F * unit * p.Cg()) * sizeof(T);
  i64 k = std::clamp<i64>(static_cast<i64>(kFilterCap / per_unit), 1, p.K / unit) * unit;
  for (;;) {
    Chunks c;
    c.k = k;
    c.first = sub_problem(p, 0, k);
    const Geometry g = plan<T>(c.first);
    if (g.nb > 0) {
      c.nb = g.nb;
      c.bytes = static_cast<std::size_t>(Layout<T>(g).total) * sizeof(T);
      return c;
    }
    if (k == unit) return c;  // nb == 0: one unit of filters does not fit the limit
    k = std::max(unit, k / 2 / unit * unit);
  }
}

bool wants_double(const ConvProblem& p) {
  return p.dtype == DType::float64 || p.compute == DType::float64;
}

/// One filter chunk: x and y are channel ranges (xv, yv) of the full tensors, w the
/// chunk's filters; `nb` images per inner chunk; `add`: grad inputs add to x.
template <class S, class T>
void run_chunk(const ConvProblem& p, S* x, Planes xv, S* w, S* y, Planes yv, i64 nb, bool add,
               const ConvContext& ctx) {
  Geometry g(p, sizeof(T));
  g.nb = nb;
  const Layout<T> lay(g);
  if (ctx.workspace_bytes < static_cast<std::size_t>(lay.total) * sizeof(T) || ctx.workspace == nullptr)
    throw MemoryError(msg("cpu.fft: workspace of ", ctx.workspace_bytes, " bytes, need ",
                          static_cast<std::size_t>(lay.total) * sizeof(T), " for ", p.key()));
  ThreadPool* pool = ctx.pool;
  T* ws = static_cast<T*>(ctx.workspace);
  T* scratch = ws + lay.s;
  const Transforms<T> tr(g);
  const auto& A = g.ax;
  const std::array<i64, 3> xs{A[0].in, A[1].in, A[2].in}, ks{A[0].ker, A[1].ker, A[2].ker},
      ys{A[0].out, A[1].out, A[2].out};
  const i64 xplane = xs[0] * xs[1] * xs[2], yplane = ys[0] * ys[1] * ys[2];
  std::array<Map1, 3> mx{}, mw{}, my{};
  for (std::size_t d = 0; d < 3; ++d) {
    mx[d] = {A[d].in, 0, 1, A[d].a_off, 1};
    const bool fl = p.flip && A[d].ker > 1;
    mw[d] = {A[d].ker, fl ? A[d].ker - 1 : 0, fl ? -1 : 1, 0, A[d].dil};
    my[d] = {A[d].oute, A[d].o0, 1, 0, 1};
  }
  const i64 Bw = g.K * g.Cg;
  T* wr = ws + lay.w; T* wi = wr + g.F * Bw;
  const Lanes w_lanes = p.direction == ConvDirection::grad_inputs ? Lanes{Bw, 0, 1} : Lanes{g.Cg, 1, g.K};
  auto zero = [&](T* v, i64 n) { std::memset(v, 0, static_cast<std::size_t>(n) * sizeof(T)); };
  const T scale = T(1) / static_cast<T>(A[0].L * A[1].L * A[2].L);

  zero(wr, 2 * g.F * Bw);
  if (p.direction != ConvDirection::grad_weights) {
    load(pool, static_cast<const S*>(w), Planes{}, Bw, ks, mw, w_lanes, g, wr, wi, Bw);
    tr.forward(pool, scratch, wr, wi, Bw);
  }
  bool y_partial = false;
  for (std::size_t d = 0; d < 3; ++d) y_partial |= A[d].oute != A[d].out;
  for (i64 n0 = 0; n0 < g.N; n0 += g.nb) {
    const i64 nbc = std::min(g.nb, g.N - n0);
    const i64 Bx = nbc * g.C, By = nbc * g.K;
    T* xr = ws + lay.a; T* xi = xr + g.F * Bx;
    T* yr = ws + lay.b; T* yi = yr + g.F * By;
    const Lanes id_x{Bx, 0, 1}, id_y{By, 0, 1};
    // Planes of images n0.. in the channel ranges.
    const S* xc = x + n0 * xv.stride * xplane;
    S* yc = y + n0 * yv.stride * yplane;
    switch (p.direction) {
      case ConvDirection::forward: {
        zero(xr, 2 * g.F * Bx);
        load(pool, xc, xv, Bx, xs, mx, id_x, g, xr, xi, Bx);
        tr.forward(pool, scratch, xr, xi, Bx);
        contract(pool, Product::fwd, g, nbc, xr, xi, Bx, yr, yi, By, wr, wi, Bw);
        tr.inverse(pool, scratch, yr, yi, By);
        if (y_partial)
          for (i64 pl = 0; pl < By; ++pl) std::fill_n(yc + yv(pl) * yplane, yplane, S(0));
        store(pool, yc, yv, By, ys, my, id_y, g, yr, yi, By, scale, false);
        break;
      }
      case ConvDirection::grad_inputs: {
        zero(yr, 2 * g.F * By);
        load(pool, static_cast<const S*>(yc), yv, By, ys, my, id_y, g, yr, yi, By);
        tr.forward(pool, scratch, yr, yi, By);
        contract(pool, Product::gi, g, nbc, xr, xi, Bx, yr, yi, By, wr, wi, Bw);
        tr.inverse(pool, scratch, xr, xi, Bx);
        store(pool, x + n0 * xv.stride * xplane, xv, Bx, xs, mx, id_x, g, xr, xi, Bx, scale, add);
        break;
      }
      case ConvDirection::grad_weights: {
        zero(xr, 2 * g.F * Bx);
        zero(yr, 2 * g.F * By);
        load(pool, xc, xv, Bx, xs, mx, id_x, g, xr, xi, Bx);
        load(pool, static_cast<const S*>(yc), yv, By, ys, my, id_y, g, yr, yi, By);
        tr.forward(pool, scratch, xr, xi, Bx);
        tr.forward(pool, scratch, yr, yi, By);
        contract(pool, Product::gw, g, nbc, xr, xi, Bx, yr, yi, By, wr, wi, Bw);
        break;
      }
    }
  }
  if (p.direction == ConvDirection::grad_weights) {
    tr.inverse(pool, scratch, wr, wi, Bw);
    store(pool, w, Planes{}, Bw, ks, mw, w_lanes, g, wr, wi, Bw, scale, false);
  }
}

template <class S, class T>
void run_fft(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const Chunks ch = choose_chunks<T>(p);
  if (ch.nb == 0) throw MemoryError(msg("cpu.fft: workspace limit ", p.workspace_limit, " too small for ", p.key()));
  if (ctx.workspace_bytes < ch.bytes || ctx.workspace == nullptr)
    throw MemoryError(msg("cpu.fft: workspace of ", ctx.workspace_bytes, " bytes, need ", ch.bytes, " for ", p.key()));
  S* x = static_cast<S*>(t.x); S* w = static_cast<S*>(t.w); S* y = static_cast<S*>(t.y);
  const i64 xplane = p.in_numel(), yplane = p.out_numel(), wsize = p.Cg() * p.kernel_numel();
  for (i64 k0 = 0; k0 < p.K; k0 += ch.k) {
    const i64 k1 = std::min(p.K, k0 + ch.k);
    const ConvProblem sub = sub_problem(p, k0, k1);
    const i64 c0 = p.G > 1 ? k0 / p.Kg() * p.Cg() : 0;  // first input channel of the chunk
    const bool add = p.direction == ConvDirection::grad_inputs && p.G == 1 && k0 > 0;
    run_chunk<S, T>(sub, x + c0 * xplane, Planes{sub.C, p.C}, w + k0 * wsize, y + k0 * yplane,
                    Planes{sub.K, p.K}, ch.nb, add, ctx);
  }
}

std::size_t workspace_of(const ConvProblem& p) {
  return wants_double(p) ? choose_chunks<double>(p).bytes : choose_chunks<float>(p).bytes;
}

}  // namespace

/// Entry points of this level's kernels (called by conv_fft.cpp).
Status fft_plan_status(const ConvProblem& p) {
    const bool dbl = wants_double(p);
    const Chunks ch = dbl ? choose_chunks<double>(p) : choose_chunks<float>(p);
    if (ch.nb == 0) {
      // The smallest plan: one image and one filter (one group's filters) per chunk.
      Geometry one(ch.first, dbl ? sizeof(double) : sizeof(float));
      one.nb = 1;
      const std::size_t need = dbl ? static_cast<std::size_t>(Layout<double>(one).total) * 8
                                   : static_cast<std::size_t>(Layout<float>(one).total) * 4;
      return Status::no(msg("cpu.fft: needs at least ", need, " bytes of workspace, over the limit of ",
                            p.workspace_limit));
    }
    return Status::ok();
}
std::size_t fft_workspace_bytes(const ConvProblem& p) { return workspace_of(p); }
void fft_run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  const bool dbl = wants_double(p);
  if (p.dtype == DType::float64) run_fft<double, double>(p, t, ctx);
  else if (dbl) run_fft<float, double>(p, t, ctx);
  else run_fft<float, float>(p, t, ctx);
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
