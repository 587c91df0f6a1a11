// The blocked layout's hot loops (ops/blocked_info.hpp): the forward convolution and
// pooling on tensors blocked by 16 channels, compiled once per CPU level.
//
// Convolution: a tile is kP consecutive output pixels of one row x NK blocks of 16 output
// channels, the whole reduction over (input channel block, tap, channel) in registers:
// each step broadcasts one input value per pixel - the 16 channels of a pixel are
// contiguous, so no packed copy of the source is needed - and loads NK weight vectors.
// Padding costs no copy either: a tap outside the input reads a block of zeros. The
// epilogue (bias, residual, relu) is applied to the registers and each pixel's 16 outputs
// are one contiguous vector store, where the NCHW kernels transpose through L1 first.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/blocked.hpp"
#include "backends/cpu/conv_geometry.hpp"
#include "ops/pool_internal.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {
namespace {

constexpr int kB = 16;  // channels per block (detail::kConvBlock)
constexpr int kU = 64;  // packed weight row: output channels per unit (detail::kConvBlockUnit)
// Output blocks per tile: kP x kNK accumulators of 16 floats (24 of 32 zmm with AVX-512;
// with AVX2 a block is two ymm, so 12 of 16).
#if CONVGRAPH_ISA_AVX512
constexpr int kNK = 4;
#else
constexpr int kNK = 1;
#endif
constexpr int kP = 6;
// The level's native vector: a 16-float generic vector below AVX-512 is lowered through the
// stack (forced blocked resnet8 inference ran 3.7x slower than NCHW on AVX2). A block of
// 16 channels is kNV of them.
constexpr int kVL = CONVGRAPH_ISA_VECTOR_BYTES / static_cast<int>(sizeof(float));
constexpr int kNV = kB / kVL;
using vf = float __attribute__((vector_size(kVL * sizeof(float))));

// By reference: a vector passed by value changes the ABI between levels (-Wpsabi).
inline void load(vf& v, const float* p) { std::memcpy(&v, p, sizeof v); }
inline void store(float* p, const vf& v) { std::memcpy(p, &v, sizeof v); }

alignas(64) const float kZeros[kB] = {};

struct Tile {
  const float* x;       ///< the image's first input channel block
  i64 cstride, Cb;      ///< floats per input channel block, blocks
  const i64* off;       ///< [tap][kP]: offset of the pixel's tap in a block, -1 for padding
  i64 T;                ///< taps
  const float* w;       ///< packed weights of the first output block, input block 0
  i64 wcb;              ///< packed floats per input block
  const float* bias;    ///< the first output block's bias (zero-padded), or null
  const float* res;     ///< residual at the tile's first pixel and block, or null
  bool relu;
  float* y;             ///< output at the tile's first pixel and block
  i64 ystride;          ///< floats per output channel block
  int np;               ///< pixels to store (the rest repeat the last one)
};

template <int NK>
void tile(const Tile& a) {
  constexpr int NV = NK * kNV;  // native vectors per pixel
  vf acc[kP][NV];
#pragma GCC unroll 8
  for (int p = 0; p < kP; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[p][v] = vf{};
  for (i64 cb = 0; cb < a.Cb; ++cb) {
    const float* xc = a.x + cb * a.cstride;
    const float* wc = a.w + cb * a.wcb;
    for (i64 t = 0; t < a.T; ++t) {
      const float* s[kP];
#pragma GCC unroll 8
      for (int p = 0; p < kP; ++p) {
        const i64 o = a.off[t * kP + p];
        s[p] = o >= 0 ? xc + o : kZeros;
      }
      const float* wt = wc + t * kB * kU;
      for (int c = 0; c < kB; ++c) {
        vf wv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) load(wv[v], wt + c * kU + v * kVL);
#pragma GCC unroll 8
        for (int p = 0; p < kP; ++p) {
          const float xv = s[p][c];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[p][v] += xv * wv[v];
        }
      }
    }
  }
  // The epilogue in the order of the unfused ops: (conv + bias) + residual, then relu.
  for (int p = 0; p < a.np; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // native vector v: output block v / kNV, lanes (v % kNV) * kVL onwards
      const i64 at = v / kNV * a.ystride + p * kB + v % kNV * kVL;
      vf r = acc[p][v], e;
      if (a.bias) load(e, a.bias + v * kVL), r += e;
      if (a.res) load(e, a.res + at), r += e;
      if (a.relu) r = r > 0 ? r : vf{};
      store(a.y + at, r);
    }
}

void run_tile(int nk, const Tile& a) {
  switch (nk) {
    case 1: return tile<1>(a);
#if CONVGRAPH_ISA_AVX512
    case 2: return tile<2>(a);
    case 3: return tile<3>(a);
    case 4: return tile<4>(a);
#endif
    default: return;
  }
}

}  // namespace

