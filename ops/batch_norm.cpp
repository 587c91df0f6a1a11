// Batch normalization over channel axis 1 (ranks 2 to 5, one code path): the statistics
// op, the forward op (training and inference) and the fused gradient ops; what each takes
// and gives is listed in ops/batch_norm_info.hpp. The kernels are in
// backends/cpu/batch_norm_kernels.cpp.
#include "convgraph/ops/batch_norm.hpp"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "convgraph/ops/math.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "ops/batch_norm_info.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

namespace {

using detail::BnInfo;
using detail::BnKind;
using detail::dims_compatible;

void check_x(const std::string& op, const TensorType& x) {
  if (x.rank() < 2 || x.rank() > 5)
    throw ShapeError(msg(op, ": x ", x.to_string(), " must have rank 2 to 5: (N, C), (N, C, L), (N, C, H, W) or (N, C, D, H, W)"));
  detail::check_dtype(op, "x", x.dtype, {DType::float32, DType::float64});
}

void check_dtype_of(const std::string& op, const char* arg, const TensorType& v, const TensorType& x) {
  if (v.dtype != x.dtype)
    throw TypeError(msg(op, ": ", arg, " ", v.to_string(), " must have x's dtype ", dtype_name(x.dtype)));
}

/// A per-channel vector: rank 1, length C.
void check_vector(const std::string& op, const char* arg, const TensorType& v, const TensorType& x) {
  check_dtype_of(op, arg, v, x);
  if (v.rank() != 1 || !dims_compatible(v.shape[0], x.shape[1]))
    throw ShapeError(msg(op, ": ", arg, " ", v.to_string(), " must be a vector of length C = ", x.shape[1],
                         " (the channels of x ", x.to_string(), ")"));
}

/// A (rows, C) table of per-channel values (statistics, gradient sums).
void check_table(const std::string& op, const char* arg, const TensorType& v, std::int64_t rows, const TensorType& x) {
  check_dtype_of(op, arg, v, x);
  if (v.rank() != 2 || !dims_compatible(v.shape[0], rows) || !dims_compatible(v.shape[1], x.shape[1]))
    throw ShapeError(msg(op, ": ", arg, " ", v.to_string(), " must have shape (", rows, ", ", x.shape[1], ")"));
}

void check_like_x(const std::string& op, const char* arg, const TensorType& g, const TensorType& x) {
  check_dtype_of(op, arg, g, x);
  bool ok = g.rank() == x.rank();
  for (int i = 0; ok && i < x.rank(); ++i) ok = dims_compatible(g.shape[static_cast<std::size_t>(i)], x.shape[static_cast<std::size_t>(i)]);
  if (!ok) throw ShapeError(msg(op, ": ", arg, " ", g.to_string(), " must have the shape of x ", x.to_string()));
}

/// Training needs M = N * spatial >= 2 values per channel (the unbiased variance divides by M - 1).
void check_batch(const std::string& op, const TensorType& x) {
  std::int64_t m = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (i == 1) continue;
    const std::int64_t d = x.shape[static_cast<std::size_t>(i)];
    if (d < 0) return;  // known at run time, checked then
    m *= d;
  }
  if (m < 2)
    throw ShapeError(msg(op, ": x ", x.to_string(), " has ", m,
                         " value(s) per channel; batch statistics need at least 2 (N * spatial)"));
}

void check_eps(const char* op, double eps) {
  if (!(eps > 0) || !std::isfinite(eps)) throw ValueError(msg(op, ": eps ", eps, " must be finite and > 0"));
}

