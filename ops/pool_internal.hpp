#pragma once
// Private pieces of the pooling ops shared by ops/pool.cpp (the ops) and
// ops/pool_kernels.cpp (parameter checks and CPU kernels).
#include <cstdint>
#include <string>

#include "convgraph/ops/nnet.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph::detail {

enum class PoolMode { max = 0, avg = 1 };

/// Validated pooling parameters for the last two axes (index 0 = rows, 1 = columns).
struct PoolParams {
  std::int64_t window[2] = {2, 2};
  std::int64_t stride[2] = {2, 2};
  std::int64_t pad[2] = {0, 0};
  bool ignore_border = true;
  bool inc_pad = false;
  PoolMode mode = PoolMode::max;

  /// Checks the options (ValueError naming `op`, the option and its values).
  static PoolParams from(const char* op, const PoolOptions& o, PoolMode mode);
  std::string text() const;
  /// Output length along spatial axis `axis` for input length n (kUnknown stays unknown;
  /// may be < 1 for too-small inputs, which output_type rejects).
  std::int64_t out_size(int axis, std::int64_t n) const;
  /// Output type for input x: checks rank, dtype and that every output length is >= 1.
  TensorType output_type(const std::string& op, const TensorType& x) const;
};

/// Checks that `g` (named `what`) has the pooled shape of x; ShapeError otherwise.
void check_pool_gradient(const std::string& op, const PoolParams& p, const TensorType& x, const TensorType& g,
                         const char* what);

/// Kernels on contiguous host tensors shaped (..., H, W) and (..., OH, OW).
void pool_forward(const PoolParams& p, const Tensor& x, Tensor& y, const ExecContext& ctx);
/// gx from gy: max routes to the argmax of x, avg spreads.
void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& gy, Tensor& gx, const ExecContext& ctx);
/// y-shaped gather of g at each window's argmax of x (adjoint of the max routing).
void max_pool_gather(const PoolParams& p, const Tensor& x, const Tensor& g, Tensor& out, const ExecContext& ctx);

/// The gradient op of pooling (max_pool2d_grad or avg_pool2d_grad by p.mode).
Var pool_grad(const PoolParams& p, const Var& x, const Var& gy);

/// max_pool2d_grad_grad(x, g): gathers g (shaped like x) at each window's argmax of x.
class MaxPoolGradGradOp final : public Op {
 public:
  explicit MaxPoolGradGradOp(PoolParams p) : p_(p) {}
  std::string name() const override { return "max_pool2d_grad_grad"; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override;
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) const override {
    max_pool_gather(p_, in[0], in[1], out, ctx);
  }

 private:
  PoolParams p_;
};

}  // namespace convgraph::detail
