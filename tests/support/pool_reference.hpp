#pragma once
// Test helpers shared by the pooling tests (tests/ops/test_pool*.cpp).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <convgraph/convgraph.hpp>

namespace convgraph::test {

/// Distinct values (a shuffled ramp) so every window has a unique maximum and finite
/// differences never cross a tie.
inline Tensor distinct_tensor(Shape shape, unsigned seed, DType dt = DType::float64) {
  Tensor t(dt, std::move(shape));
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * static_cast<double>(i) - 0.03 * static_cast<double>(v.size());
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<std::size_t>(i)]);
  return t;
}

/// Window starts along one axis, by the rule stated in words: with ignore_border a window
/// must fit in the padded input; without it, every window that starts inside the input
/// and is not preceded by one that already reached the end.
inline std::vector<std::int64_t> starts(std::int64_t n, std::int64_t w, std::int64_t s, std::int64_t p, bool ignore_border) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0;; ++i) {
    const bool ok = ignore_border ? i * s + w <= n + 2 * p : i * s < n && (i == 0 || (i - 1) * s + w < n);
    if (!ok) break;
    out.push_back(i * s);  // in padded coordinates
  }
  return out;
}

}  // namespace convgraph::test
