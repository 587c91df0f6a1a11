// softmax / log_softmax over the last axis with fused, numerically stable gradient ops,
// and categorical cross-entropy (dense targets, or integer class indices through a
// take/scatter pair of ops that are each other's gradient).
#include <cmath>

#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "ops/kernel_util.hpp"
#include "ops/shape_ops_internal.hpp"
#include "ops/softmax_info.hpp"

namespace convgraph {

namespace {

void check_float_rows(const std::string& op, const char* arg, const TensorType& t) {
  detail::check_dtype(op, arg, t.dtype, {DType::float32, DType::float64});
  if (t.rank() == 0)
    throw ShapeError(msg(op, ": ", arg, " must have rank >= 1 (classes on the last axis), got a 0-d input"));
}

// ---- softmax / log_softmax ----------------------------------------------------------

class SoftmaxOp final : public Op {
 public:
  explicit SoftmaxOp(bool log) : log_(log) {}
  std::string name() const override { return log_ ? "log_softmax" : "softmax"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    check_float_rows(name(), "x", in[0]);
    return in[0];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  std::string_view kernel_key() const override { return "softmax"; }
  bool log() const { return log_; }

 private:
  bool log_;
};

/// softmax_grad(gy, y) = y * (gy - sum(gy * y)), and
/// log_softmax_grad(gy, y) = gy - exp(y) * sum(gy), sums over the last axis: the whole
/// backward pass of the row in one kernel, from the forward output alone.
class SoftmaxGradOp final : public Op {
 public:
  explicit SoftmaxGradOp(bool log) : log_(log) {}
  std::string name() const override { return log_ ? "log_softmax_grad" : "softmax_grad"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    check_float_rows(name(), "gy", in[0]);
    bool ok = in[0].dtype == in[1].dtype && in[0].rank() == in[1].rank();
    for (std::size_t i = 0; ok && i < in[0].shape.size(); ++i)
      ok = detail::dims_compatible(in[0].shape[i], in[1].shape[i]);
    if (!ok)
      throw ShapeError(
          msg(name(), ": output gradient ", in[0].to_string(), " does not match the output ", in[1].to_string()));
    TensorType out = in[1];
    for (std::size_t i = 0; i < out.shape.size(); ++i)
      if (out.shape[i] < 0) out.shape[i] = in[0].shape[i];
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& gg) const override {
    const Var &gy = in[0], &y = in[1];
    if (!log_) {
      const Var s = sum(gy * y, {-1}, true);
      return {apply(std::make_shared<SoftmaxGradOp>(false), {gg, y}), gg * (gy - s) - sum(gg * y, {-1}, true) * gy};
    }
    const Var e = exp(y);
    return {gg - sum(gg * e, {-1}, true), -(gg * e * sum(gy, {-1}, true))};
  }
  std::string_view kernel_key() const override { return "softmax_grad"; }
  bool log() const { return log_; }

 private:
  bool log_;
};

std::vector<Var> SoftmaxOp::grad(const std::vector<Var>&, const Var& out, const Var& g) const {
  return {apply(std::make_shared<SoftmaxGradOp>(log_), {g, out})};
}

// ---- class-index gather/scatter for cross-entropy -----------------------------------

void check_indices(const std::string& op, const TensorType& p, const TensorType& idx) {
  detail::check_dtype(op, "class indices", idx.dtype, {DType::int32, DType::int64});
  bool ok = idx.rank() + 1 == p.rank();
  for (std::size_t i = 0; ok && i < idx.shape.size(); ++i) ok = detail::dims_compatible(idx.shape[i], p.shape[i]);
  if (!ok)
    throw ShapeError(msg(op, ": class indices of shape ", shape_to_string(idx.shape), " must have the shape ",
                         shape_to_string(Shape(p.shape.begin(), p.shape.end() - (p.rank() ? 1 : 0))),
                         " of the probabilities ", shape_to_string(p.shape), " without their last axis"));
}

/// take_class(p, idx)[r] = p[r, idx[r]]: picks one entry of the last axis per row.
class TakeClassOp final : public Op {
 public:
  std::string name() const override { return "take_class"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    check_float_rows(name(), "probabilities", in[0]);
    check_indices(name(), in[0], in[1]);
    return TensorType{in[0].dtype, Shape(in[0].shape.begin(), in[0].shape.end() - 1), in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& g) const override;
  std::string_view kernel_key() const override { return "take_class"; }
};

/// scatter_class(g, idx, like): zeros shaped like `like` with g[r] at [r, idx[r]].
class ScatterClassOp final : public Op {
 public:
  std::string name() const override { return "scatter_class"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 3);
    check_float_rows(name(), "like", in[2]);
    check_indices(name(), in[2], in[1]);
    if (in[0].dtype != in[2].dtype || in[0].rank() != in[1].rank())
      throw ShapeError(msg(name(), ": values ", in[0].to_string(), " do not match class indices ", in[1].to_string(),
                           " and target ", in[2].to_string()));
    return in[2];
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    return {apply(std::make_shared<TakeClassOp>(), {gg, in[1]}), Var(), Var()};
  }
  std::string_view kernel_key() const override { return "scatter_class"; }
};

std::vector<Var> TakeClassOp::grad(const std::vector<Var>& in, const Var&, const Var& g) const {
  return {apply(std::make_shared<ScatterClassOp>(), {g, in[1], in[0]}), Var()};
}

}  // namespace

bool detail::softmax_is_log(const Op& op) {
  if (const auto* s = dynamic_cast<const SoftmaxOp*>(&op)) return s->log();
  return dynamic_cast<const SoftmaxGradOp&>(op).log();
}

Var softmax(const Var& x) { return apply(std::make_shared<SoftmaxOp>(false), {x}); }
Var log_softmax(const Var& x) { return apply(std::make_shared<SoftmaxOp>(true), {x}); }

Var categorical_crossentropy(const Var& probs, const Var& targets) {
  const char* op = "categorical_crossentropy";
  check_float_rows(op, "probs", probs.type());
  // log(softmax(z)) is taken as log_softmax(z): finite (and exact) where a probability
  // underflows to 0, as in a confidently wrong prediction early in training.
  const auto* sm = dynamic_cast<const SoftmaxOp*>(probs.op());
  const Var log_probs = sm && !sm->log() ? log_softmax(probs.inputs()[0]) : Var();
  if (is_integer(targets.dtype())) {
    check_indices(op, probs.type(), targets.type());
    if (log_probs.defined()) return -apply(std::make_shared<TakeClassOp>(), {log_probs, targets});
    return -log(apply(std::make_shared<TakeClassOp>(), {probs, targets}));
  }
  if (targets.dtype() != probs.dtype())
    throw TypeError(msg(op, ": targets ", targets.type().to_string(), " must be class indices (int32/int64) or ",
                        "probabilities of the same dtype as probs ", probs.type().to_string()));
  bool ok = targets.rank() == probs.rank();
  for (int i = 0; ok && i < probs.rank(); ++i)
    ok = detail::dims_compatible(targets.shape()[static_cast<std::size_t>(i)],
                                 probs.shape()[static_cast<std::size_t>(i)]);
  if (!ok)
    throw ShapeError(msg(op, ": targets of shape ", shape_to_string(targets.shape()), " must have the shape ",
                         shape_to_string(probs.shape()), " of probs (or be class indices of shape probs[:-1])"));
  return -sum(targets * (log_probs.defined() ? log_probs : log(probs)), {-1});
}

}  // namespace convgraph
