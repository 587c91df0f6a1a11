#pragma once
/// The symbolic graph. A Var is a cheap handle to a Node; a Node is either a graph input,
/// a constant, or the application of an Op to input Vars (Theano's Apply). Every op in
/// convgraph has exactly one output, so a node and its output are the same object: this
/// keeps autodiff, scheduling and memory planning simple. A graph is whatever is reachable
/// from its outputs; holding a Var keeps its whole history alive.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convgraph/core/device.hpp"
#include "convgraph/core/dtype.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/exec_context.hpp"
#include "convgraph/core/tensor.hpp"

namespace convgraph {

/// Static type of a graph value: dtype, rank, and each dimension known or kUnknown (-1).
struct TensorType {
  DType dtype = DType::float32;
  Shape shape;
  DeviceKind device = DeviceKind::cpu;

  int rank() const { return static_cast<int>(shape.size()); }
  bool fully_known() const;
  /// "float32(8, ?, 28, 28)", with "@cuda" for device values.
  std::string to_string() const;
  /// True when a concrete value of type `v` may flow where this type is declared
  /// (same dtype and rank, and every known dimension equal).
  bool accepts(const TensorType& v) const;
  bool operator==(const TensorType&) const = default;
};

class Op;
struct Node;
/// The value cell of a shared variable (core/shared.hpp): a tensor the compiled functions
/// that use the variable read, and their updates replace, between calls.
struct SharedSlot;
using OpPtr = std::shared_ptr<const Op>;

class Var {
 public:
  Var() = default;
  explicit Var(std::shared_ptr<Node> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }
  Node* node() const { return node_.get(); }
  const std::shared_ptr<Node>& ptr() const { return node_; }
  const TensorType& type() const;
  DType dtype() const { return type().dtype; }
  const Shape& shape() const { return type().shape; }
  int rank() const { return type().rank(); }
  const std::string& name() const;
  /// Sets a label shown by debugprint and profiles; returns *this for chaining.
  Var& named(std::string name);
  const Op* op() const;                 ///< nullptr for inputs and constants
  const std::vector<Var>& inputs() const;
  bool is_input() const;                ///< a graph input (no op, no value, not shared)
  bool is_constant() const;
  bool is_shared() const;               ///< a shared variable (state held across calls)
  const Tensor* constant_value() const; ///< nullptr unless a constant
  bool same(const Var& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<Node> node_;
};

struct Node {
  OpPtr op;                   ///< null for inputs and constants
  std::vector<Var> inputs;
  TensorType type;
  std::string name;
  std::shared_ptr<const Tensor> value;  ///< constants only
  std::shared_ptr<SharedSlot> shared;   ///< shared variables only
  std::uint64_t id = 0;       ///< creation order: deterministic traversals and printing
};

/// An operation: parameters, type and shape inference and gradient, declared together in
/// one class; its kernels are registered per device under its kernel_key() (a few
/// host-only ops, such as the layout copies, still compute in perform()). Ops are
/// immutable and shared between nodes.
class Op {
 public:
  virtual ~Op() = default;
  /// Short op name, e.g. "add", "AbstractConv".
  virtual std::string name() const = 0;
  /// Canonical text of the parameters: two ops are equal when name and params are.
  virtual std::string params() const { return {}; }
  virtual std::vector<std::string> tags() const { return {}; }
  /// Output type from input types; throws TypeError/ShapeError naming the op, the
  /// argument and the values. Called with static types (unknown dims allowed) when
  /// the node is built, and with concrete types at run time.
  virtual TensorType infer(const std::vector<TensorType>& inputs) const = 0;
  /// Gradients w.r.t. each input given the output gradient; an undefined Var means
  /// "no gradient flows" (integer inputs, disconnected parameters). Default: not
  /// differentiable (throws).
  virtual std::vector<Var> grad(const std::vector<Var>& inputs, const Var& output,
                                const Var& output_grad) const;
  /// Computes `output` (preallocated, contiguous, on the op's device) from contiguous
  /// inputs. Default: throws (abstract ops have no kernel).
  virtual void perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const;
  /// Scratch bytes perform() needs for these concrete input types.
  virtual std::size_t workspace_bytes(const std::vector<TensorType>& inputs) const { return 0; }
  /// The kernel family that computes this op, e.g. "elementwise.unary": the runtime runs
  /// the kernel registered for (key, device) in the KernelRegistry (backends/), which reads
  /// the op's attributes through the op's private header. Empty (the default): perform()
  /// is the op's kernel, on the host only unless has_device_kernel() says otherwise.
  virtual std::string_view kernel_key() const { return {}; }
  /// For ops without a kernel key: whether perform() can run with its output on `device`
  /// (a non-cpu device) for these input types. Default: host only.
  virtual bool has_device_kernel(DeviceKind device, const std::vector<TensorType>& inputs) const {
    (void)device;
    (void)inputs;
    return false;
  }
  /// True for ops that only say *what* to compute (abstract convolutions).
  virtual bool is_abstract() const { return false; }
  /// Whether constant folding may evaluate this op (false for run-time checks, I/O).
  virtual bool foldable() const { return true; }
  /// Which implementation runs and why (set on lowered nodes), for debugprint/describe.
  virtual std::string implementation() const { return {}; }

  bool equals(const Op& o) const { return this == &o || (name() == o.name() && params() == o.params()); }
  std::size_t hash() const;
  /// "name{params}" for messages.
  std::string label() const;
};

/// Creates a node applying `op` to `inputs` (type inference runs now and may throw).
Var apply(OpPtr op, std::vector<Var> inputs, std::string name = {});
/// A symbolic graph input; use kUnknown (-1) for dimensions known only at call time.
Var input(DType dtype, Shape shape, std::string name = {});
inline Var input(std::string name, DType dtype, Shape shape) { return input(dtype, std::move(shape), std::move(name)); }
/// A constant node holding a host tensor.
Var constant(Tensor value, std::string name = {});
/// A 0-d constant.
Var scalar(double value, DType dtype = DType::float32);

/// All nodes reachable from `outputs`, inputs before users, in a deterministic order
/// (depth-first, inputs in argument order).
std::vector<Var> topological_order(const std::vector<Var>& outputs);

}  // namespace convgraph
