// Device placement. device=cpu: nothing to do. device=cuda (optimize() has already failed
// with a DeviceError when no GPU can be used): every convolution moves to the GPU - where
// its algorithms are - with a transfer in front of each host operand and one back after
// it. Other ops stay on the host until the GPU DSL kernels exist; cleanup removes the
// download/upload pairs between consecutive convolutions, so those stay on the device.
#include <unordered_map>

#include "convgraph/core/function_graph.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/optimizer/transfer_op.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

// ---- TransferOp ---------------------------------------------------------------------

std::string TransferOp::params() const { return msg("to=", device_name(to_)); }

TensorType TransferOp::infer(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 1) throw TypeError(msg(label(), ": expects 1 input, got ", inputs.size()));
  TensorType t = inputs[0];
  t.device = to_;
  return t;
}

std::vector<Var> TransferOp::grad(const std::vector<Var>& inputs, const Var&, const Var& output_grad) const {
  return {transfer(output_grad, inputs[0].type().device)};
}

void TransferOp::perform(const std::vector<Tensor>& inputs, Tensor& output, const ExecContext&) const {
  if (inputs.size() != 1) throw RuntimeError(msg(label(), ": expects 1 input, got ", inputs.size()));
  if (to_ == DeviceKind::cpu && inputs[0].device() == DeviceKind::cpu && output.device() == DeviceKind::cpu) {
    output.copy_from(inputs[0]);
    return;
  }
  throw DeviceError(msg(label(), ": copying ", device_name(inputs[0].device()), " -> ", device_name(to_),
                        " needs the CUDA backend's memcpy, which is not wired into the transfer op yet "
                        "(GPU DSL kernels are not implemented yet)"));
}

Var transfer(const Var& x, DeviceKind to) {
  if (x.type().device == to) return x;
  return convgraph::apply(std::make_shared<TransferOp>(to), {x}, x.name());
}

const TransferOp* as_transfer(const Var& v) { return dynamic_cast<const TransferOp*>(v.op()); }

// ---- the pass -------------------------------------------------------------------------

namespace {

/// Each host convolution x -> conv -> y becomes x -> upload -> conv@cuda -> download -> y.
/// A convolution feeding another one leaves download -> upload pairs, which cleanup drops.
void place_convolutions(RewriteContext& ctx) {
  if (ctx.mode.device != DeviceKind::cuda) return;
  FunctionGraph& g = ctx.graph;
  std::unordered_map<const Node*, Var> uploads;  // one upload per host value
  for (const Var& v : g.toposort()) {
    if (!as_abstract_conv(v) || v.type().device == DeviceKind::cuda) continue;
    std::vector<Var> ins;
    for (const auto& in : v.inputs()) {
      auto it = uploads.find(in.node());
      if (it == uploads.end()) it = uploads.emplace(in.node(), transfer(in, DeviceKind::cuda)).first;
      ins.push_back(it->second);
    }
    Var on_gpu = convgraph::apply(v.node()->op, ins, v.name());
    on_gpu.node()->type.device = DeviceKind::cuda;  // the op's own inference may not track devices
    g.replace(v, transfer(on_gpu, DeviceKind::cpu), "device_placement");
  }
}

}  // namespace

void register_device_placement(RewriteDB& db) {
  db.add_phase("device_placement", kDevicePlacementPos, {"fast_run", "fast_compile"});
  db.add_global("device_placement", "place_convolutions_on_device", {"fast_run", "fast_compile"}, 0,
                place_convolutions);
}

}  // namespace convgraph
