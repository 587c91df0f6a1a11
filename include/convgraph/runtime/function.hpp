#pragma once
/// compile() turns a symbolic graph into a Function: optimize a private clone, check
/// that every node has a kernel, then plan its execution. Calling the Function runs the
/// schedule on host (or device) tensors.
#include <memory>
#include <string>
#include <vector>

#include "convgraph/core/function_graph.hpp"
#include "convgraph/core/graph.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/runtime/profile.hpp"

namespace convgraph {

class Function {
 public:
  /// Runs the compiled graph. Checks the number, dtypes and shapes of the arguments
  /// (RuntimeError/TypeError/ShapeError naming the input); a failed call leaves the
  /// Function usable. Safe to call from several threads at once: calls on one Function
  /// run one at a time (they share its buffers); every call returns tensors of its own.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  /// The optimized graph.
  const FunctionGraph& graph() const;
  const Mode& mode() const;
  /// One line per node: what it became and why (priority, timing, cache hit).
  std::string describe() const;
  /// Bytes of the intermediate-buffer arena of the last call's plan (after reuse) and
  /// the sum of the sizes of every intermediate tensor (without reuse). 0 before the
  /// first call. Like profile(), safe while other threads call the Function.
  std::size_t peak_bytes() const;
  std::size_t total_intermediate_bytes() const;
  /// Per-node statistics, collected when the mode has profile=true: a snapshot copy,
  /// taken between calls (never a half-recorded call).
  ProfileStats profile() const;
  /// Time spent in compile() per optimizer pass, and in total (seconds).
  const CompileStats& compile_stats() const;

  struct Impl;
  explicit Function(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

/// Compiles outputs as functions of inputs under `mode` (default: CONVGRAPH_FLAGS over
/// fast_run). Throws CompileError when a node cannot be lowered to a kernel.
Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs,
                 const Mode& mode = Mode::from_env());

}  // namespace convgraph
