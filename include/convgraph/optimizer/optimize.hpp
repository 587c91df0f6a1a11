#pragma once
/// The optimizer's entry point, called by compile() on its private FunctionGraph clone.
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/optimizer/rewrite_db.hpp"
#include "convgraph/optimizer/compile_stats.hpp"

namespace convgraph {

/// Rewrites `graph` in place under `mode`: canonicalize, merge, constant folding, device
/// placement, convolution lowering (conv_meta first when included, then priority), fusion
/// and cleanup - each phase and rewrite selected by the mode's tags - and appends each
/// phase's seconds to stats.pass_seconds and decisions to stats.notes. optimizer=None runs
/// no phase. Throws
///   FlagError    for an unknown tag in optimizer_including/excluding/requiring or the
///                metaopt lists (with "did you mean");
///   DeviceError  for device=cuda without a usable GPU (the CUDA reason);
///   CompileError when cuDNN is requested (optimizer_including/requiring=cudnn) but cannot
///                be used, or when an abstract node is left afterwards - naming the node,
///                the tags that could lower it, the excluded tags and why each candidate
///                algorithm declined.
/// The tuning cache is saved even when a later check throws.
void optimize(FunctionGraph& graph, const Mode& mode, CompileStats& stats);

/// The tag query the rewrite phases run under (the preset plus optimizer_including, minus
/// optimizer_excluding). optimizer_requiring applies to algorithm choice only: requiring a
/// tag such as cudnn must not switch off canonicalize or merge, which carry no conv tag.
TagQuery rewrite_query(const Mode& mode);

}  // namespace convgraph
