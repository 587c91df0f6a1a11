#include "convgraph/core/function_graph.hpp"

#include <unordered_map>
#include <unordered_set>

namespace convgraph {

FunctionGraph::FunctionGraph(const std::vector<Var>& inputs, const std::vector<Var>& outputs) {
  std::unordered_map<const Node*, Var> clone;
  std::unordered_set<const Node*> declared;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Var& in = inputs[i];
    if (!in.defined()) throw ValueError(msg("compile: input ", i, " is undefined"));
    if (in.is_shared())
      throw ValueError(msg("compile: input ", i, (in.name().empty() ? "" : " '" + in.name() + "'"),
                           " is a shared variable: its value comes from the variable at each call, so leave it"
                           " out of the inputs (use set_value to change it)"));
    if (!in.is_input())
      throw ValueError(msg("compile: input ", i, (in.name().empty() ? "" : " '" + in.name() + "'"),
                           " is not a graph input (it is computed by ", in.op() ? in.op()->label() : "a constant",
                           "); pass variables created with input()"));
    if (!declared.insert(in.node()).second)
      throw ValueError(msg("compile: input ", i, " '", in.name(), "' is listed twice"));
    auto n = std::make_shared<Node>(*in.node());
    clone.emplace(in.node(), Var(n));
    inputs_.push_back(Var(n));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].defined()) throw ValueError(msg("compile: output ", i, " is undefined"));
  for (const Var& v : topological_order(outputs)) {
    if (clone.count(v.node())) continue;
    if (v.is_input())
      throw ValueError(msg("compile: the outputs depend on input '", v.name(), "' ", v.type().to_string(),
                           " which is not in the list of inputs"));
    // The copy keeps a shared variable's SharedSlot pointer: the clone reads and updates
    // the very value the user's variable holds.
    auto n = std::make_shared<Node>(*v.node());
    for (auto& in : n->inputs) in = clone.at(in.node());
    clone.emplace(v.node(), Var(n));
  }
  for (const auto& o : outputs) outputs_.push_back(clone.at(o.node()));
}

std::vector<Var> FunctionGraph::toposort() const {
  std::vector<Var> order = topological_order(outputs_);
  // Inputs the outputs do not use still belong to the function's signature.
  std::unordered_set<const Node*> seen;
  for (const auto& v : order) seen.insert(v.node());
  std::vector<Var> result;
  for (const auto& in : inputs_)
    if (!seen.count(in.node())) result.push_back(in);
  result.insert(result.end(), order.begin(), order.end());
  return result;
}

std::vector<std::pair<Var, int>> FunctionGraph::clients(const Var& v) const {
  std::vector<std::pair<Var, int>> out;
  for (const auto& n : topological_order(outputs_))
    for (std::size_t i = 0; i < n.inputs().size(); ++i)
      if (n.inputs()[i].same(v)) out.emplace_back(n, static_cast<int>(i));
  return out;
}

void FunctionGraph::replace(const Var& old, const Var& replacement, const std::string& reason) {
  if (!old.defined() || !replacement.defined())
    throw ValueError(msg("FunctionGraph::replace (", reason, "): undefined variable"));
  if (old.same(replacement)) return;
  const TensorType& a = old.type();
  const TensorType& b = replacement.type();
  if (a.dtype != b.dtype || a.rank() != b.rank() || !a.accepts(b) || a.device != b.device)
    throw TypeError(msg("FunctionGraph::replace (", reason, "): replacement type ", b.to_string(),
                        " does not match ", a.to_string()));
  // Nodes the replacement is built from keep using `old` (replacing x by f(x) must not
  // make f(x) its own input).
  std::unordered_set<const Node*> inside;
  for (const auto& v : topological_order({replacement})) inside.insert(v.node());
  for (const auto& n : topological_order(outputs_)) {
    if (inside.count(n.node())) continue;
    for (auto& in : n.node()->inputs)
      if (in.same(old)) in = replacement;
  }
  for (auto& o : outputs_)
    if (o.same(old)) o = replacement;
  ++replacements_;
}

}  // namespace convgraph
