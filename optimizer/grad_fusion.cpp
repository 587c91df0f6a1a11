// Gradient fusion: relu's gradient fused into max pooling's gradient (and into batch
// norm's, below). In a training graph
// relu(z) followed by max pooling differentiates to
//   where(h > 0, max_pool_grad(h, gy), 0)      (h = relu(z); the 0 a zeros_like or a scalar)
// two passes over h's size and a buffer between them. max pooling's gradient puts each gy
// on its window's maximum, which is the h the mask reads there, so one pass masks gy by
// that maximum instead (max_pool<d>d_grad+relu_grad; ops/pool_internal.hpp, relu_grad):
// the same values bit for bit. Runs in the fusion phase before elementwise fusion, which
// would otherwise take the comparison and the where into a group of their own.
#include "convgraph/core/function_graph.hpp"
#include "ops/batch_norm_info.hpp"
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

/// A batch-norm training gradient (sums or dx) that takes gy as its input 1.
bool is_bn_train_grad(const Var& v) {
  if (!v.op() || (v.op()->kernel_key() != "batch_norm_grad_sums" && v.op()->kernel_key() != "batch_norm_grad_x"))
    return false;
  const detail::BnInfo info = detail::bn_info(*v.op());
  return info.train && info.kind != detail::BnKind::forward && info.kind != detail::BnKind::stats;
}

// relu's gradient into batch norm's: bn -> relu differentiates to
//   gy = where(h > 0, g, 0);  sums = grad_sums(x, gy, stats);  dx = grad_x(x, gy, ..., sums)
// a pass that writes gy and two that read it back. With the mask h as their last input
// the two gradient passes read g and h instead (batch_norm_train_grad_*+relu_grad), one
// pass and a buffer fewer, the same bits.
void fuse_relu_into_bn_grad(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  for (const Var& n : graph.toposort()) {
    if (!is_bn_train_grad(n) || detail::bn_info(*n.op()).relu) continue;
    const Var w = n.inputs()[1];
    if (!w.op() || detail::elementwise_info(*w.op()).cls != ElementwiseInfo::Class::where) continue;
    const Var h = positive_of(w.inputs()[0]), g = w.inputs()[1];
    if (!h.defined() || !is_fill(w.inputs()[2], 0.0) || !(w.type() == g.type()) || !(h.type() == g.type())) continue;
    if (w.type().device != DeviceKind::cpu || !is_float(w.dtype())) continue;
    // g made by elementwise ops (a sum of gradients) would fuse into the where, and its
    // own pass would cost more than the where does.
    if (g.op() && detail::elementwise_info(*g.op()).cls != ElementwiseInfo::Class::none) continue;
    // gy itself must be needed by this batch norm's two gradients only: the gradients of
    // two batch norms (a residual sum's relu) would read g and h four times, more than the
    // where's own pass costs.
    bool elsewhere = false;
    for (const auto& [c, i] : graph.clients(w))
      elsewhere = elsewhere || i != 1 || !is_bn_train_grad(c) || !c.inputs()[0].same(n.inputs()[0]);
    for (const auto& o : graph.outputs()) elsewhere = elsewhere || o.same(w);
    if (elsewhere) continue;
    detail::BnInfo info = detail::bn_info(*n.op());
    info.relu = true;
    std::vector<Var> in = n.inputs();
    in[1] = g;
    in.push_back(h);
    graph.replace(n, detail::batch_norm_node(info, std::move(in)), ctx.current);
  }
}

}  // namespace

void register_grad_fusion(RewriteDB& db) {
  // Before elemwise_fusion (position 0) in the same phase.
  db.add_global("fusion", "pool_grad_relu_fusion", {"fast_run", "grad_fusion"}, -3, fuse_relu_into_pool_grad);
  db.add_global("fusion", "bn_grad_relu_fusion", {"fast_run", "grad_fusion"}, -2.9, fuse_relu_into_bn_grad);
}

}  // namespace convgraph
