#include "convgraph/ops/assert_shape.hpp"

#include <memory>

#include "convgraph/core/error.hpp"

namespace convgraph {

namespace {
std::string prefix(const std::string& message) {
  return message.empty() ? std::string("AssertShape") : "AssertShape: " + message;
}
}  // namespace

AssertShapeOp::AssertShapeOp(Shape expected, std::string message)
    : expected_(std::move(expected)), message_(std::move(message)) {
  for (auto d : expected_)
    if (d < kUnknown)
      throw ValueError(msg(prefix(message_), ": expected shape ", shape_to_string(expected_),
                           " has a negative entry ", d, " (use -1 for unknown)"));
}

std::string AssertShapeOp::params() const {
  return "shape=" + shape_to_string(expected_) + (message_.empty() ? "" : " msg=\"" + message_ + "\"");
}

TensorType AssertShapeOp::infer(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1)
    throw ValueError(msg(prefix(message_), ": expects 1 operand, got ", inputs.size()));
  TensorType t = inputs[0];
  if (t.rank() != static_cast<int>(expected_.size()))
    throw ShapeError(msg(prefix(message_), ": value of type ", t.to_string(), " has rank ", t.rank(),
                         " but the expected shape ", shape_to_string(expected_), " has rank ",
                         expected_.size()));
  for (std::size_t i = 0; i < expected_.size(); ++i)
    if (expected_[i] >= 0) t.shape[i] = expected_[i];
  return t;
}

std::vector<Var> AssertShapeOp::grad(const std::vector<Var>&, const Var&, const Var& output_grad) const {
  return {output_grad};
}

void AssertShapeOp::perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext&) const {
  const Shape& s = inputs.at(0).shape();
  bool ok = s.size() == expected_.size();
  for (std::size_t i = 0; ok && i < s.size(); ++i) ok = expected_[i] < 0 || expected_[i] == s[i];
  if (!ok)
    throw RuntimeError(msg(prefix(message_), ": shape ", shape_to_string(s), " does not match the expected ",
                           shape_to_string(expected_)));
  output.copy_from(inputs[0]);
}

Var assert_shape(const Var& x, const Shape& expected, const std::string& message) {
  const TensorType& t = x.type();
  if (t.rank() != static_cast<int>(expected.size()))
    throw ShapeError(msg(prefix(message), ": value ", x.name().empty() ? "" : "'" + x.name() + "' ",
                         "of type ", t.to_string(), " has rank ", t.rank(), " but the expected shape ",
                         shape_to_string(expected), " has rank ", expected.size()));
  bool adds = false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] < 0) continue;
    if (t.shape[i] >= 0 && t.shape[i] != expected[i])
      throw ShapeError(msg(prefix(message), ": value ", x.name().empty() ? "" : "'" + x.name() + "' ",
                           "of type ", t.to_string(), " does not match the expected shape ",
                           shape_to_string(expected), " at dim ", i));
    adds = adds || t.shape[i] < 0;
  }
  if (!adds) return x;
  return apply(std::make_shared<AssertShapeOp>(expected, message), {x});
}

}  // namespace convgraph