class BnOp final : public Op {
 public:
  explicit BnOp(BnInfo info) : info_(info) {}
  std::string name() const override {
    switch (info_.kind) {
      case BnKind::stats: return "batch_norm_stats";
      case BnKind::forward:
        return std::string(info_.train ? "batch_norm_train" : "batch_norm_infer") + (info_.relu ? "+relu" : "");
      case BnKind::grad_sums:
        return std::string(info_.train ? "batch_norm_train_grad_sums" : "batch_norm_infer_grad_sums") +
               (info_.relu ? "+relu_grad" : "");
      case BnKind::grad_x: return std::string("batch_norm_train_grad_x") + (info_.relu ? "+relu_grad" : "");
    }
    return {};
  }
  std::string params() const override { return msg("eps=", info_.eps); }
  std::string_view kernel_key() const override {
    switch (info_.kind) {
      case BnKind::stats: return "batch_norm_stats";
      case BnKind::forward: return "batch_norm";
      case BnKind::grad_sums: return "batch_norm_grad_sums";
      case BnKind::grad_x: return "batch_norm_grad_x";
    }
    return {};
  }
  const BnInfo& info() const { return info_; }

  TensorType infer(const std::vector<TensorType>& in) const override {
    const std::string op = name();
    const std::size_t stat_inputs = info_.train ? 1 : 2;
    const std::size_t mask = info_.relu && info_.kind != BnKind::forward ? 1 : 0;  // h, last
    if (mask && !info_.train) throw TypeError(msg(op, ": relu's gradient is fused into the training gradients only"));
    switch (info_.kind) {
      case BnKind::stats:
        detail::check_arity(*this, in.size(), 1);
        check_x(op, in[0]);
        check_batch(op, in[0]);
        return TensorType{in[0].dtype, {3, in[0].shape[1]}, in[0].device};
      case BnKind::forward:
        detail::check_arity(*this, in.size(), 3 + stat_inputs);
        check_x(op, in[0]);
        check_vector(op, "gamma", in[1], in[0]);
        check_vector(op, "beta", in[2], in[0]);
        check_stats(op, in, 3);
        return in[0];
      case BnKind::grad_sums:
        detail::check_arity(*this, in.size(), 2 + stat_inputs + mask);
        if (mask) check_like_x(op, "relu output", in.back(), in[0]);
        check_x(op, in[0]);
        check_like_x(op, "output gradient", in[1], in[0]);
        check_stats(op, in, 2);
        return TensorType{in[0].dtype, {2, in[0].shape[1]}, in[0].device};
      case BnKind::grad_x:
        detail::check_arity(*this, in.size(), 5 + mask);
        if (mask) check_like_x(op, "relu output", in.back(), in[0]);
        check_x(op, in[0]);
        check_like_x(op, "output gradient", in[1], in[0]);
        check_vector(op, "gamma", in[2], in[0]);
        check_stats(op, in, 3);
        check_table(op, "gradient sums", in[4], 2, in[0]);
        return in[0];
    }
    return in[0];
  }

  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override;

 private:
  void check_stats(const std::string& op, const std::vector<TensorType>& in, std::size_t at) const {
    if (info_.train) return check_table(op, "batch statistics", in[at], 3, in[0]);
    check_vector(op, "running_mean", in[at], in[0]);
    check_vector(op, "running_var", in[at + 1], in[0]);
  }

  BnInfo info_;
};

Var bn(BnKind kind, bool train, double eps, std::vector<Var> inputs) {
  return convgraph::apply(std::make_shared<BnOp>(BnInfo{kind, train, eps}), std::move(inputs));
}

/// Row r of a (rows, C) table as a (C,) vector.
Var row(const Var& table, std::int64_t r) { return reshape(slice(table, 0, r, r + 1), {-1}); }

