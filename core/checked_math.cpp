#include "core/checked_math.hpp"

#include <sstream>

#include "convgraph/core/error.hpp"

namespace convgraph::detail {

namespace {
// "2147483648 * 2147483648 * 4" for a message: the factors of a size that does not fit.
std::string factors(const Shape& shape, std::size_t itemsize) {
  std::ostringstream os;
  bool first = true;
  for (auto d : shape) {
    if (d == 0 || d == -1) continue;
    os << (first ? "" : " * ") << d;
    first = false;
  }
  if (itemsize) os << (first ? "" : " * ") << itemsize;
  return os.str();
}

long double approx_product(const Shape& shape, std::size_t itemsize) {
  long double r = static_cast<long double>(itemsize ? itemsize : 1);
  for (auto d : shape)
    if (d > 0) r *= static_cast<long double>(d);
  return r;
}

// Product of the non-zero (and, for static shapes, known) dimensions times itemsize;
// false when it exceeds kMaxBytes. Negative dimensions are the caller's business.
bool fits(const Shape& shape, std::size_t itemsize) {
  std::int64_t n = static_cast<std::int64_t>(itemsize ? itemsize : 1);
  for (auto d : shape)
    if (d > 0 && __builtin_mul_overflow(n, d, &n)) return false;
  return true;
}

void check_negative(const Shape& shape, std::string_view op, std::int64_t lowest_ok) {
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < lowest_ok)
      throw ShapeError(msg(op, ": shape ", dims_text(shape), " has a negative dimension ", shape[i],
                           " at axis ", i, lowest_ok < 0 ? " (use -1 for unknown)" : ""));
}

bool has_zero(const Shape& shape) {
  for (auto d : shape)
    if (d == 0) return true;
  return false;
}
}  // namespace

std::string dims_text(const Shape& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

void throw_overflow(std::string_view op, std::string_view what, std::int64_t a, char sign, std::int64_t b) {
  throw ShapeError(msg(op, ": ", what, " overflows int64 (", a, ' ', sign, ' ', b, ")"));
}

std::int64_t checked_numel(const Shape& shape, std::string_view op) {
  check_negative(shape, op, 0);
  if (!fits(shape, 0))
    throw ShapeError(msg(op, ": shape ", shape_to_string(shape), " has more elements than fit in int64 (",
                         factors(shape, 0), ", about ", static_cast<double>(approx_product(shape, 0)), ")"));
  if (has_zero(shape)) return 0;
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::size_t checked_nbytes(const Shape& shape, DType dtype, std::string_view op) {
  const std::int64_t n = checked_numel(shape, op);
  const std::size_t item = dtype_size(dtype);
  if (!fits(shape, item))
    throw ShapeError(msg(op, ": ", dtype_name(dtype), shape_to_string(shape), " needs ", factors(shape, item),
                         " bytes (about ", static_cast<double>(approx_product(shape, item)),
                         "), more than the ", kMaxBytes, " bytes a tensor can address"));
  return static_cast<std::size_t>(n) * item;
}

void check_static_shape(const Shape& shape, DType dtype, std::string_view op) {
  check_negative(shape, op, -1);
  const std::size_t item = dtype_size(dtype);
  if (!fits(shape, item))
    throw ShapeError(msg(op, ": ", dtype_name(dtype), shape_to_string(shape), " needs at least ",
                         factors(shape, item), " bytes (about ", static_cast<double>(approx_product(shape, item)),
                         "), more than the ", kMaxBytes, " bytes a tensor can address"));
}

std::size_t checked_bytes(std::int64_t count, std::size_t itemsize, std::string_view op, std::string_view what) {
  if (count < 0) throw ShapeError(msg(op, ": ", what, " has a negative element count ", count));
  std::int64_t r;
  if (__builtin_mul_overflow(count, static_cast<std::int64_t>(itemsize), &r))
    throw ShapeError(msg(op, ": ", what, " needs ", count, " * ", itemsize, " bytes, more than the ", kMaxBytes,
                         " bytes a buffer can address"));
  return static_cast<std::size_t>(r);
}

std::size_t checked_bytes_mul(std::size_t a, std::size_t b, std::string_view op, std::string_view what) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r) || r > static_cast<std::size_t>(kMaxBytes))
    throw MemoryError(msg(op, ": ", what, " needs ", a, " * ", b, " bytes, more than the ", kMaxBytes,
                          " bytes a buffer can address"));
  return r;
}

std::size_t checked_bytes_add(std::size_t a, std::size_t b, std::string_view op, std::string_view what) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r) || r > static_cast<std::size_t>(kMaxBytes))
    throw MemoryError(msg(op, ": ", what, " needs ", a, " + ", b, " bytes, more than the ", kMaxBytes,
                          " bytes a buffer can address"));
  return r;
}

}  // namespace convgraph::detail
