#pragma once
/// Shape manipulation: reshape, flatten, dimshuffle/transpose, concatenate, slicing.
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// New shape with at most one -1 (inferred). Copies data (no aliasing in graphs).
Var reshape(const Var& x, Shape shape);
/// Keeps the first ndim-1 axes and flattens the rest into the last (Theano's flatten).
Var flatten(const Var& x, int ndim = 1);
/// Theano's dimshuffle: a permutation of the axes, with -1 ('x') inserting a length-1 axis;
/// dropped axes must have length 1.
Var dimshuffle(const Var& x, std::vector<int> pattern);
/// Permutes the axes; empty = reverse them.
Var transpose(const Var& x, std::vector<int> axes = {});
Var concatenate(const std::vector<Var>& xs, int axis = 0);
/// Basic slicing x[begin:end:step] along one axis (negative indices count from the end).
Var slice(const Var& x, int axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1);
/// Reverses the given axes (used e.g. for filter flips).
Var flip(const Var& x, std::vector<int> axes);
/// Zero padding of the last axes, per axis (pre, post) - the adjoint of slicing.
Var pad(const Var& x, std::vector<std::pair<std::int64_t, std::int64_t>> pads);

}  // namespace convgraph
