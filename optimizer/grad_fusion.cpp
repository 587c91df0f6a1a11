// Gradient fusion: relu's gradient fused into max pooling's gradient. In a training graph
// relu(z) followed by max pooling differentiates to
//   where(h > 0, max_pool_grad(h, gy), 0)      (h = relu(z); the 0 a zeros_like or a scalar)
// two passes over h's size and a buffer between them. max pooling's gradient puts each gy
// on its window's maximum, which is the h the mask reads there, so one pass masks gy by
// that maximum instead (max_pool<d>d_grad+relu_grad; ops/pool_internal.hpp, relu_grad):
// the same values bit for bit. Runs in the fusion phase before elementwise fusion, which
// would otherwise take the comparison and the where into a group of their own.
#include "convgraph/core/function_graph.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/pool_internal.hpp"
#include "ops/reduce_info.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

using detail::ElementwiseInfo;

/// A rank-0 constant or a fill_like(...) whose every element is `value`.
bool is_fill(const Var& v, double value) {
  if (v.is_constant()) return v.rank() == 0 && v.constant_value()->get(0) == value;
  return v.op() && v.op()->kernel_key() == "fill" && detail::fill_value(*v.op()) == value;
}

/// h when c is h > 0.
Var positive_of(const Var& c) {
  if (!c.op()) return Var();
  const ElementwiseInfo info = detail::elementwise_info(*c.op());
  if (info.cls != ElementwiseInfo::Class::binary || info.binary != detail::BinaryKind::gt) return Var();
  return is_fill(c.inputs()[1], 0.0) ? c.inputs()[0] : Var();
}

void fuse_relu_into_pool_grad(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  for (const Var& w : graph.toposort()) {
    if (!w.op() || detail::elementwise_info(*w.op()).cls != ElementwiseInfo::Class::where) continue;
    const Var &cond = w.inputs()[0], &gx = w.inputs()[1];
    const Var h = positive_of(cond);
    if (!h.defined() || !is_fill(w.inputs()[2], 0.0) || !gx.op() || gx.op()->kernel_key() != "pool_grad") continue;
    detail::PoolParams p = detail::pool_params(*gx.op());
    if (p.mode != detail::PoolMode::max || p.relu_grad || !gx.inputs()[0].same(h)) continue;
    if (!(w.type() == gx.type()) || gx.type().device != DeviceKind::cpu || !is_float(gx.dtype())) continue;
    // The unmasked gradient must be needed nowhere else (zeros_like(gx), the where's own
    // zero, only reads its shape).
    bool elsewhere = false;
    for (const auto& [c, i] : graph.clients(gx)) elsewhere = elsewhere || !(c.same(w) || c.same(w.inputs()[2]));
    for (const auto& o : graph.outputs()) elsewhere = elsewhere || o.same(gx);
    if (elsewhere) continue;
    p.relu_grad = true;
    graph.replace(w, detail::pool_grad(p, h, gx.inputs()[1]), ctx.current);
  }
}

}  // namespace

void register_grad_fusion(RewriteDB& db) {
  // Before elemwise_fusion (position 0) in the same phase.
  db.add_global("fusion", "pool_grad_relu_fusion", {"fast_run", "grad_fusion"}, -3, fuse_relu_into_pool_grad);
}

}  // namespace convgraph
