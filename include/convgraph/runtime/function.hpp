#pragma once
/// compile() turns a symbolic graph into a Function: optimize a private clone, check
/// that every node has a kernel, then plan its execution. Calling the Function runs the
/// schedule on host (or device) tensors, and applies its updates to shared variables.
#include <memory>
#include <string>
#include <vector>

#include "convgraph/core/function_graph.hpp"
#include "convgraph/core/graph.hpp"
#include "convgraph/core/shared.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/runtime/profile.hpp"

namespace convgraph {

class Function {
 public:
  /// Runs the compiled graph. Checks the number, dtypes and shapes of the arguments
  /// (RuntimeError/TypeError/ShapeError naming the input); a failed call leaves the
  /// Function usable. Safe to call from several threads at once: calls on one Function
  /// run one at a time (they share its buffers); every call returns tensors of its own.
  ///
  /// Shared variables the graph reads are read at the start of the call; after it, each
  /// update's value (computed from the values before the call) replaces its variable's.
  /// A call holds the mutex of every shared variable it reads or updates for its whole
  /// duration, taken in node-id order, so calls of different Functions that share a
  /// variable run one after the other, and get_value/set_value wait for a running call
  /// (they never see a half-applied set of updates). A tensor from get_value(borrow=true)
  /// is not protected: later calls may overwrite it. A call that fails after an in-place
  /// update ran may leave that variable updated and the others not.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  /// The optimized graph; its outputs are the function's outputs followed by the values
  /// of its updates, in order.
  const FunctionGraph& graph() const;
  const Mode& mode() const;
  /// One line per node: what it became and why (priority, timing, cache hit); then one
  /// line per update: the variable, its value's node, and "in place" or "swap".
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
/// fast_run). Throws CompileError when a node cannot be lowered to a kernel. Shared
/// variables are implicit inputs: they must not be listed in `inputs` (ValueError).
Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs,
                 const Mode& mode = Mode::from_env());

/// As above, and after each call stores every update's value in its shared variable
/// (Theano's `updates`). All values are computed from the values before the call, so
/// {a: b, b: a} swaps. No update is copied: where the value's node is an elementwise op
/// that is the last reader of the variable (and neither is an output), it is computed
/// directly into the variable's storage; otherwise its fresh buffer is swapped in. Only
/// a value that is also an output, an input, a constant, another variable or another
/// update's value is copied. Update values never live in the intermediate arena, so
/// peak_bytes() does not count them. Checks: each value's dtype must equal its
/// variable's (TypeError) and its shape too (ShapeError; unknown dimensions at the call),
/// naming both; a variable updated twice is a ValueError.
Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode,
                 const Updates& updates);

}  // namespace convgraph
