#pragma once
/// The abstract convolution op family: forward, grad w.r.t. inputs, grad w.r.t. weights,
/// for 1, 2 or 3 spatial axes. They say *what* to compute; the optimizer lowers each one
/// to a ConvAlgorithm. Operand order follows Theano:
///   forward       (x, w)   -> y
///   grad_inputs   (w, dy)  -> dx   (needs the input shape: stride > 1 is ambiguous)
///   grad_weights  (x, dy)  -> dw   (needs the filter shape)
/// The grad ops take an optional third operand, a "shape source": only its run-time shape
/// is read, to fill target dimensions unknown when the graph was built (Theano passes
/// `bottom.shape[-2:]` symbolically). autodiff adds it only when the static shape of the
/// differentiated operand has unknown dims; it carries no gradient. Kernels read inputs
/// 0 and 1 only.
#include <string>
#include <vector>

#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/graph.hpp"
#include "convgraph/conv/conv_params.hpp"

namespace convgraph {

class AbstractConvOp : public Op {
 public:
  /// `target_shape`: for grad_inputs the full input shape (N, C, spatial...), for
  /// grad_weights the full filter shape (K, C/G, spatial...), kUnknown where unknown;
  /// ignored (empty) for forward. Params are normalized (throws ValueError).
  AbstractConvOp(ConvDirection direction, ConvParams params, Shape target_shape = {});

  ConvDirection direction() const { return direction_; }
  const ConvParams& conv_params() const { return params_; }
  const Shape& target_shape() const { return target_; }

  /// The concrete problem for concrete input types (every dim known), in the
  /// forward geometry: x (N, C, in...) and w (K, C/G, kernel...). Throws ShapeError.
  ConvProblem problem(const std::vector<TensorType>& inputs) const;
  /// 2 * N * K * (C/G) * prod(kernel) * prod(out) for concrete input types: the same
  /// multiply-adds in every direction (Theano's flops(), for 1D/2D/3D).
  double flops(const std::vector<TensorType>& inputs) const;
  /// "AbstractConv" or "AbstractConv 'user name'": how error messages name this node.
  std::string who() const;
  /// The op name of a direction: "AbstractConv", "AbstractConvGradInputs", ...
  static std::string op_name(ConvDirection direction);

  std::string name() const override;  ///< "AbstractConv", "AbstractConvGradInputs", ...
  std::string params() const override;
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  std::vector<Var> grad(const std::vector<Var>& inputs, const Var& output,
                        const Var& output_grad) const override;
  bool is_abstract() const override { return true; }
  /// On cuda the conv lowering picks a CUDA algorithm (cuDNN, corrmm, fft) for the node.
  bool has_device_kernel(DeviceKind device, const std::vector<TensorType>&) const override {
    return device == DeviceKind::cuda;
  }
  /// Never evaluated by constant folding (it has no kernel; Theano: do_constant_folding False).
  bool foldable() const override { return false; }

 private:
  ConvDirection direction_;
  ConvParams params_;
  Shape target_;
};

/// The AbstractConvOp behind `v`, or nullptr.
const AbstractConvOp* as_abstract_conv(const Var& v);

}  // namespace convgraph
