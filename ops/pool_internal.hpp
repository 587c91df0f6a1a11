#pragma once
// Private pieces of the pooling ops shared by ops/pool.cpp (the ops), ops/pool_params.cpp
// (parameter checks, shape rules) and their kernels (backends/cpu/pool_kernels.cpp).
#include <cstdint>
#include <string>

#include "convgraph/ops/pool.hpp"
#include "ops/shape_ops_internal.hpp"

namespace convgraph::detail {

enum class PoolMode { max = 0, avg = 1 };

/// Validated pooling parameters. Every pooling is done as a 3-D one over the internal axes
/// (0 = depth, 1 = rows, 2 = columns): the `dims` pooled axes of the tensor are the last
/// `dims` of these, and the others have window 1, stride 1 and no padding (a 2-D pooling
/// is a 3-D one of depth 1), so one code path serves every rank.
struct PoolParams {
  int dims = 2;
  std::int64_t window[3] = {1, 2, 2};
  std::int64_t stride[3] = {1, 2, 2};
  std::int64_t pad[3] = {0, 0, 0};
  bool ignore_border = true;
  bool inc_pad = false;
  PoolMode mode = PoolMode::max;
  /// Max pooling's gradient only: also relu's gradient, where(x > 0, gx, 0), for x a
  /// relu's output (optimizer/grad_fusion.cpp); the kernel masks each window's gy by its
  /// maximum, which is x where gy lands.
  bool relu_grad = false;

  /// Checks the options (ValueError naming `op`, the option and its values). dims = 0: the
  /// window's length (1 to 3); otherwise the window must have `dims` entries.
  static PoolParams from(const char* op, const PoolOptions& o, PoolMode mode, int dims);
  /// "max_pool2d" etc.
  std::string op_name() const;
  std::string text() const;
  /// Output length along internal axis `axis` for input length n (kUnknown stays unknown;
  /// may be < 1 for too-small inputs, which output_type rejects).
  std::int64_t out_size(int axis, std::int64_t n) const;
  /// Output type for input x: checks rank, dtype and that every output length is >= 1.
  TensorType output_type(const std::string& op, const TensorType& x) const;
  /// Whether windows never share an input row (stride >= window on depth and rows).
  bool disjoint_rows() const { return stride[0] >= window[0] && stride[1] >= window[1]; }
};

/// Checks that `g` (named `what`) has the pooled shape of x; ShapeError otherwise.
void check_pool_gradient(const std::string& op, const PoolParams& p, const TensorType& x, const TensorType& g,
                         const char* what);

/// The parameters of a pooling op (kernel keys "pool", "pool_grad", "max_pool_grad_grad").
const PoolParams& pool_params(const Op& op);

/// The gradient op of pooling (max_pool<d>d_grad or avg_pool<d>d_grad by p.mode).
Var pool_grad(const PoolParams& p, const Var& x, const Var& gy);

/// max_pool<d>d_grad_grad(x, g): gathers g (shaped like x) at each window's argmax of x.
class MaxPoolGradGradOp final : public Op {
 public:
  explicit MaxPoolGradGradOp(PoolParams p) : p_(p) {}
  std::string name() const override { return p_.op_name() + "_grad_grad"; }
  std::string params() const override { return p_.text(); }
  TensorType infer(const std::vector<TensorType>& in) const override;
  std::vector<Var> grad(const std::vector<Var>& in, const Var& out, const Var& g) const override;
  std::string_view kernel_key() const override { return "max_pool_grad_grad"; }
  const PoolParams& pool_params() const { return p_; }

 private:
  PoolParams p_;
};

}  // namespace convgraph::detail
