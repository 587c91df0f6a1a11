// Reductions (sum, mean, max, min over axes) and the broadcasting helpers autodiff
// needs: sum_to (undo a broadcast), broadcast_to (undo a reduction), fills.
#include <algorithm>

#include "convgraph/ops/math.hpp"
#include "ops/kernel_util.hpp"
#include "ops/reduce_info.hpp"

namespace convgraph {

using detail::BroadcastAttrs;
using detail::ReduceAttrs;
using detail::ReduceKind;
using detail::reduce_name;

namespace {

std::string axes_text(const std::vector<int>& axes) {
  std::string s = "axes=(";
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + std::to_string(axes[i]);
  return s + ")";
}

class ReduceOp final : public Op {
 public:
  ReduceOp(ReduceKind k, std::vector<int> axes, bool keepdims) : attrs_{k, std::move(axes)}, keepdims_(keepdims) {}
  std::string name() const override { return reduce_name(attrs_.kind); }
  std::string params() const override { return axes_text(attrs_.axes) + (keepdims_ ? " keepdims" : ""); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    const ReduceKind kind = attrs_.kind;
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input, got ", in.size()));
    const TensorType& x = in[0];
    for (int a : attrs_.axes)
      if (a >= x.rank()) throw ValueError(msg(name(), ": axis ", a, " is out of range for input ", x.to_string()));
    if (x.dtype == DType::boolean && kind != ReduceKind::max && kind != ReduceKind::min)
      throw TypeError(msg(name(), ": cannot reduce a bool tensor; cast it first"));
    if (kind == ReduceKind::mean && !is_float(x.dtype))
      throw TypeError(msg("mean: input must be a float tensor, got ", x.to_string()));
    TensorType out = x;
    out.shape.clear();
    for (int i = 0; i < x.rank(); ++i) {
      const bool red = std::find(attrs_.axes.begin(), attrs_.axes.end(), i) != attrs_.axes.end();
      if (!red) out.shape.push_back(x.shape[static_cast<std::size_t>(i)]);
      else if (keepdims_) out.shape.push_back(1);
    }
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  std::string_view kernel_key() const override { return "reduce"; }
  const ReduceAttrs& attrs() const { return attrs_; }

 private:
  ReduceAttrs attrs_;
  bool keepdims_;
};

// Broadcasts g to like's run-time shape (see BroadcastAttrs).
class BroadcastToOp final : public Op {
 public:
  BroadcastToOp(std::vector<int> inserted, bool mean) : attrs_{std::move(inserted), mean} {}
  std::string name() const override { return attrs_.mean ? "broadcast_mean_grad" : "broadcast_to"; }
  std::string params() const override { return axes_text(attrs_.inserted); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg(name(), ": expects (value, like), got ", in.size(), " inputs"));
    TensorType out = in[1];
    out.dtype = in[0].dtype;
    const Shape g = attrs_.source_shape(in[0].shape, in[1].rank());
    detail::broadcast_shapes(g, in[1].shape, name());  // validates
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    const std::vector<int>& inserted = attrs_.inserted;
    Var G = g;
    if (attrs_.mean)  // d(g / count)/dg = 1 / count, broadcast the same way as the forward
      G = g * apply(std::make_shared<BroadcastToOp>(inserted, true), {ones_like(in[0]), in[1]});
    return {inserted.empty() ? sum_to(G, in[0]) : sum(G, inserted, false), Var()};
  }
  std::string_view kernel_key() const override { return "broadcast_to"; }
  const BroadcastAttrs& attrs() const { return attrs_; }

 private:
  BroadcastAttrs attrs_;
};

// Sums g over the axes along which a value of type `like` was broadcast to g's shape.
class SumToOp final : public Op {
 public:
  std::string name() const override { return "sum_to"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 2) throw ValueError(msg("sum_to: expects (value, like), got ", in.size(), " inputs"));
    if (in[1].rank() > in[0].rank())
      throw ShapeError(msg("sum_to: target ", in[1].to_string(), " has a higher rank than ", in[0].to_string()));
    TensorType out = in[1];
    out.dtype = in[0].dtype;
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override {
    return {broadcast_like(g, in[0]), Var()};
  }
  std::string_view kernel_key() const override { return "sum_to"; }
};

class FillLikeOp final : public Op {
 public:
  explicit FillLikeOp(double v) : value_(v) {}
  std::string name() const override { return value_ == 0 ? "zeros_like" : value_ == 1 ? "ones_like" : "fill_like"; }
  std::string params() const override { return std::to_string(value_); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    if (in.size() != 1) throw ValueError(msg(name(), ": expects 1 input"));
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var&) const override { return {Var()}; }
  std::string_view kernel_key() const override { return "fill"; }
  double value() const { return value_; }

