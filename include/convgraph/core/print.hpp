#pragma once
/// Graph printing: Theano-style debugprint text and Graphviz DOT.
#include <string>
#include <vector>

#include "convgraph/core/function_graph.hpp"
#include "convgraph/core/graph.hpp"

namespace convgraph {

/// Indented tree, one line per node: op (with parameters), user name, id, type and, for
/// lowered nodes, the chosen implementation. Shared sub-expressions print once, then
/// as a reference "*#id".
std::string debugprint(const std::vector<Var>& outputs);
std::string debugprint(const Var& output);
std::string debugprint(const FunctionGraph& graph);
/// Graphviz DOT text; nodes coloured by device, labelled with type and implementation.
std::string to_dot(const std::vector<Var>& outputs);
std::string to_dot(const FunctionGraph& graph);

}  // namespace convgraph
