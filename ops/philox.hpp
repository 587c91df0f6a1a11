#pragma once
// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC'11; the Random123 library). A pure function of a
// 128-bit counter and a 64-bit key: element i of a draw needs no state but its counter, so
// any thread computes any element and the values do not depend on the thread count.
//
// One round maps counter (c0, c1, c2, c3) with key (k0, k1) to
//   (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
// where hi/lo are the halves of the 64-bit product. Ten rounds; between rounds the key is
// bumped by the Weyl constants W0, W1. The constants (the paper's table 2 and Random123's
// philox.h): M0 = 0xD2511F53, M1 = 0xCD9E8D57 (multipliers chosen for avalanche),
// W0 = 0x9E3779B9 (golden ratio), W1 = 0xBB67AE85 (sqrt(3) - 1), both times 2^32.
// tests/ops/test_random.cpp checks the published known-answer vectors.
#include <array>
#include <cstdint>

namespace convgraph::detail {

using Philox4x32 = std::array<std::uint32_t, 4>;

constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

constexpr Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const std::uint64_t p0 = std::uint64_t{kPhiloxM0} * c[0];
    const std::uint64_t p1 = std::uint64_t{kPhiloxM1} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
  }
  return c;
}

}  // namespace convgraph::detail
