#include "ops/kernel_util.hpp"

#include <algorithm>
#include <string>

namespace convgraph::detail {

std::vector<int> normalize_axes(std::vector<int> axes, int rank, const char* op) {
  const std::vector<int> given = axes;
  for (auto& a : axes) {
    const int orig = a;
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) throw ValueError(msg(op, ": axis ", orig, " is out of range for a rank-", rank, " tensor"));
  }
  std::sort(axes.begin(), axes.end());
  if (auto rep = std::adjacent_find(axes.begin(), axes.end()); rep != axes.end()) {
    std::string list;
    for (std::size_t i = 0; i < given.size(); ++i) list += (i ? ", " : "") + std::to_string(given[i]);
    throw ValueError(msg(op, ": repeated axis ", *rep, " in the axis list (", list, ") for a rank-", rank, " tensor"));
  }
  return axes;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == kUnknown) out[i] = db;
    else if (db == kUnknown || da == db) out[i] = da;
    else
      throw ShapeError(msg(op, ": shapes ", shape_to_string(a), " and ", shape_to_string(b),
                           " cannot be broadcast together (axis ", i, ": ", da, " vs ", db, ")"));
  }
  return out;
}

}  // namespace convgraph::detail
