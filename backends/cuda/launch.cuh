#pragma once
// Launch helpers shared by the .cu files (nvcc only).
#include "backends/cuda/cuda_check.hpp"

namespace convgraph::cuda::kernels {

inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

#define CG_GRID_STRIDE_LOOP(i, total)                                                              \
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < (total); \
       i += static_cast<long long>(gridDim.x) * blockDim.x)

}  // namespace convgraph::cuda::kernels
