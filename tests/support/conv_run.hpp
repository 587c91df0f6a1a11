#pragma once
// Running one CPU convolution algorithm in a test the strict way: typed copies of the
// operands, the output (and the workspace) prefilled with NaN garbage so unwritten or
// accumulated-into outputs show up, and a check that the inputs were left alone.
#include <cstdint>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph {
class ThreadPool;
}

namespace convgraph::testing {

/// Values of x, w and y as doubles (exactly representable in float32 when made by the
/// fill helpers). Which one is the output depends on the direction.
struct ConvOperands {
  std::vector<double> x, w, y;
};

/// All three operands sized for p, filled with random_values (or integer_values).
ConvOperands make_operands(const ConvProblem& p, std::uint64_t seed, bool integers = false);

/// The operand the direction writes: y (forward), x (grad_inputs), w (grad_weights).
std::vector<double>& output_of(ConvOperands& ops, ConvDirection d);
const std::vector<double>& output_of(const ConvOperands& ops, ConvDirection d);

struct ConvRun {
  std::vector<double> out;  ///< the written operand, converted to double
  bool inputs_intact = true;
  std::size_t workspace = 0;
};

/// Runs `algo` on p (p.dtype float32 or float64) with the given operands. workspace_bytes
/// defaults to algo.workspace_bytes(p). pool may be null (serial).
ConvRun run_cpu_conv(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops,
                     ThreadPool* pool, std::size_t workspace_bytes = SIZE_MAX);

/// As run_cpu_conv for a float32 p, with x, w and y in allocate_host memory (64-byte
/// aligned, as the runtime's tensors are: large layers then take the kernels' streamed-store
/// paths); the written operand is NaN before the run. Returns it as doubles.
std::vector<double> run_cpu_conv_host(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops,
                                      ThreadPool* pool);

/// The reference result for the operands, computed in float64.
std::vector<double> reference_output(const ConvProblem& p, const ConvOperands& ops);

}  // namespace convgraph::testing
