#pragma once
/// TransferOp: copies a tensor between host and device memory. Device placement inserts
/// it around the nodes it moves to the GPU (docs/DESIGN.md, "transfers host<->device").
#include "convgraph/core/graph.hpp"

namespace convgraph {

class TransferOp : public Op {
 public:
  explicit TransferOp(DeviceKind to) : to_(to) {}
  DeviceKind target() const { return to_; }

  std::string name() const override { return "transfer"; }
  std::string params() const override;  ///< "to=cuda"
  TensorType infer(const std::vector<TensorType>& inputs) const override;
  /// The gradient moves back to the source device.
  std::vector<Var> grad(const std::vector<Var>& inputs, const Var& output, const Var& output_grad) const override;
  /// Copies host<->device (cudaMemcpyAsync on the current stream, then waits) or
  /// host->host; DeviceError carrying CUDA's reason without a usable GPU.
  void perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext& ctx) const override;
  bool foldable() const override { return false; }

 private:
  DeviceKind to_;
};

/// A node moving `x` to `to` (x itself when it already lives there).
Var transfer(const Var& x, DeviceKind to);
/// The TransferOp behind `v`, or nullptr.
const TransferOp* as_transfer(const Var& v);

}  // namespace convgraph
