#pragma once
/// Checked size arithmetic (internal). Every element count, byte size and shape product
/// that convgraph computes goes through these helpers, so an overflow is a ShapeError
/// naming the op and the values, never a wrap-around; a negative dimension is refused.
///
/// The rule for a shape: the product of its non-zero dimensions, times the item size,
/// must fit in int64. That bounds the element count, the byte size, every contiguous
/// stride and every byte offset, so code past these checks may multiply freely.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "convgraph/core/dtype.hpp"
#include "convgraph/core/tensor.hpp"  // Shape

namespace convgraph::detail {

/// The largest byte size (and element count) a tensor or buffer may have.
inline constexpr std::int64_t kMaxBytes = std::numeric_limits<std::int64_t>::max();

/// a * b, a + b, a - b in int64. On overflow: ShapeError "<op>: <what> overflows int64
/// (a * b)". The fast paths are inline; only the throw is out of line.
[[noreturn]] void throw_overflow(std::string_view op, std::string_view what, std::int64_t a, char sign,
                                 std::int64_t b);
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view op, std::string_view what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow(op, what, a, '*', b);
  return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view op, std::string_view what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_overflow(op, what, a, '+', b);
  return r;
}
inline std::int64_t checked_sub(std::int64_t a, std::int64_t b, std::string_view op, std::string_view what) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) throw_overflow(op, what, a, '-', b);
  return r;
}

/// Non-throwing forms for planners that answer "does not fit" rather than raise: false on
/// overflow (out is then unspecified).
inline bool try_mul(std::int64_t a, std::int64_t b, std::int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
inline bool try_add(std::int64_t a, std::int64_t b, std::int64_t& out) { return !__builtin_add_overflow(a, b, &out); }

/// floor(a / b) for b > 0, any a (Python's //), without negating a.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

/// "(-2, 3)": a shape with its raw values (shape_to_string prints negatives as '?'),
/// for messages about bad dimensions.
std::string dims_text(const Shape& shape);

/// Element count of a concrete shape. ShapeError naming `op` when a dimension is negative
/// or the shape overflows (see the rule above).
std::int64_t checked_numel(const Shape& shape, std::string_view op);
/// Byte size of a concrete shape of `dtype`; ShapeError when a dimension is negative or the
/// byte size exceeds kMaxBytes (the message names the shape, dtype and bytes).
std::size_t checked_nbytes(const Shape& shape, DType dtype, std::string_view op);
/// For static types: checks the known dimensions (kUnknown = -1 is skipped; anything below
/// -1 is a ShapeError) by the same rule, so a value of this type can ever exist.
void check_static_shape(const Shape& shape, DType dtype, std::string_view op);
/// count * itemsize as a byte size; ShapeError naming `op` and `what` past kMaxBytes.
std::size_t checked_bytes(std::int64_t count, std::size_t itemsize, std::string_view op, std::string_view what);
/// Byte sums and products for workspace layouts: MemoryError naming `op` past kMaxBytes
/// (such a workspace could never be allocated).
std::size_t checked_bytes_mul(std::size_t a, std::size_t b, std::string_view op, std::string_view what);
std::size_t checked_bytes_add(std::size_t a, std::size_t b, std::string_view op, std::string_view what);

}  // namespace convgraph::detail
