// Device placement. device=cpu: nothing to do. device=cuda (optimize() has already failed
// with a DeviceError when no GPU can be used): every convolution moves to the GPU - where
// its algorithms are - with a transfer in front of each host operand and one transfer back
// for host consumers and graph outputs. Other ops stay on the host until the GPU DSL
// kernels exist; consecutive convolutions stay on the device without round trips.
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
  if (inputs[0].device() == DeviceKind::cpu && output.device() == DeviceKind::cpu) {
    output.copy_from(inputs[0]);
    return;
  }
  throw DeviceError(msg(label(), ": copying ", device_name(inputs[0].device()), " -> ", device_name(output.device()),
                        " needs the CUDA backend's memcpy, which is not wired into the transfer op yet "
                        "(GPU DSL kernels are not implemented yet)"));
}

Var transfer(const Var& x, DeviceKind to) {
  if (x.type().device == to) return x;
  return apply(std::make_shared<TransferOp>(to), {x}, x.name());
}

const TransferOp* as_transfer(const Var& v) { return dynamic_cast<const TransferOp*>(v.op()); }

// ---- the pass -------------------------------------------------------------------------

namespace {

bool on_device(const Var& v) { return as_abstract_conv(v) != nullptr && v.type().device == DeviceKind::cuda; }

void place_convolutions(RewriteContext& ctx) {
  if (ctx.mode.device != DeviceKind::cuda) return;
  FunctionGraph& g = ctx.graph;
  std::unordered_map<const Node*, Var> uploads;  // one upload per host value
  std::vector<Var> moved;
  for (const Var& v : g.toposort()) {
    if (!as_abstract_conv(v) || v.type().device == DeviceKind::cuda) continue;
    for (auto& in : v.node()->inputs) {
      if (in.type().device == DeviceKind::cuda) continue;
      auto it = uploads.find(in.node());
      if (it == uploads.end()) it = uploads.emplace(in.node(), transfer(in, DeviceKind::cuda)).first;
      in = it->second;
    }
    v.node()->type.device = DeviceKind::cuda;
    moved.push_back(v);
  }
  for (const Var& v : moved) {
    const auto clients = g.clients(v);
    bool is_output = false;
    for (const auto& o : g.outputs()) is_output = is_output || o.same(v);
    bool host_client = is_output;
    for (const auto& [c, pos] : clients) host_client = host_client || !on_device(c);
    if (!host_client) continue;
    const Var down = transfer(v, DeviceKind::cpu);
    if (is_output) {
      g.replace(v, down, "device_placement");  // the only way to rewire graph outputs
      if (down.inputs()[0].same(down)) down.node()->inputs[0] = v;
      for (const auto& [c, pos] : clients)
        if (on_device(c)) c.node()->inputs[static_cast<std::size_t>(pos)] = v;
    } else {
      for (const auto& [c, pos] : clients)
        if (!on_device(c)) c.node()->inputs[static_cast<std::size_t>(pos)] = down;
    }
  }
}

}  // namespace

void register_device_placement(RewriteDB& db) {
  db.add_phase("device_placement", kDevicePlacementPos, {"fast_run", "fast_compile"});
  db.add_global("device_placement", "place_convolutions_on_device", {"fast_run", "fast_compile"}, 0,
                place_convolutions);
}

}  // namespace convgraph
