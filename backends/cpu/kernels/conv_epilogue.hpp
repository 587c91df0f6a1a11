#pragma once
// Private to backends/cpu/kernels; include it after isa_begin.hpp. The fused epilogue of a
// forward convolution (ConvEpilogue), applied by an algorithm to a run of one output
// channel right after computing it, while it is still in cache.
#include <cstdint>

#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph::cpu::CONVGRAPH_ISA_NS {

template <class T, bool kBias, bool kResidual, bool kRelu>
inline void conv_epilogue_pass(T* y, T b, const T* r, std::int64_t len) {
  for (std::int64_t i = 0; i < len; ++i) {
    T v = y[i];
    if constexpr (kBias) v = v + b;
    if constexpr (kResidual) v = v + r[i];
    if constexpr (kRelu) v = v > T(0) ? v : T(0);
    y[i] = v;
  }
}

/// y[i] = act((y[i] + bias[k]) + residual[offset + i]), i in [0, len): the run of output
/// channel k that starts at flat element `offset` of y. The order of the additions and the
/// relu formula (v > 0 ? v : 0, so NaN gives 0) are those of the unfused ops, and a part
/// that is absent is skipped (not added as 0, which would turn -0 into +0).
template <class T>
inline void conv_epilogue_run(const ConvEpilogue& ep, T* y, std::int64_t offset, std::int64_t k, std::int64_t len) {
  const T b = ep.bias ? static_cast<const T*>(ep.bias)[k] : T(0);
  const T* r = ep.residual ? static_cast<const T*>(ep.residual) + offset : nullptr;
  const int variant = (ep.bias ? 4 : 0) | (r ? 2 : 0) | (ep.activation == ConvActivation::relu ? 1 : 0);
  switch (variant) {
    case 0: break;
    case 1: conv_epilogue_pass<T, false, false, true>(y, b, r, len); break;
    case 2: conv_epilogue_pass<T, false, true, false>(y, b, r, len); break;
    case 3: conv_epilogue_pass<T, false, true, true>(y, b, r, len); break;
    case 4: conv_epilogue_pass<T, true, false, false>(y, b, r, len); break;
    case 5: conv_epilogue_pass<T, true, false, true>(y, b, r, len); break;
    case 6: conv_epilogue_pass<T, true, true, false>(y, b, r, len); break;
    default: conv_epilogue_pass<T, true, true, true>(y, b, r, len); break;
  }
}

}  // namespace convgraph::cpu::CONVGRAPH_ISA_NS
