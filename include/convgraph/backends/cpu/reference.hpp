#pragma once
/// The CPU reference convolution: the one oracle every other implementation, DebugMode and
/// the test sweeps are compared with. Plain loops over all three spatial axes (unused axes
/// have size 1), double accumulation, no workspace, no cleverness.
#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph {

/// Computes the direction of `p` on dense row-major host buffers: y from (x, w) for
/// forward, x (= dx) from (y = dy, w) for grad_inputs, w (= dw) from (x, y = dy) for
/// grad_weights. The written operand is fully overwritten. Storage dtype float32 or
/// float64 (accumulation is always in double, whatever p.compute says); anything else
/// throws TypeError.
void reference_conv(const ConvProblem& p, const ConvTensors& t);

/// "cpu.reference", tags {"conv_reference"}: registered last, never picked by fast_run.
std::shared_ptr<const ConvAlgorithm> make_cpu_reference_algorithm();

}  // namespace convgraph
