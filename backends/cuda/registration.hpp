#pragma once
/// Registration hooks and shared helpers of the CUDA convolution algorithms (private).
#include <cstddef>

#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph::cuda {

void register_cudnn_algorithms(AlgorithmRegistry& r);  ///< conv_cudnn.cpp, table order
void register_corrmm_algorithm(AlgorithmRegistry& r);  ///< conv_corrmm.cpp
void register_fft_algorithm(AlgorithmRegistry& r);     ///< conv_fft.cpp

/// Throws MemoryError naming `who` when the context's workspace is smaller than `needed`.
inline void check_workspace(const std::string& who, const ConvContext& ctx, std::size_t needed) {
  if (needed > 0 && (ctx.workspace == nullptr || ctx.workspace_bytes < needed))
    throw MemoryError(msg(who, ": needs ", needed, " bytes of workspace, got ", ctx.workspace_bytes,
                          ctx.workspace ? "" : " (null workspace)"));
}

}  // namespace convgraph::cuda
