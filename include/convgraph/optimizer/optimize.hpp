#pragma once
/// The optimizer's entry point: runs the rewrite passes selected by `mode` on `graph`.
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/runtime/profile.hpp"

namespace convgraph {

/// Runs, in order: canonicalize, merge, constant folding, device placement, convolution
/// lowering, elementwise fusion, dead-code cleanup. Records per-pass seconds in stats.
/// Throws CompileError when a convolution cannot be lowered (naming node and tags).
void optimize(FunctionGraph& graph, const Mode& mode, CompileStats& stats);

}  // namespace convgraph
