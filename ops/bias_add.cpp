// bias_add(x, b): a per-channel bias along axis 1 of (N, C, ...), and its b-gradient as
// one per-channel reduction op (bias_add_grad), so that a layer's bias gradient is one
// pass over gy instead of sum_to's generic reduction. Kernels: backends/cpu/channel_kernels.cpp.
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph {

namespace {

void check_channels_first(const std::string& op, const char* arg, const TensorType& x) {
  detail::check_dtype(op, arg, x.dtype, {DType::float32, DType::float64});
  if (x.rank() < 2)
    throw ShapeError(msg(op, ": ", arg, " must have rank >= 2 (N, C, ...), got shape ", shape_to_string(x.shape)));
}

/// bias_add_grad(gy) = sum of gy over every axis but 1: shape (C,).
class BiasAddGradOp final : public Op {
 public:
  std::string name() const override { return "bias_add_grad"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 1);
    check_channels_first(name(), "output gradient", in[0]);
    return TensorType{in[0].dtype, {in[0].shape[1]}, in[0].device};
  }
  std::vector<Var> grad(const std::vector<Var>& in, const Var&, const Var& gg) const override {
    // The adjoint of the channel sum broadcasts gg along axis 1.
    return {bias_add(zeros_like(in[0]), gg)};
  }
  std::string_view kernel_key() const override { return "bias_add_grad"; }
};

class BiasAddOp final : public Op {
 public:
  std::string name() const override { return "bias_add"; }
  TensorType infer(const std::vector<TensorType>& in) const override {
    detail::check_arity(*this, in.size(), 2);
    const TensorType &x = in[0], &b = in[1];
    check_channels_first(name(), "x", x);
    if (b.dtype != x.dtype)
      throw TypeError(msg(name(), ": bias ", b.to_string(), " must have the dtype of x ", x.to_string()));
    if (b.rank() != 1 || !detail::dims_compatible(b.shape[0], x.shape[1]))
      throw ShapeError(msg(name(), ": bias ", b.to_string(), " must have shape (", x.shape[1],
                           ",): one value per channel (axis 1) of x ", x.to_string()));
    TensorType out = x;
    if (out.shape[1] < 0) out.shape[1] = b.shape[0];
    return out;
  }
  std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var& gy) const override {
    return {gy, convgraph::apply(std::make_shared<BiasAddGradOp>(), {gy})};
  }
  std::string_view kernel_key() const override { return "bias_add"; }
};

}  // namespace

Var bias_add(const Var& x, const Var& b) { return convgraph::apply(std::make_shared<BiasAddOp>(), {x, b}); }

}  // namespace convgraph
