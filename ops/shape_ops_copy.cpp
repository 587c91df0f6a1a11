// Shared helpers for the layout ops: argument checks and the strided-copy kernel.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "convgraph/core/thread_pool.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph::detail {

void check_arity(const Op& op, std::size_t got, std::size_t want) {
  if (got != want) throw ValueError(msg(op.label(), ": expected ", want, " inputs, got ", got));
}

int normalize_axis(const std::string& op, const char* arg, int axis, int rank) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw ShapeError(msg(op, ": ", arg, " ", axis, " is out of range for a rank-", rank, " input (valid: ", -rank, "..",
                         rank - 1, ")"));
  return a;
}

void check_dtype(const std::string& op, const char* arg, DType t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (d == t) return;
  std::ostringstream os;
  bool first = true;
  for (DType d : allowed) {
    os << (first ? "" : ", ") << dtype_name(d);
    first = false;
  }
  throw TypeError(msg(op, ": ", arg, " has dtype ", dtype_name(t), "; supported: ", os.str()));
}

namespace {
template <class V>
std::string join_ints(const V& v) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ')';
  return os.str();
}
}  // namespace

std::string ints_to_string(const std::vector<std::int64_t>& v) { return join_ints(v); }
std::string ints_to_string(const std::vector<int>& v) { return join_ints(v); }

namespace {
// Copies one row of n elements with the given strides; T only fixes the element width.
template <class T>
void copy_row(const char* src, std::int64_t ss, char* dst, std::int64_t ds, std::int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  if (ss == 1 && ds == 1) {
    std::memcpy(d, s, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}

using RowFn = void (*)(const char*, std::int64_t, char*, std::int64_t, std::int64_t);

RowFn row_kernel(std::size_t elem_size) {
  switch (elem_size) {
    case 1:
      return copy_row<std::uint8_t>;
    case 2:
      return copy_row<std::uint16_t>;
    case 4:
      return copy_row<std::uint32_t>;
    case 8:
      return copy_row<std::uint64_t>;
    default:
      break;
  }
  throw TypeError(msg("strided_copy: unsupported element size ", elem_size));
}
}  // namespace

void strided_copy(const void* src, const Shape& src_strides, void* dst, const Shape& dst_strides, const Shape& shape,
                  std::size_t elem_size, ThreadPool* pool) {
  const std::int64_t total = numel(shape);
  if (total == 0) return;
  const RowFn row = row_kernel(elem_size);
  const auto* s0 = static_cast<const char*>(src);
  auto* d0 = static_cast<char*>(dst);
  const auto es = static_cast<std::int64_t>(elem_size);
  if (shape.empty()) {
    row(s0, 1, d0, 1, 1);
    return;
  }
  const std::size_t r = shape.size();
  const std::int64_t inner = shape[r - 1];
  const std::int64_t rows = total / inner;
  // Each chunk decodes its first row index once, then walks the outer axes like an odometer.
  auto body = [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> idx(r - 1, 0);
    std::int64_t rem = begin, so = 0, dof = 0;
    for (std::size_t a = r - 1; a-- > 0;) {
      idx[a] = rem % shape[a];
      rem /= shape[a];
      so += idx[a] * src_strides[a];
      dof += idx[a] * dst_strides[a];
    }
    for (std::int64_t i = begin; i < end; ++i) {
      row(s0 + so * es, src_strides[r - 1], d0 + dof * es, dst_strides[r - 1], inner);
      for (std::size_t a = r - 1; a-- > 0;) {
        so += src_strides[a];
        dof += dst_strides[a];
        if (++idx[a] < shape[a]) break;
        so -= idx[a] * src_strides[a];
        dof -= idx[a] * dst_strides[a];
        idx[a] = 0;
      }
    }
  };
  // Small copies are not worth waking the pool.
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(inner, 1));
  if (pool && total >= 65536)
    pool->parallel_for(rows, body, grain);
  else
    body(0, rows);
}

SliceRange normalize_slice(std::int64_t n, std::int64_t begin, std::int64_t end, std::int64_t step) {
  SliceRange r;
  if (step > 0) {
    const std::int64_t b = begin < 0 ? std::max<std::int64_t>(begin + n, 0) : std::min(begin, n);
    const std::int64_t e = end < 0 ? std::max<std::int64_t>(end + n, 0) : std::min(end, n);
    r.first = b;
    r.count = e > b ? (e - b - 1) / step + 1 : 0;
  } else {
    const std::int64_t b = begin < 0 ? std::max<std::int64_t>(begin + n, -1) : std::min(begin, n - 1);
    const std::int64_t e = end < 0 ? std::max<std::int64_t>(end + n, -1) : std::min(end, n - 1);
    // |step| as unsigned: step may be INT64_MIN.
    const std::uint64_t mag = std::uint64_t{0} - static_cast<std::uint64_t>(step);
    r.first = b;
    r.count = b > e ? static_cast<std::int64_t>(static_cast<std::uint64_t>(b - e - 1) / mag) + 1 : 0;
  }
  return r;
}

}  // namespace convgraph::detail
