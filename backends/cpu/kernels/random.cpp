// The random draw loop (ops/random.cpp), compiled once per CPU level: Philox4x32-10
// blocks turned into uniform, normal (Box-Muller) or Bernoulli values.
// backends/cpu/random_kernels.cpp splits the blocks over the thread pool.
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels_nn.hpp"
#include "convgraph/core/error.hpp"
#include "ops/philox.hpp"
#include "ops/random_info.hpp"

#include "backends/cpu/kernels/isa_begin.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

namespace {

using detail::Distribution;
constexpr double kTwoPi = 6.283185307179586476925286766559;

// u in [0, 1) from 24 (float) or 53 (double) random bits: exact multiples of 2^-24 / 2^-53.
template <class T>
T unit(std::uint32_t hi, std::uint32_t lo) {
  if constexpr (sizeof(T) == 4) {
    (void)lo;
    return static_cast<float>(hi >> 8) * 0x1p-24f;
  } else {
    return static_cast<double>(((std::uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
  }
}

// The values of one block: 4 floats (one word each) or 2 doubles (two words each).
template <class T>
void block_values(const detail::RandomDraw& d, const detail::Philox4x32& w, T* v) {
  constexpr int per = sizeof(T) == 4 ? 4 : 2;
  T u[per];  // in [0, 1)
  for (int i = 0; i < per; ++i) {
    if constexpr (per == 4)
      u[i] = unit<T>(w[static_cast<std::size_t>(i)], 0);
    else
      u[i] = unit<T>(w[static_cast<std::size_t>(2 * i)], w[static_cast<std::size_t>(2 * i + 1)]);
  }
  switch (d.dist) {
    case Distribution::normal:
      // Box-Muller on each pair: the radius from the first value (taken in (0, 1] so its
      // log is finite), the angle from the second.
      for (int i = 0; i < per; i += 2) {
        const double u1 = 1.0 - static_cast<double>(u[i]);
        const double r = std::sqrt(-2.0 * std::log(u1)), th = kTwoPi * static_cast<double>(u[i + 1]);
        v[i] = static_cast<T>(d.a + d.b * r * std::cos(th));
        v[i + 1] = static_cast<T>(d.a + d.b * r * std::sin(th));
      }
      return;
    case Distribution::bernoulli:
      for (int i = 0; i < per; ++i) v[i] = static_cast<double>(u[i]) < d.a ? T(1) : T(0);
      return;
    case Distribution::uniform:
      for (int i = 0; i < per; ++i) {
        T x = static_cast<T>(d.a + (d.b - d.a) * static_cast<double>(u[i]));
        // Rounding may reach high; the interval is half-open.
        if (x >= static_cast<T>(d.b) && static_cast<T>(d.a) < static_cast<T>(d.b))
          x = std::nextafter(static_cast<T>(d.b), static_cast<T>(d.a));
        v[i] = x;
      }
      return;
  }
}

template <class T>
void fill_blocks(const detail::RandomDraw& d, T* out, std::int64_t n, std::int64_t b0, std::int64_t b1) {
  constexpr std::int64_t per = sizeof(T) == 4 ? 4 : 2;
  const auto seed_lo = static_cast<std::uint32_t>(d.seed), seed_hi = static_cast<std::uint32_t>(d.seed >> 32);
  const auto call_mid = static_cast<std::uint32_t>((d.call >> 32) & 0xffffu) << 16;
  for (std::int64_t b = b0; b < b1; ++b) {
    const auto ub = static_cast<std::uint64_t>(b);
    const detail::Philox4x32 ctr = {static_cast<std::uint32_t>(ub),
                                    static_cast<std::uint32_t>((ub >> 32) & 0xffffu) | call_mid,
                                    static_cast<std::uint32_t>(d.call), d.key};
    T v[per];
    block_values<T>(d, detail::philox4x32_10(ctr, seed_lo, seed_hi), v);
    const std::int64_t base = b * per;
    const std::int64_t m = n - base < per ? n - base : per;
    for (std::int64_t i = 0; i < m; ++i) out[base + i] = v[i];
  }
}

}  // namespace

void random_blocks(const detail::RandomDraw& d, DType t, void* out, std::int64_t n, std::int64_t b0,
                   std::int64_t b1) {
  if (t == DType::float32) return fill_blocks(d, static_cast<float*>(out), n, b0, b1);
  if (t == DType::float64) return fill_blocks(d, static_cast<double*>(out), n, b0, b1);
  throw TypeError(msg("random: no kernel for dtype ", dtype_name(t)));
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS

#include "backends/cpu/kernels/isa_end.hpp"
