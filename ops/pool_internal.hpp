#pragma once
// Private pieces of the pooling ops shared by ops/pool.cpp (the ops), ops/pool_params.cpp
// (parameter checks, shape rules) and their kernels (backends/cpu/pool_kernels.cpp).
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

/// The parameters of a pooling op (kernel keys "pool", "pool_grad", "max_pool_grad_grad").
const PoolParams& pool_params(const Op& op);

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
  std::string_view kernel_key() const override { return "max_pool_grad_grad"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

}  // namespace convgraph::detail
