// Max and average pooling over the trailing 1, 2 or 3 axes with Theano's options (window,
// stride, zero padding, ignore_border, padding counted in the average or not), their
// gradient ops, and global average pooling. Each gradient op is differentiable in turn:
// max pooling's gradient has a gather at the argmax (max_pool<d>d_grad_grad) as its
// adjoint, average pooling's gradient has average pooling itself.
#include "convgraph/ops/math.hpp"
#include "ops/pool_internal.hpp"

namespace convgraph {

namespace {

using detail::PoolMode;
using detail::PoolParams;

class PoolOp final : public Op {
 public:
  explicit PoolOp(PoolParams p) : p_(std::move(p)) {}
  std::string name() const override { return p_.op_name(); }
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

/// max_pool<d>d_grad(x, gy) routes each gy to its window's (first) maximum of x;
/// avg_pool<d>d_grad(x, gy) spreads gy / count over the window (x supplies the shape).
class PoolGradOp final : public Op {
 public:
  explicit PoolGradOp(PoolParams p) : p_(std::move(p)) {}
  std::string name() const override { return p_.op_name() + (p_.relu_grad ? "_grad+relu_grad" : "_grad"); }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    detail::check_pool_gradient(name(), p_, in[0], in[1], "output gradient");
    return TensorType{in[1].dtype, in[0].shape, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    // Linear in gy; piecewise constant (max) or independent (avg) in x.
    if (p_.mode == PoolMode::max) {
      // The fused relu mask is its own adjoint, applied before the gather.
      PoolParams plain = p_;
      plain.relu_grad = false;
      const Var g = p_.relu_grad ? where(in[0] > 0.0, gg, zeros_like(gg)) : gg;
      return {Var(), convgraph::apply(std::make_shared<detail::MaxPoolGradGradOp>(plain), {in[0], g})};
    }
    return {Var(), convgraph::apply(std::make_shared<PoolOp>(p_), {gg})};
  }
  std::string_view kernel_key() const override { return "pool_grad"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

// ---- global average pooling ------------------------------------------------------------

void check_global_input(const std::string& op, const TensorType& x) {
  detail::check_dtype(op, "input", x.dtype, {DType::float32, DType::float64});
  if (x.rank() < 3)
    throw ShapeError(msg(op, ": input must have rank >= 3 (N, C, spatial...), got shape ", shape_to_string(x.shape)));
}

class GlobalAvgPoolOp final : public Op {
 public:
  std::string name() const override { return "global_avg_pool"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    check_global_input(name(), in[0]);
    return TensorType{in[0].dtype, {in[0].shape[0], in[0].shape[1]}, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gy) const override;
  std::string_view kernel_key() const override { return "global_avg_pool"; }
};

/// global_avg_pool_grad(x, gy): gy[n, c] / count at every spatial position of x's shape.
class GlobalAvgPoolGradOp final : public Op {
 public:
  std::string name() const override { return "global_avg_pool_grad"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    check_global_input(name(), in[0]);
    const TensorType& g = in[1];
    if (g.dtype != in[0].dtype || g.rank() != 2 || !detail::dims_compatible(g.shape[0], in[0].shape[0]) ||
        !detail::dims_compatible(g.shape[1], in[0].shape[1]))
      throw ShapeError(msg(name(), ": output gradient ", g.to_string(), " does not match the pooled output (",
                           in[0].shape[0], ", ", in[0].shape[1], ") of the input ", in[0].to_string()));
    return TensorType{g.dtype, in[0].shape, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var& gg) const override {
    return {Var(), global_avg_pool(gg)};  // linear in gy; its adjoint is the mean itself
  }
  std::string_view kernel_key() const override { return "global_avg_pool_grad"; }
};

std::vector<Var> GlobalAvgPoolOp::grad(const std::vector<Var>& in, const Var&, const Var& gy) const {
  return {convgraph::apply(std::make_shared<GlobalAvgPoolGradOp>(), {in[0], gy})};
}

Var make_pool(const Var& x, const PoolOptions& o, PoolMode mode, int dims) {
  const char* name = mode == PoolMode::max ? "max_pool" : "avg_pool";
  const std::string op = dims ? msg(name, dims, "d") : std::string(name);
  return convgraph::apply(std::make_shared<PoolOp>(PoolParams::from(op.c_str(), o, mode, dims)), {x});
}

Var grad_op(const Var& x, const Var& gy, const PoolOptions& o, PoolMode mode, int dims) {
  const std::string op = msg(mode == PoolMode::max ? "max_pool" : "avg_pool", dims ? msg(dims, "d") : "", "_grad");
  return detail::pool_grad(PoolParams::from(op.c_str(), o, mode, dims), x, gy);
}

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

Var max_pool(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::max, 0); }
Var avg_pool(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::avg, 0); }
Var max_pool1d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::max, 1); }
Var avg_pool1d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::avg, 1); }
Var max_pool2d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::max, 2); }
Var avg_pool2d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::avg, 2); }
Var max_pool3d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::max, 3); }
Var avg_pool3d(const Var& x, const PoolOptions& o) { return make_pool(x, o, PoolMode::avg, 3); }

Var max_pool_grad(const Var& x, const Var& gy, const PoolOptions& o) { return grad_op(x, gy, o, PoolMode::max, 0); }
Var avg_pool_grad(const Var& x, const Var& gy, const PoolOptions& o) { return grad_op(x, gy, o, PoolMode::avg, 0); }
Var max_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& o) { return grad_op(x, gy, o, PoolMode::max, 2); }
Var avg_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& o) { return grad_op(x, gy, o, PoolMode::avg, 2); }

Var max_pool_grad_grad(const Var& x, const Var& g, const PoolOptions& o) {
  return convgraph::apply(
      std::make_shared<detail::MaxPoolGradGradOp>(PoolParams::from("max_pool_grad_grad", o, PoolMode::max, 0)),
      {x, g});
}

Var global_avg_pool(const Var& x) { return convgraph::apply(std::make_shared<GlobalAvgPoolOp>(), {x}); }

}  // namespace convgraph