void blocked_conv_run(const ConvProblem& p, const float* x, const float* w, const float* bias, const float* residual,
                      bool relu, float* y, float* ws, const ConvContext& ctx) {
  const ConvGeometry g(p);
  const i64 Cb = (g.C + kB - 1) / kB, Kb = (g.K + kB - 1) / kB, Ku = (g.K + kU - 1) / kU, T = g.ker_numel;
  const i64 wcb = T * kB * kU;
  float* packed = ws;
  float* bp = ws + Ku * Cb * wcb;

  // Weights: packed[ku][cb][tap][c][64], zero past K and C; taps in logical order (the
  // storage index mirrored for a true convolution).
  std::vector<i64> wtap(static_cast<std::size_t>(T));
  for (i64 t0 = 0, t = 0; t0 < g.ker[0]; ++t0)
    for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
      for (i64 t2 = 0; t2 < g.ker[2]; ++t2, ++t)
        wtap[static_cast<std::size_t>(t)] = (g.wtap(0, t0) * g.ker[1] + g.wtap(1, t1)) * g.ker[2] + g.wtap(2, t2);
  parallel_over(ctx, Ku * Cb, [&](i64 begin, i64 end) {
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 ku = idx / Cb, cb = idx % Cb;
      float* out = packed + idx * wcb;
      for (i64 t = 0; t < T; ++t)
        for (i64 c = 0; c < kB; ++c)
          for (i64 kk = 0; kk < kU; ++kk) {
            const i64 k = ku * kU + kk, ci = cb * kB + c;
            out[(t * kB + c) * kU + kk] =
                k < g.K && ci < g.C ? w[(k * g.C + ci) * T + wtap[static_cast<std::size_t>(t)]] : 0.0f;
          }
    }
  });
  for (i64 k = 0; k < Ku * kU; ++k) bp[k] = bias && k < g.K ? bias[k] : 0.0f;

  const i64 in_block = g.in_numel * kB, out_block = g.out_numel * kB;
  parallel_over(ctx, g.N * Ku * g.out[0] * g.out[1], [&](i64 begin, i64 end) {
    std::vector<i64> off_buf(static_cast<std::size_t>(T * kP));  // [tap][pixel]
    i64* offs = off_buf.data();
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 o1 = idx % g.out[1], o0 = idx / g.out[1] % g.out[0];
      const i64 ku = idx / (g.out[1] * g.out[0]) % Ku, n = idx / (g.out[1] * g.out[0] * Ku);
      const int nb = static_cast<int>(std::min<i64>(kU / kB, Kb - ku * (kU / kB)));
      const i64 row = (o0 * g.out[1] + o1) * g.out[2];
      for (i64 ow0 = 0; ow0 < g.out[2]; ow0 += kP) {
        const int np = static_cast<int>(std::min<i64>(kP, g.out[2] - ow0));
        for (i64 t0 = 0, t = 0; t0 < g.ker[0]; ++t0)
          for (i64 t1 = 0; t1 < g.ker[1]; ++t1)
            for (i64 t2 = 0; t2 < g.ker[2]; ++t2, ++t) {
              const i64 i0 = o0 * g.stride[0] - g.pad[0] + t0 * g.dil[0];
              const i64 i1 = o1 * g.stride[1] - g.pad[1] + t1 * g.dil[1];
              const bool rows_in = i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1];
              for (int q = 0; q < kP; ++q) {
                const i64 i2 = (ow0 + std::min(q, np - 1)) * g.stride[2] - g.pad[2] + t2 * g.dil[2];
                offs[t * kP + q] = rows_in && i2 >= 0 && i2 < g.in[2] ? ((i0 * g.in[1] + i1) * g.in[2] + i2) * kB : -1;
              }
            }
        for (int sub = 0; sub < nb; sub += kNK) {
          const int nk = std::min(kNK, nb - sub);
          const i64 kb = ku * (kU / kB) + sub;
          const i64 at = (n * Kb + kb) * out_block + (row + ow0) * kB;
          Tile a{x + n * Cb * in_block, in_block, Cb, offs, T, packed + ku * Cb * wcb + sub * kB, wcb,
                 bias ? bp + kb * kB : nullptr, residual ? residual + at : nullptr, relu, y + at, out_block, np};
          run_tile(nk, a);
        }
      }
    }
  });
}

