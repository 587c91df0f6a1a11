#pragma once
/// Private helpers shared by the shape, dot, softmax and pooling ops: argument checks that
/// produce the project's error messages, and one strided-copy kernel that every layout op
/// (dimshuffle, slice, flip, concatenate, pad and their gradients) reduces to.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph::detail {

/// Throws ValueError unless `inputs` has exactly n entries (ops are built by our own
/// constructors, so this guards direct Op use and graph rewrites).
void check_arity(const Op& op, std::size_t got, std::size_t want);

/// Maps a possibly negative axis into [0, rank); ShapeError naming op and argument otherwise.
int normalize_axis(const std::string& op, const char* arg, int axis, int rank);

/// Throws TypeError unless `t` is one of `allowed`.
void check_dtype(const std::string& op, const char* arg, DType t, std::initializer_list<DType> allowed);

/// "(1, 2, 3)" for parameter lists in messages and params() text.
std::string ints_to_string(const std::vector<std::int64_t>& v);
std::string ints_to_string(const std::vector<int>& v);

/// True when two static dimensions may be equal (either unknown, or the same value).
inline bool dims_compatible(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

/// Copies `shape`-many elements of `elem_size` bytes from `src` (element strides
/// `src_strides`, possibly negative or zero) to `dst` (strides `dst_strides`). Pointers
/// point at the element with index (0, ..., 0). Parallel over rows when `pool` is set.
void strided_copy(const void* src, const Shape& src_strides, void* dst, const Shape& dst_strides, const Shape& shape,
                  std::size_t elem_size, ThreadPool* pool);

/// Numpy slice normalisation for an axis of length n: first index and element count.
struct SliceRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
};
SliceRange normalize_slice(std::int64_t n, std::int64_t begin, std::int64_t end, std::int64_t step);

}  // namespace convgraph::detail
