// Cleanup after lowering: drop transfer round trips (x -> device -> x's device), then merge
// again (lowering and placement can create equal nodes, as Theano's merge2 at 49 handles).
// There is no separate dead-node sweep: a FunctionGraph is exactly what its outputs reach,
// so a replaced node with no other user is gone as soon as it is replaced.
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/transfer_op.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

void remove_transfer_round_trips(RewriteContext& ctx) {
  for (const Var& v : ctx.graph.toposort()) {
    const TransferOp* outer = as_transfer(v);
    if (!outer) continue;
    const Var& mid = v.inputs()[0];
    if (!as_transfer(mid)) continue;
    const Var& src = mid.inputs()[0];
    if (src.type().device == outer->target()) ctx.graph.replace(v, src, "remove_transfer_round_trips");
  }
}

}  // namespace

void register_cleanup(RewriteDB& db) {
  db.add_phase("cleanup", kCleanupPos, {"fast_run", "fast_compile"});
  db.add_global("cleanup", "remove_transfer_round_trips", {"fast_run", "fast_compile"}, 0,
                remove_transfer_round_trips);
  db.add_global("cleanup", "merge_again", {"fast_run", "fast_compile"}, 1,
                [](RewriteContext& ctx) { merge_graph(ctx.graph); });
}

}  // namespace convgraph
