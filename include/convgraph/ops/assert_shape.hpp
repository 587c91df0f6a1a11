#pragma once
/// assert_shape: a run-time check that a value has the expected shape (Theano's
/// assert_shape / conv.assert_shape). Dimensions known when the graph is built are checked
/// at once (ShapeError); the others are checked by the node when the function runs
/// (RuntimeError carrying the user's message). The node also refines the static type:
/// downstream inference sees the expected dims.
#include <string>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

class AssertShapeOp : public Op {
 public:
  /// `expected`: one entry per axis, kUnknown (-1) for "any size".
  AssertShapeOp(Shape expected, std::string message);

  const Shape& expected() const { return expected_; }
  const std::string& message() const { return message_; }

  std::string name() const override { return "AssertShape"; }
  std::string params() const override;
  /// Same dtype and device; known expected dims replace the input's. Throws ShapeError on
  /// a rank mismatch (dims are checked by perform, so a run-time mismatch is a RuntimeError).
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  /// The check is transparent to gradients.
  std::vector<Var> grad(const std::vector<Var>& inputs, const Var& output,
                        const Var& output_grad) const override;
  /// Checks the concrete shape (RuntimeError with the message), then copies.
  void perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const override;
  bool foldable() const override { return false; }

 private:
  Shape expected_;
  std::string message_;
};

/// Returns `x` wrapped in a check node; `x` itself when `expected` adds nothing (every
/// expected dim is unknown or already known statically). Throws ShapeError now when the
/// rank or a statically known dim disagrees.
Var assert_shape(const Var& x, const Shape& expected, const std::string& message = {});

}  // namespace convgraph
