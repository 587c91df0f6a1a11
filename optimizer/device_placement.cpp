// Device placement. device=cpu: nothing to do. device=cuda (optimize() has already failed
// with a DeviceError when no GPU can be used): every node whose op has a CUDA kernel
// (KernelRegistry::supported for ops with a kernel key, Op::has_device_kernel for the
// others: convolutions, reductions, softmax, matmul) moves to the GPU; the rest stay on the host. Transfers sit only at the
// boundaries: graph inputs and constants are uploaded once, results downloaded, and a
// host-only op in the middle gets a download in front and an upload after.
#include <map>
#include <unordered_map>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/optimizer/transfer_op.hpp"
#include "backends/device_buffers.hpp"
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
  const bool host_only = to_ == DeviceKind::cpu && inputs[0].device() == DeviceKind::cpu;
  if (!host_only && !cuda_info().available)
    throw DeviceError(msg(label(), ": copying ", device_name(inputs[0].device()), " -> ", device_name(to_),
                          " needs a GPU: ", cuda_info().reason));
  if (output.device() != to_)
    throw RuntimeError(msg(label(), ": output lives on ", device_name(output.device()), ", not ", device_name(to_)));
  // Waits for the copy: a download's reader is host code, and an upload's source may be
  // arena memory that the next host node overwrites.
  try {
    copy_into(inputs[0], output);
  } catch (const DeviceError& e) {
    const std::string what = msg(label(), ": copying ", device_name(inputs[0].device()), " -> ",
                                 device_name(output.device()), " failed: ", e.what());
    if (dynamic_cast<const DeviceContextError*>(&e)) throw DeviceContextError(what);
    throw DeviceError(what);
  }
}

Var transfer(const Var& x, DeviceKind to) {
  if (x.type().device == to) return x;
  return convgraph::apply(std::make_shared<TransferOp>(to), {x}, x.name());
}

const TransferOp* as_transfer(const Var& v) { return dynamic_cast<const TransferOp*>(v.op()); }

// ---- the pass -------------------------------------------------------------------------

namespace {

/// Rebuilds the graph in topological order. A node whose op has a kernel for `device`
/// runs there, with its operands moved over; any other node runs on the host, with its
/// operands moved back. Each value is moved to a device at most once (`moved` caches the
/// transfer), so an input used by many GPU nodes is uploaded once and a chain of GPU nodes
/// has no transfers inside it. Host nodes whose operands did not change are kept as is.
class Placer {
 public:
  explicit Placer(DeviceKind device) : device_(device) {}

  void run(FunctionGraph& g) {
    for (const Var& v : g.toposort()) mapped_.emplace(v.node(), place(v));
    // Results go back to the host, where the caller reads them.
    for (const Var& out : std::vector<Var>(g.outputs())) {
      if (!out.op()) continue;
      const Var host = on(out, DeviceKind::cpu);
      if (!host.same(out)) g.replace(out, host, "device_placement");
    }
  }

 private:
  Var place(const Var& v) {
    if (!v.op()) return v;  // graph inputs, constants and shared variables live on the host
    if (const TransferOp* t = as_transfer(v)) return transfer(mapped_.at(v.inputs()[0].node()), t->target());
    std::vector<TensorType> types;
    for (const Var& in : v.inputs()) types.push_back(mapped_.at(in.node()).type());
    const bool gpu = KernelRegistry::builtin().supported(*v.op(), device_, types).is_ok();
    const DeviceKind where = gpu ? device_ : DeviceKind::cpu;
    std::vector<Var> ins;
    bool same = true;
    for (const Var& in : v.inputs()) {
      ins.push_back(on(in, where));
      same = same && ins.back().same(in);
    }
    if (!gpu && same) return v;
    Var placed = convgraph::apply(v.node()->op, ins, v.name());
    placed.node()->type.device = where;  // not every infer() tracks devices
    return placed;
  }

  /// The placed value of original node `v`, on `device`.
  Var on(const Var& v, DeviceKind device) {
    const Var& m = mapped_.at(v.node());
    if (m.type().device == device) return m;
    auto key = std::make_pair(v.node(), device);
    auto it = moved_.find(key);
    if (it == moved_.end()) it = moved_.emplace(key, transfer(m, device)).first;
    return it->second;
  }

  DeviceKind device_;
  std::unordered_map<const Node*, Var> mapped_;
  std::map<std::pair<const Node*, DeviceKind>, Var> moved_;
};

void place_pass(RewriteContext& ctx) {
  if (ctx.mode.device == DeviceKind::cpu) return;
  place_on_device(ctx.graph, ctx.mode.device);
}

}  // namespace

void place_on_device(FunctionGraph& graph, DeviceKind device) {
  if (device == DeviceKind::cpu) return;
  Placer(device).run(graph);
}

void register_device_placement(RewriteDB& db) {
  db.add_phase("device_placement", kDevicePlacementPos, {"fast_run", "fast_compile"});
  db.add_global("device_placement", "place_on_device", {"fast_run", "fast_compile"}, 0, place_pass);
}

}  // namespace convgraph