 private:
  double value_;
};

Var reduce(ReduceKind k, const Var& x, std::vector<int> axes, bool keepdims) {
  if (!x.defined()) throw ValueError(msg(reduce_name(k), ": undefined variable"));
  if (axes.empty())
    for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  axes = detail::normalize_axes(std::move(axes), x.rank(), reduce_name(k));
  return apply(std::make_shared<ReduceOp>(k, std::move(axes), keepdims), {x});
}

std::vector<Var> ReduceOp::grad(const std::vector<Var>& in, const Var& out, const Var& g) const {
  const Var& x = in[0];
  if (!is_float(x.dtype())) return {Var()};
  const std::vector<int> inserted = keepdims_ ? std::vector<int>{} : attrs_.axes;
  auto back = [&](const Var& v, bool mean) { return apply(std::make_shared<BroadcastToOp>(inserted, mean), {v, x}); };
  switch (attrs_.kind) {
    case ReduceKind::sum: return {back(g, false)};
    case ReduceKind::mean: return {back(g, true)};
    default: {
      // The gradient flows to every element equal to the extremum (ties share it).
      const Var hit = eq(x, back(out, false));
      return {where(hit, back(g, false), zeros_like(x))};
    }
  }
}

}  // namespace

Var sum(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::sum, x, std::move(axes), keepdims); }
Var mean(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::mean, x, std::move(axes), keepdims); }
Var max(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::max, x, std::move(axes), keepdims); }
Var min(const Var& x, std::vector<int> axes, bool keepdims) { return reduce(ReduceKind::min, x, std::move(axes), keepdims); }

Var sum_to(const Var& g, const Var& like) {
  if (!g.defined() || !like.defined()) throw ValueError("sum_to: undefined variable");
  if (g.shape() == like.shape() && like.type().fully_known()) return g;
  return apply(std::make_shared<SumToOp>(), {g, like});
}

Var broadcast_like(const Var& x, const Var& like) {
  if (x.shape() == like.shape() && like.type().fully_known()) return x;
  return apply(std::make_shared<BroadcastToOp>(std::vector<int>{}, false), {x, like});
}

Var zeros_like(const Var& x) { return apply(std::make_shared<FillLikeOp>(0.0), {x}); }
Var ones_like(const Var& x) { return apply(std::make_shared<FillLikeOp>(1.0), {x}); }

// ---- what the kernels read (ops/reduce_info.hpp) ------------------------------------

const char* detail::reduce_name(ReduceKind k) {
  constexpr const char* n[] = {"sum", "mean", "max", "min"};
  return n[static_cast<int>(k)];
}

const ReduceAttrs& detail::reduce_attrs(const Op& op) { return dynamic_cast<const ReduceOp&>(op).attrs(); }
const BroadcastAttrs& detail::broadcast_attrs(const Op& op) { return dynamic_cast<const BroadcastToOp&>(op).attrs(); }
double detail::fill_value(const Op& op) { return dynamic_cast<const FillLikeOp&>(op).value(); }

Shape BroadcastAttrs::source_shape(const Shape& g, int like_rank) const {
  if (inserted.empty()) return g;
  Shape s;
  std::size_t k = 0;
  for (int i = 0; i < like_rank; ++i) {
    if (std::find(inserted.begin(), inserted.end(), i) != inserted.end()) s.push_back(1);
    else if (k < g.size()) s.push_back(g[k++]);
  }
  return s;
}

double BroadcastAttrs::scale(const Shape& g, const Shape& out) const {
  if (!mean) return 1.0;
  std::int64_t count = 1;
  for (int a : inserted) count *= out[static_cast<std::size_t>(a)];
  if (inserted.empty()) count = numel(out) / std::max<std::int64_t>(1, numel(g));
  return 1.0 / static_cast<double>(std::max<std::int64_t>(count, 1));
}

std::vector<int> detail::sum_to_axes(const Shape& gs, const Shape& ts) {
  const std::size_t lead = gs.size() - ts.size();
  std::vector<int> axes;
  for (std::size_t i = 0; i < gs.size(); ++i)
    if (i < lead || (ts[i - lead] == 1 && gs[i] != 1)) axes.push_back(static_cast<int>(i));
    else if (ts[i - lead] != gs[i])
      throw ShapeError(msg("sum_to: cannot reduce ", shape_to_string(gs), " to ", shape_to_string(ts)));
  return axes;
}

}  // namespace convgraph
