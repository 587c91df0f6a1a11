#pragma once
// Private to the random draws (ops/random.cpp) and their CPU kernel
// (backends/cpu/random_kernels.cpp): what one call of a draw node computes.
#include <cstdint>

#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

enum class Distribution { uniform = 0, normal = 1, bernoulli = 2 };

/// One call of a draw node. Element i comes from Philox block i / per_block (4 values per
/// block in float32, 2 in float64), whose 128-bit counter is
///   (block bits 0-31, block bits 32-47 | call bits 32-47 << 16, call bits 0-31, draw key)
/// and whose key is the stream's 64-bit seed. uniform: a + (b - a) u; normal: mean a,
/// standard deviation b by Box-Muller on pairs of the block; bernoulli: 1 where u < a.
struct RandomDraw {
  Distribution dist = Distribution::uniform;
  double a = 0, b = 1;
  std::uint64_t seed = 0;
  std::uint32_t key = 0;   ///< the draw's index in its RandomStream
  std::uint64_t call = 0;  ///< how many times the node ran before this call
};

/// Values one Philox block yields in dtype t (4 for float32, 2 for float64).
inline std::int64_t values_per_block(DType t) { return t == DType::float64 ? 2 : 4; }

/// The next call of the draw op `op` (kernel key "random"): reads the stream's seed and
/// advances the node's call count.
RandomDraw next_draw(const Op& op);

}  // namespace convgraph::detail
