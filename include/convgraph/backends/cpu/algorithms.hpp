#pragma once
/// Factories for the built-in CPU convolution algorithms. register_cpu.cpp lists them in
/// priority order; tests and benchmarks may build one directly.
#include <memory>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/reference.hpp"

namespace convgraph {

/// "cpu.corrmm": im2col + GEMM, tags {"conv_gemm", "fast_run", "fast_compile"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_corrmm_algorithm();
/// "cpu.direct": register-blocked direct loops, no workspace,
/// tags {"conv_direct", "fast_run", "fast_compile"}.
std::shared_ptr<const ConvAlgorithm> make_cpu_direct_algorithm();

}  // namespace convgraph