std::vector<Var> BnOp::grad(const std::vector<Var>& in, const Var& out, const Var& g) const {
  if (info_.kind != BnKind::forward)
    throw TypeError(msg(name(), ": not differentiable (batch-norm gradients are first order only)"));
  const Var gy = info_.relu ? where(out > 0.0, g, zeros_like(g)) : g;  // relu's gradient first
  const Var& x = in[0];
  const Var& gamma = in[1];
  if (info_.train) {
    // One reduction over (x, gy) gives dbeta and dgamma; dx reads them back in its pass.
    // The statistics' dependence on x is in dx's formula, so none flows to them.
    const Var sums = bn(BnKind::grad_sums, true, info_.eps, {x, gy, in[3]});
    const Var dx = bn(BnKind::grad_x, true, info_.eps, {x, gy, gamma, in[3], sums});
    return {dx, row(sums, 1), row(sums, 0), Var()};
  }
  const Var &mean = in[3], &var = in[4];
  const Var sums = bn(BnKind::grad_sums, false, info_.eps, {x, gy, mean, var});
  const Var dbeta = row(sums, 0), dgamma = row(sums, 1);
  const Var rstd = 1.0 / sqrt(var + info_.eps);
  // dx = gy * gamma / sigma: the inference op itself with zero mean and shift.
  const Var dx = bn(BnKind::forward, false, info_.eps, {gy, gamma, zeros_like(in[2]), zeros_like(mean), var});
  const Var dmean = -(dbeta * gamma * rstd);
  const Var dvar = dgamma * gamma * rstd * rstd * -0.5;
  return {dx, dgamma, dbeta, dmean, dvar};
}

void check_args(const char* op, const Var& x, std::initializer_list<std::pair<const char*, const Var*>> vectors) {
  if (!x.defined()) throw ValueError(msg(op, ": x is an undefined variable"));
  check_x(op, x.type());
  for (const auto& [arg, v] : vectors) {
    if (!v->defined()) throw ValueError(msg(op, ": ", arg, " is an undefined variable"));
    check_vector(op, arg, v->type(), x.type());
  }
}

}  // namespace

namespace detail {

BnInfo bn_info(const Op& op) { return dynamic_cast<const BnOp&>(op).info(); }

Var batch_norm_forward(const BnInfo& info, std::vector<Var> inputs) {
  return convgraph::apply(std::make_shared<BnOp>(info), std::move(inputs));
}

Var batch_norm_node(const BnInfo& info, std::vector<Var> inputs) {
  return convgraph::apply(std::make_shared<BnOp>(info), std::move(inputs));
}

}  // namespace detail

BatchNormOutputs batch_norm_train(const Var& x, const Var& gamma, const Var& beta, double eps) {
  check_args("batch_norm_train", x, {{"gamma", &gamma}, {"beta", &beta}});
  check_eps("batch_norm_train", eps);
  check_batch("batch_norm_train", x.type());
  const Var stats = bn(BnKind::stats, true, eps, {x});
  return {bn(BnKind::forward, true, eps, {x, gamma, beta, stats}), row(stats, 0), row(stats, 2)};
}

RunningStats batch_norm_running_update(const BatchNormOutputs& batch, const Var& running_mean,
                                       const Var& running_var, double momentum) {
  constexpr const char* op = "batch_norm_running_update";
  if (!batch.mean.defined() || !batch.var.defined())
    throw ValueError(msg(op, ": the batch statistics are undefined (use batch_norm_train's outputs)"));
  for (const auto& [arg, v] : {std::pair{"running_mean", &running_mean}, std::pair{"running_var", &running_var}}) {
    if (!v->defined()) throw ValueError(msg(op, ": ", arg, " is an undefined variable"));
    const TensorType& b = batch.mean.type();
    if (v->dtype() != b.dtype || v->rank() != 1 || !dims_compatible(v->shape()[0], b.shape[0]))
      throw ShapeError(msg(op, ": ", arg, " ", v->type().to_string(), " must match the batch statistics ",
                           b.to_string()));
  }
  if (!(momentum >= 0 && momentum <= 1)) throw ValueError(msg(op, ": momentum ", momentum, " must be in [0, 1]"));
  return {running_mean * (1 - momentum) + batch.mean * momentum, running_var * (1 - momentum) + batch.var * momentum};
}

Var batch_norm_infer(const Var& x, const Var& gamma, const Var& beta, const Var& running_mean,
                     const Var& running_var, double eps) {
  check_args("batch_norm_infer", x,
             {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean}, {"running_var", &running_var}});
  check_eps("batch_norm_infer", eps);
  return bn(BnKind::forward, false, eps, {x, gamma, beta, running_mean, running_var});
}

}  // namespace convgraph
