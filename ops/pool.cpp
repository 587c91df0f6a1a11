// 2-D max and average pooling over the last two axes, with Theano's options (window,
// stride, zero padding, ignore_border, padding counted in the average or not), and their
// gradient ops. Each gradient op is differentiable in turn: max_pool2d_grad's adjoint is a
// gather at the argmax (max_pool2d_grad_grad), avg_pool2d_grad's adjoint is avg_pool2d.
#include "ops/pool_internal.hpp"

namespace convgraph {

namespace {

using detail::PoolMode;
using detail::PoolParams;

const std::string kNames[] = {"max_pool2d", "avg_pool2d"};

class PoolOp final : public Op {
 public:
  explicit PoolOp(PoolParams p) : p_(std::move(p)) {}
  std::string name() const override { return kNames[static_cast<int>(p_.mode)]; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    return p_.output_type(name(), in[0]);
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override {
    if (!is_float(in[0].dtype())) return {Var()};
    return {detail::pool_grad(p_, in[0], gy)};
  }
  std::string_view kernel_key() const override { return "pool"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

/// max_pool2d_grad(x, gy) routes each gy to its window's (first) maximum of x;
/// avg_pool2d_grad(x, gy) spreads gy / count over the window (x supplies the shape).
class PoolGradOp final : public Op {
 public:
  explicit PoolGradOp(PoolParams p) : p_(std::move(p)) {}
  std::string name() const override { return kNames[static_cast<int>(p_.mode)] + "_grad"; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    detail::check_pool_gradient(name(), p_, in[0], in[1], "output gradient");
    return TensorType{in[1].dtype, in[0].shape, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    // Linear in gy; piecewise constant (max) or independent (avg) in x.
    if (p_.mode == PoolMode::max)
      return {Var(), convgraph::apply(std::make_shared<detail::MaxPoolGradGradOp>(p_), {in[0], gg})};
    return {Var(), convgraph::apply(std::make_shared<PoolOp>(p_), {gg})};
  }
  std::string_view kernel_key() const override { return "pool_grad"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

}  // namespace

namespace detail {

Var pool_grad(const PoolParams& p, const Var& x, const Var& gy) {
  return convgraph::apply(std::make_shared<PoolGradOp>(p), {x, gy});
}

const PoolParams& pool_params(const Op& op) {
  if (const auto* p = dynamic_cast<const PoolOp*>(&op)) return p->pool_params();
  if (const auto* p = dynamic_cast<const PoolGradOp*>(&op)) return p->pool_params();
  return dynamic_cast<const MaxPoolGradGradOp&>(op).pool_params();
}

std::vector<Var> MaxPoolGradGradOp::grad(const std::vector<Var>& in, const Var&, const Var& g) const {
  return {Var(), pool_grad(p_, in[0], g)};
}

}  // namespace detail

Var max_pool2d(const Var& x, const PoolOptions& options) {
  return convgraph::apply(std::make_shared<PoolOp>(detail::PoolParams::from("max_pool2d", options, PoolMode::max)),
                          {x});
}

Var avg_pool2d(const Var& x, const PoolOptions& options) {
  return convgraph::apply(std::make_shared<PoolOp>(detail::PoolParams::from("avg_pool2d", options, PoolMode::avg)),
                          {x});
}

Var max_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options) {
  return detail::pool_grad(detail::PoolParams::from("max_pool2d_grad", options, PoolMode::max), x, gy);
}

Var avg_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options) {
  return detail::pool_grad(detail::PoolParams::from("avg_pool2d_grad", options, PoolMode::avg), x, gy);
}

}  // namespace convgraph
