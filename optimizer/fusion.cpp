// Elementwise fusion (Theano's Composite/Elemwise fusion). After conv lowering, maximal
// groups of host elementwise nodes (unary, binary arithmetic and comparison, where, casts
// between float types; float32/float64 values, bool masks) become one "fused" node that
// runs a small straight-line program in cache-sized blocks (ops/fused_elementwise.cpp).
//
// A group grows from a root (visited consumers first) through its inputs; an input node
// joins only when every one of its clients is already in the group and it is not a
// graph output. So no intermediate is needed outside the group (nothing is recomputed),
// and the group is convex: a path leaving the group and coming back would have to leave
// through the root, which would be a cycle. A node with clients elsewhere ends the group
// and becomes the root of its own.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "convgraph/core/function_graph.hpp"
#include "ops/fused_elementwise.hpp"
#include "optimizer/passes.hpp"

namespace convgraph {

namespace {

using detail::ElementwiseInfo;
using detail::FusedInstr;
using detail::FusedProgram;

bool host_float(DType t) { return t == DType::float32 || t == DType::float64; }

bool fusible(const Var& v) {
  if (!v.op() || v.type().device != DeviceKind::cpu) return false;
  const ElementwiseInfo info = detail::elementwise_info(*v.op());
  const auto& in = v.inputs();
  if (info.cls == ElementwiseInfo::Class::none || static_cast<int>(in.size()) != info.arity) return false;
  for (const auto& i : in)
    if (i.type().device != DeviceKind::cpu) return false;
  switch (info.cls) {
    case ElementwiseInfo::Class::unary:
    case ElementwiseInfo::Class::binary:
      return host_float(in[0].dtype()) && std::all_of(in.begin(), in.end(), [&](const Var& i) { return i.dtype() == in[0].dtype(); });
    case ElementwiseInfo::Class::where:
      return in[0].dtype() == DType::boolean && host_float(in[1].dtype()) && in[2].dtype() == in[1].dtype();
    case ElementwiseInfo::Class::cast: return host_float(in[0].dtype()) && host_float(info.cast_to);
    default: return false;
  }
}

// A rank-0 float or bool constant becomes an immediate of the program.
bool immediate(const Var& v) {
  return v.is_constant() && v.rank() == 0 && (host_float(v.dtype()) || v.dtype() == DType::boolean);
}

struct Group {
  Var root;
  std::vector<Var> members;  // in topological order
};

// The program of one group, and the graph values its input registers read.
FusedProgram build_program(const Group& g, std::vector<Var>& inputs) {
  FusedProgram prog;
  std::unordered_map<const Node*, int> reg;
  std::unordered_set<const Node*> inside;
  for (const auto& m : g.members) inside.insert(m.node());
  // Input registers first (first use order), then constants and ops in topological order.
  for (const auto& m : g.members)
    for (const auto& in : m.inputs())
      if (!inside.count(in.node()) && !immediate(in) && !reg.count(in.node())) {
        reg[in.node()] = static_cast<int>(prog.inputs.size());
        prog.inputs.push_back(in.dtype());
        inputs.push_back(in);
      }
  const int nin = static_cast<int>(prog.inputs.size());
  auto emit = [&](const Node* n, FusedInstr ins) {
    reg[n] = nin + static_cast<int>(prog.code.size());
    prog.code.push_back(ins);
  };
  for (const auto& m : g.members) {
    for (const auto& in : m.inputs())
      if (immediate(in) && !reg.count(in.node())) {
        FusedInstr c;
        c.code = FusedInstr::Code::constant;
        c.dtype = in.dtype();
        c.value = in.constant_value()->get(0);
        emit(in.node(), c);
      }
    const ElementwiseInfo info = detail::elementwise_info(*m.op());
    FusedInstr ins;
    ins.dtype = m.dtype();
    const auto& in = m.inputs();
    ins.a = reg.at(in[0].node());
    if (in.size() > 1) ins.b = reg.at(in[1].node());
    if (in.size() > 2) ins.c = reg.at(in[2].node());
    switch (info.cls) {
      case ElementwiseInfo::Class::unary:
        ins.code = FusedInstr::Code::unary;
        ins.unary = info.unary;
        ins.param[0] = info.param[0];
        ins.param[1] = info.param[1];
        break;
      case ElementwiseInfo::Class::binary: ins.code = FusedInstr::Code::binary; ins.binary = info.binary; break;
      case ElementwiseInfo::Class::where: ins.code = FusedInstr::Code::where; break;
      default: ins.code = FusedInstr::Code::cast; break;
    }
    emit(m.node(), ins);
  }
  return prog;
}

void fuse_elementwise(RewriteContext& ctx) {
  FunctionGraph& graph = ctx.graph;
  const std::vector<Var> order = graph.toposort();
  std::unordered_map<const Node*, std::size_t> position;
  std::unordered_map<const Node*, std::vector<const Node*>> clients;
  for (std::size_t i = 0; i < order.size(); ++i) {
    position[order[i].node()] = i;
    for (const auto& in : order[i].inputs()) clients[in.node()].push_back(order[i].node());
  }
  std::unordered_set<const Node*> outputs, can_fuse, taken;
  for (const auto& o : graph.outputs()) outputs.insert(o.node());
  for (const auto& v : order)
    if (fusible(v)) can_fuse.insert(v.node());

  for (std::size_t i = order.size(); i-- > 0;) {
    const Var& root = order[i];
    if (!can_fuse.count(root.node()) || taken.count(root.node())) continue;
    taken.insert(root.node());
    std::unordered_set<const Node*> in_group{root.node()};
    std::vector<Var> members{root};
    // Grow to a fixed point: an input may become eligible once all its clients are in.
    for (bool grew = true; grew;) {
      grew = false;
      for (std::size_t m = 0; m < members.size(); ++m) {
        for (const auto& in : members[m].inputs()) {
          const Node* n = in.node();
          if (in_group.count(n) || taken.count(n) || !can_fuse.count(n) || outputs.count(n)) continue;
          const auto& cs = clients[n];
          if (!std::all_of(cs.begin(), cs.end(), [&](const Node* c) { return in_group.count(c) > 0; })) continue;
          in_group.insert(n);
          members.push_back(in);
          grew = true;
        }
      }
    }
    if (members.size() < 2) continue;
    for (const auto& m : members) taken.insert(m.node());
    std::sort(members.begin(), members.end(),
              [&](const Var& a, const Var& b) { return position.at(a.node()) < position.at(b.node()); });
    std::vector<Var> inputs;
    FusedProgram prog = build_program(Group{root, members}, inputs);
    Var fused = apply(detail::make_fused_elementwise(std::move(prog)), inputs, root.name());
    graph.replace(root, fused, ctx.current);
  }
}

}  // namespace

void register_fusion(RewriteDB& db) {
  db.add_phase("fusion", kFusionPos, {"fast_run"});
  db.add_global("fusion", "elemwise_fusion", {"fast_run"}, 0, fuse_elementwise);
}

}  // namespace convgraph
