#pragma once
// Liveness-based arena planning: every intermediate value gets a byte offset in one
// arena so that values alive at the same time never overlap.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace convgraph::detail {

struct BufferRequest {
  std::size_t bytes = 0;
  int first = 0;  ///< step that writes the value
  int last = 0;   ///< last step that reads it (>= first)
};

struct ArenaPlan {
  std::vector<std::size_t> offsets;  ///< per request, 64-byte aligned
  std::size_t arena_bytes = 0;       ///< peak: the arena size
  std::size_t total_bytes = 0;       ///< sum of all requests (no reuse)
};

/// Greedy best-fit, largest first (as tinygrad's and Glow's planners do).
ArenaPlan plan_arena(const std::vector<BufferRequest>& requests);

}  // namespace convgraph::detail
