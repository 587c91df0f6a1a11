#pragma once
/// Shape manipulation: reshape, flatten, dimshuffle/transpose, concatenate, slicing,
/// flipping and zero padding. Every op copies its input (graph values never alias) and
/// works on every dtype. Each has a gradient; ops whose gradient needs the input's shape
/// at run time (reshape, slice, concatenate) take it from the input itself.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// Slice bounds meaning "through the last element" (step > 0) and "through the first
/// element" (step < 0), like Python's omitted bounds.
inline constexpr std::int64_t kSliceEnd = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kSliceBegin = std::numeric_limits<std::int64_t>::min();

/// New shape with at most one -1 (inferred). Copies data (no aliasing in graphs).
Var reshape(const Var& x, Shape shape);
/// x's elements in the run-time shape of `like` (same element count); the gradient of
/// reshape/flatten, usable when shapes are known only at run time.
Var reshape_like(const Var& x, const Var& like);
/// Keeps the first ndim-1 axes and flattens the rest into the last (Theano's flatten).
Var flatten(const Var& x, int ndim = 1);
/// Theano's dimshuffle: a permutation of the axes, with -1 ('x') inserting a length-1 axis;
/// dropped axes must have length 1.
Var dimshuffle(const Var& x, std::vector<int> pattern);
/// Permutes the axes; empty = reverse them. Negative axes count from the end.
Var transpose(const Var& x, std::vector<int> axes = {});
/// Joins along `axis` (negative counts from the end); same dtype and rank, other
/// dimensions equal.
Var concatenate(const std::vector<Var>& xs, int axis = 0);
/// Basic slicing x[begin:end:step] along one axis, with numpy's rules: negative indices
/// count from the end, out-of-range bounds are clamped, step may be negative (not 0).
Var slice(const Var& x, int axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1);
/// Reverses the given axes (used e.g. for filter flips).
Var flip(const Var& x, std::vector<int> axes);
/// Zero padding of the last axes, per axis (pre, post) - the adjoint of slicing.
/// pads.size() <= rank; pads[0] applies to axis rank - pads.size().
Var pad(const Var& x, std::vector<std::pair<std::int64_t, std::int64_t>> pads);

}  // namespace convgraph
