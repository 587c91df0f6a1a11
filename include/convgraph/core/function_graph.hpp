#pragma once
/// FunctionGraph: the private clone of a user graph that compilation rewrites in place.
#include <map>
#include <string>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

class FunctionGraph {
 public:
  /// Clones every node reachable from `outputs`; `inputs` must contain every graph input
  /// the outputs depend on (else ValueError naming the missing input).
  FunctionGraph(const std::vector<Var>& inputs, const std::vector<Var>& outputs);

  const std::vector<Var>& inputs() const { return inputs_; }
  const std::vector<Var>& outputs() const { return outputs_; }
  /// Every node reachable from the outputs, inputs first (deterministic).
  std::vector<Var> toposort() const;
  /// Nodes that use `v` as an input, with the argument position.
  std::vector<std::pair<Var, int>> clients(const Var& v) const;
  /// Makes every user of `old` (and the outputs) use `replacement` instead. The types must
  /// agree (dtype, rank, known dims): throws TypeError naming `reason` otherwise.
  void replace(const Var& old, const Var& replacement, const std::string& reason);
  /// Number of replacements made so far (for pass statistics).
  int replacements() const { return replacements_; }

 private:
  std::vector<Var> inputs_;
  std::vector<Var> outputs_;
  int replacements_ = 0;
};

}  // namespace convgraph
