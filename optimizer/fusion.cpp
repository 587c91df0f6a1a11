// Elementwise fusion: registered so that its place in the pipeline, its tags and its
// timing exist, but it rewrites nothing yet. Fusing chains of elementwise ops needs a
// composite op with its own loop kernel (Theano's Composite/Elemwise), which the runtime
// does not have; until it does, unfused elementwise ops simply run one after another.
#include "optimizer/passes.hpp"

namespace convgraph {

void register_fusion(RewriteDB& db) {
  db.add_phase("fusion", kFusionPos, {"fast_run"});
  db.add_global("fusion", "elemwise_fusion", {"fast_run"}, 0, [](RewriteContext&) {});
}

}  // namespace convgraph