void blocked_pool_run(const detail::PoolParams& p, i64 planes, const i64* in, const i64* out, const float* x, float* y,
                      const ConvContext& ctx) {
  struct Span {
    i64 lo, hi, count;
  };
  // Each output position's window along each internal axis, clipped to the input; the
  // average divides by the clipped window, or the window clipped to the padded input.
  std::vector<Span> spans[3];
  for (int a = 0; a < 3; ++a)
    for (i64 o = 0; o < out[a]; ++o) {
      const i64 start = o * p.stride[a] - p.pad[a], end = start + p.window[a];
      const i64 lo = std::max<i64>(start, 0), hi = std::min(end, in[a]);
      spans[a].push_back({lo, hi, p.inc_pad ? std::min(end, in[a] + p.pad[a]) - start : hi - lo});
    }
  const bool is_max = p.mode == detail::PoolMode::max;
  const i64 in_plane = in[0] * in[1] * in[2] * kB, out_plane = out[0] * out[1] * out[2] * kB;
  parallel_over(ctx, planes * out[0] * out[1], [&](i64 begin, i64 end) {
    for (i64 idx = begin; idx < end; ++idx) {
      const i64 o1 = idx % out[1], o0 = idx / out[1] % out[0], pl = idx / (out[1] * out[0]);
      const Span &s0 = spans[0][static_cast<std::size_t>(o0)], &s1 = spans[1][static_cast<std::size_t>(o1)];
      const float* src = x + pl * in_plane;
      float* dst = y + pl * out_plane + (o0 * out[1] + o1) * out[2] * kB;
      for (i64 o2 = 0; o2 < out[2]; ++o2)
        for (int h = 0; h < kNV; ++h) {  // the block's native vectors
          const Span& s2 = spans[2][static_cast<std::size_t>(o2)];
          vf m{};
          bool first = true;
          for (i64 d = s0.lo; d < s0.hi; ++d)
            for (i64 r = s1.lo; r < s1.hi; ++r)
              for (i64 c = s2.lo; c < s2.hi; ++c) {
                vf v;
                load(v, src + ((d * in[1] + r) * in[2] + c) * kB + h * kVL);
                if (first) m = v;
                else if (is_max) m = (m == m) & ~(v <= m) ? v : m;  // the first NaN wins, as in max_pool
                else m += v;
                first = false;
              }
          if (!is_max) m /= static_cast<float>(s0.count * s1.count * s2.count);
          store(dst + o2 * kB + h * kVL, m);
        }
    }
  });
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
#include "backends/cpu/kernels/isa_end.hpp"
