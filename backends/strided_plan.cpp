// Host-side index plans for the CUDA DSL kernels (include/.../cuda/strided_plan.hpp).
// Compiled in every build so the plans are tested without a GPU or CUDA.
#include "backends/cuda/strided_plan.hpp"

#include <algorithm>
#include <limits>

#include "convgraph/core/error.hpp"
#include "convgraph/core/tensor.hpp"

namespace convgraph::gpu {

namespace {

/// Merges axis b into the axis before it when every stride list is contiguous across
/// the pair (stride[a] == stride[b] * shape[b]); `strides` holds one list per operand.
void collapse(std::vector<std::int64_t>& shape, std::vector<std::vector<std::int64_t>>& strides) {
  std::vector<std::int64_t> s;
  std::vector<std::vector<std::int64_t>> st(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool merge = !s.empty();
    for (std::size_t k = 0; merge && k < strides.size(); ++k)
      merge = st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].back() = strides[k][d];
    } else {
      s.push_back(shape[d]);
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(s);
  strides = std::move(st);
}

void check_rank(std::size_t rank, const char* what, const std::vector<std::int64_t>& shape) {
  if (rank > static_cast<std::size_t>(kMaxDims))
    throw ValueError(msg(what, ": shape ", shape_to_string(shape), " needs ", rank,
                         " axes after collapsing; the CUDA kernels index at most ", kMaxDims));
}

}  // namespace

BroadcastPlan plan_broadcast(const std::vector<std::vector<std::int64_t>>& ins,
                             const std::vector<std::int64_t>& out_shape) {
  if (ins.empty() || ins.size() > static_cast<std::size_t>(kMaxOperands))
    throw ValueError(msg("plan_broadcast: ", ins.size(), " operands; between 1 and ", kMaxOperands, " are supported"));
  BroadcastPlan p;
  p.operands = static_cast<int>(ins.size());
  p.total = numel(out_shape);
  if (p.total == 0) return p;  // nothing to launch
  const std::size_t R = out_shape.size();
  std::vector<std::vector<std::int64_t>> strides(ins.size(), std::vector<std::int64_t>(R, 0));
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const auto& s = ins[k];
    if (s.size() > R)
      throw ShapeError(msg("plan_broadcast: operand ", k, " of shape ", shape_to_string(s),
                           " has a higher rank than the output ", shape_to_string(out_shape)));
    const std::size_t lead = R - s.size();
    std::int64_t acc = 1;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == out_shape[i + lead]) strides[k][i + lead] = acc;
      else if (s[i] != 1)
        throw ShapeError(msg("plan_broadcast: operand ", k, " of shape ", shape_to_string(s),
                             " does not broadcast to ", shape_to_string(out_shape)));
      acc *= s[i];
    }
  }
  // Size-1 output axes index nothing.
  std::vector<std::int64_t> shape;
  std::vector<std::vector<std::int64_t>> kept(ins.size());
  for (std::size_t d = 0; d < R; ++d) {
    if (out_shape[d] == 1) continue;
    shape.push_back(out_shape[d]);
    for (std::size_t k = 0; k < ins.size(); ++k) kept[k].push_back(strides[k][d]);
  }
  collapse(shape, kept);
  check_rank(shape.size(), "plan_broadcast", out_shape);
  p.rank = static_cast<int>(shape.size());
  for (int d = 0; d < p.rank; ++d) {
    p.shape[d] = shape[static_cast<std::size_t>(d)];
    for (std::size_t k = 0; k < ins.size(); ++k) p.strides[k][d] = kept[k][static_cast<std::size_t>(d)];
  }
  return p;
}

std::vector<std::vector<std::int64_t>> broadcast_offsets(const BroadcastPlan& p) {
  std::vector<std::vector<std::int64_t>> r(static_cast<std::size_t>(p.operands));
  for (int k = 0; k < p.operands; ++k)
    for (std::int64_t i = 0; i < p.total; ++i) r[static_cast<std::size_t>(k)].push_back(plan_offset(p, k, i));
  return r;
}

ReducePlan plan_reduce(const std::vector<std::int64_t>& shape, const std::vector<int>& axes) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> red(shape.size(), false);
  for (int a : axes) {
    if (a < 0 || a >= rank)
      throw ValueError(msg("plan_reduce: axis ", a, " is out of range for shape ", shape_to_string(shape)));
    red[static_cast<std::size_t>(a)] = true;
  }
  const std::vector<std::int64_t> st = contiguous_strides(shape);
  std::vector<std::int64_t> ks, rs;
  std::vector<std::vector<std::int64_t>> kst(1), rst(1);
  ReducePlan p;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    (red[d] ? p.red_count : p.out_count) *= shape[d];
    if (shape[d] == 1) continue;
    (red[d] ? rs : ks).push_back(shape[d]);
    (red[d] ? rst[0] : kst[0]).push_back(st[d]);
  }
  if (p.out_count == 0 || p.red_count == 0) return p;  // the launcher handles empty cases
  collapse(ks, kst);
  collapse(rs, rst);
  check_rank(ks.size(), "plan_reduce (kept axes)", shape);
  check_rank(rs.size(), "plan_reduce (reduced axes)", shape);
  p.kept_rank = static_cast<int>(ks.size());
  p.red_rank = static_cast<int>(rs.size());
  for (int d = 0; d < p.kept_rank; ++d) {
    p.kept_shape[d] = ks[static_cast<std::size_t>(d)];
    p.kept_strides[d] = kst[0][static_cast<std::size_t>(d)];
  }
  for (int d = 0; d < p.red_rank; ++d) {
    p.red_shape[d] = rs[static_cast<std::size_t>(d)];
    p.red_strides[d] = rst[0][static_cast<std::size_t>(d)];
  }
  return p;
}

std::vector<int> sum_to_axes(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to) {
  if (to.size() > from.size())
    throw ShapeError(msg("sum_to: cannot reduce ", shape_to_string(from), " to ", shape_to_string(to)));
  const std::size_t lead = from.size() - to.size();
  std::vector<int> axes;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (i < lead || (to[i - lead] == 1 && from[i] != 1)) axes.push_back(static_cast<int>(i));
    else if (to[i - lead] != from[i])
      throw ShapeError(msg("sum_to: cannot reduce ", shape_to_string(from), " to ", shape_to_string(to)));
  }
  return axes;
}

int checked_int(std::int64_t v, const char* who, const char* what) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (v < 0 || v > kMax)
    throw ValueError(msg(who, ": ", what, " = ", v, " does not fit the 32-bit int the library takes (0..", kMax, ")"));
  return static_cast<int>(v);
}

}  // namespace convgraph::gpu
