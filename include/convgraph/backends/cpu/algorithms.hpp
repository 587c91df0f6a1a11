#pragma once
/// Factories for the built-in CPU convolution algorithms. register_cpu.cpp lists them in
/// priority order; tests and benchmarks may build one directly. CPU algorithms split their
/// work over ConvContext::pool and run serially on the calling thread when it is null; the
/// result never depends on the number of threads.
#include <memory>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/reference.hpp"

namespace convgraph {

/// "cpu.depthwise": grouped convolutions with C/G == 1 and groups > 1 (any channel
/// multiplier), any rank,
/// every direction, float32/float64, no workspace; declines anything else.
/// Tags {"conv_direct", "fast_run", "fast_compile"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_depthwise_algorithm();
/// "cpu.corrmm": im2col + GEMM (float32: im2col fused into the GEMM's panel packing),
/// tags {"conv_gemm", "fast_run", "fast_compile"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_corrmm_algorithm();
/// "cpu.direct": register-blocked direct loops; the float32 channel-vectorised path uses a
/// workspace (packed weights, zero-padded source), the row engine none;
/// tags {"conv_direct", "fast_run", "fast_compile"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_direct_algorithm();
/// "cpu.winograd": F(4x4, 3x3) for 3x3 stride-1 convolutions on height and width (2D, any
/// dilation; 3D, any depth kernel/stride/dilation), every direction, float32,
/// tags {"conv_winograd", "fast_run"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_winograd_algorithm();
/// "cpu.fft": FFT convolution, stride 1, any rank/dilation/padding/groups/direction,
/// tags {"conv_fft"} (opt-in).
std::shared_ptr<const ConvAlgorithm> make_cpu_fft_algorithm();
/// "cpu.conv3d2d": 3D convolution as sums of 2D convolutions over depth (delegates the 2D
/// work to cpu.corrmm or cpu.direct), tags {"conv3d2d"} (opt-in).
std::shared_ptr<const ConvAlgorithm> make_cpu_conv3d2d_algorithm();

}  // namespace convgraph
