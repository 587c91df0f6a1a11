// Reverse-mode autodiff: walk the graph from the cost back to the parameters, asking
// each op for the gradients of its inputs and summing contributions per variable.
#include "convgraph/ops/autodiff.hpp"

#include <unordered_map>
#include <unordered_set>

#include "convgraph/ops/math.hpp"

namespace convgraph {

namespace {
std::string describe(const Var& v) {
  std::string s = v.name().empty() ? "#" + std::to_string(v.node()->id) : "'" + v.name() + "'";
  return s + " " + v.type().to_string();
}
}  // namespace

std::vector<Var> grad(const Var& cost, const std::vector<Var>& wrt, Disconnected disconnected) {
  if (!cost.defined()) throw ValueError("grad: the cost is undefined");
  if (cost.rank() != 0)
    throw TypeError(msg("grad: the cost must be a scalar (rank 0), got ", describe(cost),
                        "; reduce it first, e.g. with mean() or sum()"));
  if (!is_float(cost.dtype())) throw TypeError(msg("grad: the cost must be a float scalar, got ", describe(cost)));
  for (std::size_t i = 0; i < wrt.size(); ++i)
    if (!wrt[i].defined()) throw ValueError(msg("grad: wrt[", i, "] is undefined"));

  const std::vector<Var> order = topological_order({cost});
  // Only nodes on a path from some wrt to the cost need gradients.
  std::unordered_set<const Node*> targets, relevant;
  for (const auto& w : wrt) targets.insert(w.node());
  for (const auto& v : order) {
    bool hit = targets.count(v.node()) > 0;
    for (const auto& in : v.inputs()) hit = hit || relevant.count(in.node()) > 0;
    if (hit) relevant.insert(v.node());
  }

  std::unordered_map<const Node*, Var> grads;
  grads[cost.node()] = ones_like(cost);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Var& v = *it;
    auto g = grads.find(v.node());
    if (g == grads.end() || !v.op()) continue;
    bool any = false;
    for (const auto& in : v.inputs()) any = any || relevant.count(in.node()) > 0;
    if (!any) continue;
    const std::vector<Var> gs = v.op()->grad(v.inputs(), v, g->second);
    if (gs.size() != v.inputs().size())
      throw TypeError(msg(v.op()->label(), ": grad returned ", gs.size(), " gradients for ", v.inputs().size(), " inputs"));
    for (std::size_t i = 0; i < gs.size(); ++i) {
      const Var& in = v.inputs()[i];
      if (!gs[i].defined() || !relevant.count(in.node())) continue;
      Var gi = gs[i].dtype() == in.dtype() ? gs[i] : cast(gs[i], in.dtype());
      auto [slot, fresh] = grads.try_emplace(in.node(), gi);
      if (!fresh) slot->second = slot->second + gi;
    }
  }

  std::vector<Var> result;
  for (const auto& w : wrt) {
    auto g = grads.find(w.node());
    if (g != grads.end()) {
      result.push_back(g->second);
    } else if (disconnected == Disconnected::zero) {
      result.push_back(zeros_like(w));
    } else {
      throw ValueError(msg("grad: the cost does not depend on ", describe(w),
                           " (pass Disconnected::zero to get zeros instead)"));
    }
  }
  return result;
}

Var grad(const Var& cost, const Var& wrt, Disconnected disconnected) {
  return grad(cost, std::vector<Var>{wrt}, disconnected)[0];
}

}  // namespace convgraph
