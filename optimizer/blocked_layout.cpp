// The blocked_layout pass (fusion phase, after conv_epilogue_fusion): keeps the
// activations between consecutive forward convolutions in the blocked layout
// (N, C/16, spatial..., 16; ops/blocked_info.hpp) with conversions only at a region's edges.
//
// A region grows forward from the host float32 forward convolutions (one group, shapes
// known) through the ops that have blocked forms - relu, per-channel bias adds, residual
// adds of two activations, max and average pooling - and further convolutions; it may
// end in ops after the last convolution (a pooled tensor is cheaper to convert back than
// the convolution's output). Every op in it keeps the padded channels zero (relu(0) = 0,
// zero-padded bias, max/avg of zeros), so the next convolution reads them as it reads any
// channel. to_blocked goes on each tensor entering the region (once per tensor),
// from_blocked on each region value used outside it or returned, so the function's
// inputs and outputs stay NCHW.
//
// The region is rewritten only when it pays: the cost model's time of each convolution's
// chosen NCHW algorithm minus the blocked kernel's estimate must exceed the conversions'
// memory traffic (and the padded channels' extra traffic in the ops between). Under the
// meta-optimizer (conv_meta) the same sum is measured instead: each convolution is timed
// both ways, and the conversions too, on random data of the node's shapes.
//
// Training graphs (any gradient convolution) are left alone: the backward pass reads the
// forward activations in NCHW, so a region there would mostly add conversions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "convgraph/ops/layout.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "convgraph/optimizer/compile_stats.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "ops/blocked_info.hpp"
#include "ops/elementwise_info.hpp"
#include "optimizer/passes.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

using detail::ElementwiseInfo;
using detail::kConvBlock;

enum class Kind { none, conv, relu, add, bias, pool };

std::int64_t round_block(std::int64_t c) { return (c + kConvBlock - 1) / kConvBlock * kConvBlock; }

/// An NCHW activation the blocked ops take: float32 on the host, 1 to 3 spatial axes.
bool activation(const TensorType& t) {
  return t.dtype == DType::float32 && t.device == DeviceKind::cpu && t.rank() >= 3 && t.rank() <= 5 &&
         t.fully_known();
}

/// b is (1, K, 1, ...) for y (N, K, spatial...): a per-channel bias that to_blocked blocks.
bool channel_bias(const TensorType& b, const TensorType& y) {
  if (b.dtype != y.dtype || b.device != y.device || b.rank() != y.rank() || !b.fully_known()) return false;
  for (int d = 0; d < b.rank(); ++d)
    if (b.shape[static_cast<std::size_t>(d)] != (d == 1 ? y.shape[1] : 1)) return false;
  return true;
}

Kind kind_of(const Var& v) {
  if (!v.op() || !activation(v.type())) return Kind::none;
  if (const ConvImplOp* c = as_conv_impl(v)) {
    const bool ok = c->direction() == ConvDirection::forward && c->conv_params().groups == 1 &&
                    c->has_device_kernel(DeviceKind::cpu, {}) && activation(v.inputs()[0].type()) &&
                    v.inputs()[1].type().fully_known();
    return ok ? Kind::conv : Kind::none;
  }
  const ElementwiseInfo e = detail::elementwise_info(*v.op());
  if (e.cls == ElementwiseInfo::Class::unary && e.unary == detail::UnaryKind::relu && v.inputs()[0].type() == v.type())
    return Kind::relu;
  if (e.cls == ElementwiseInfo::Class::binary && e.binary == detail::BinaryKind::add) {
    const TensorType &a = v.inputs()[0].type(), &b = v.inputs()[1].type();
    if (a == v.type() && b == v.type()) return Kind::add;
    if ((a == v.type() && channel_bias(b, v.type())) || (b == v.type() && channel_bias(a, v.type())))
      return Kind::bias;
  }
  if (v.op()->kernel_key() == "bias_add" && v.inputs()[0].type() == v.type()) return Kind::bias;
  if (v.op()->kernel_key() == "pool") {
    const detail::PoolParams& p = detail::pool_params(*v.op());
    if (!p.relu_grad && p.dims <= v.rank() - 2 && activation(v.inputs()[0].type())) return Kind::pool;
  }
  return Kind::none;
}

/// The inputs of v that are activations in its blocked form (the rest - weights, biases -
/// stay as they are).
std::vector<std::size_t> data_inputs(const Var& v, Kind k) {
  switch (k) {
    case Kind::conv: {
      std::vector<std::size_t> out{0};
      if (as_conv_impl(v)->epilogue().residual) out.push_back(v.inputs().size() - 1);
      return out;
    }
    case Kind::add: return {0, 1};
    case Kind::bias: return {v.op()->kernel_key() != "bias_add" && !(v.inputs()[0].type() == v.type()) ? 1u : 0u};
    case Kind::relu:
    case Kind::pool: return {0};
    case Kind::none: break;
  }
  return {};
}

bool is_graph_output(const FunctionGraph& g, const Var& v) {
  for (const auto& o : g.outputs())
    if (o.same(v)) return true;
  return false;
}

/// The blocked kernel's estimate, in the terms of the convolution cost model
/// (backends/conv_cost.hpp): its arithmetic at the efficiency of a register tile that
/// wastes the padded channels' lanes and the last tile of each row, plus its traffic.
double blocked_seconds(const ConvProblem& p, const MachineModel& m) {
  const double k = static_cast<double>(p.K), c = static_cast<double>(p.C);
  const double lanes = k / static_cast<double>(round_block(p.K)) * c / static_cast<double>(round_block(p.C));
  const double row = static_cast<double>(p.out[p.ndim - 1]);
  const double tiles = row / (std::ceil(row / 6.0) * 6.0);
  const double reduction = static_cast<double>(round_block(p.C) * p.kernel_numel());
  const double eff = 0.9 * lanes * tiles * reduction / (reduction + 16.0);
  const double bytes = 4.0 * static_cast<double>(p.N * (round_block(p.C) * p.in_numel() + round_block(p.K) * p.out_numel()) +
                                                 3 * round_block(p.K) * round_block(p.C) * p.kernel_numel());
  return p.flops() / (m.flops_per_s() * eff) + bytes / m.bytes_per_s() + kConvCallSeconds;
}

/// Median seconds of three runs of op on random inputs of these types (after a warm-up).
double time_op(const OpPtr& op, const std::vector<TensorType>& types, ThreadPool& pool) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<Tensor> in;
  for (const auto& t : types) {
    Tensor x(t.dtype, t.shape);
    auto* d = static_cast<float*>(x.raw());
    for (std::int64_t i = 0; i < x.numel(); ++i) d[i] = dist(rng);
    in.push_back(std::move(x));
  }
  const TensorType ot = op->infer(types);
  Tensor out(ot.dtype, ot.shape);
  std::vector<std::uint8_t> ws(op->workspace_bytes(types) + 64);
  ExecContext ctx;
  ctx.pool = &pool;
  ctx.workspace = ws.data() + (64 - reinterpret_cast<std::uintptr_t>(ws.data()) % 64) % 64;
  ctx.workspace_bytes = ws.size() - 64;
  const KernelRegistry& reg = KernelRegistry::builtin();
  std::vector<double> s;
  for (int r = 0; r < 4; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    reg.run(*op, in, out, ctx);
    const auto t1 = std::chrono::steady_clock::now();
    if (r > 0) s.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[1];
}

/// The type to_blocked gives t.
TensorType blocked_type(TensorType t) {
  t.shape[1] = round_block(t.shape[1]) / kConvBlock;
  t.shape.push_back(kConvBlock);
  return t;
}

std::vector<TensorType> types_of(const std::vector<Var>& vs) {
  std::vector<TensorType> out;
  for (const auto& v : vs) out.push_back(v.type());
  return out;
}

std::string ms_text(double s) { return msg(std::round(s * 1e6) / 1e3, " ms"); }

struct Region {
  std::vector<Var> nodes;    ///< topological order
  std::vector<Var> entries;  ///< NCHW tensors converted into the region (once each)
  std::vector<Var> exits;    ///< region values used outside it or returned
  int convs = 0;
};

void block_layouts(RewriteContext& ctx, bool forced) {
  FunctionGraph& graph = ctx.graph;
  const std::vector<Var> order = graph.toposort();
  for (const Var& v : order)
    if (const ConvImplOp* c = as_conv_impl(v); c && c->direction() != ConvDirection::forward) {
      ctx.stats.notes.push_back("blocked_layout: training graph (gradient convolutions) left in NCHW");
      return;
    }

  // Membership, forward from the convolutions, and regions as connected components.
  std::map<Node*, Kind> kind;
  std::map<Node*, Node*> parent;  // union-find
  auto find = [&](Node* n) {
    while (parent[n] != n) n = parent[n] = parent[parent[n]];
    return n;
  };
  for (const Var& v : order) {
    const Kind k = kind_of(v);
    if (k == Kind::none) continue;
    bool joined = k == Kind::conv;
    for (std::size_t i : data_inputs(v, k)) joined = joined || kind.count(v.inputs()[i].node());
    if (!joined) continue;
    kind[v.node()] = k;
    parent[v.node()] = v.node();
    for (std::size_t i : data_inputs(v, k))
      if (Node* u = v.inputs()[i].node(); kind.count(u)) parent[find(u)] = find(v.node());
  }
  std::map<Node*, Region> regions;
  for (const Var& v : order)
    if (kind.count(v.node())) {
      Region& r = regions[find(v.node())];
      r.nodes.push_back(v);
      r.convs += kind[v.node()] == Kind::conv;
    }

  const MachineModel machine = measured_machine(ctx.mode.threads);
  const bool timed = std::find(ctx.mode.include_tags.begin(), ctx.mode.include_tags.end(), "conv_meta") !=
                     ctx.mode.include_tags.end();
  std::unique_ptr<ThreadPool> own_pool;
  auto pool = [&]() -> ThreadPool& {
    if (ctx.mode.threads <= 0 || ctx.mode.threads == ThreadPool::default_pool().size())
      return ThreadPool::default_pool();
    if (!own_pool) own_pool = std::make_unique<ThreadPool>(ctx.mode.threads);
    return *own_pool;
  };

  int index = 0;
  for (auto& [root, r] : regions) {
    ++index;
    // Edges: tensors entering (data inputs from outside), values leaving.
    for (const Var& v : r.nodes)
      for (std::size_t i : data_inputs(v, kind[v.node()])) {
        const Var& u = v.inputs()[i];
        const bool inside = kind.count(u.node()) && find(u.node()) == root;
        if (!inside && std::none_of(r.entries.begin(), r.entries.end(), [&](const Var& e) { return e.same(u); }))
          r.entries.push_back(u);
      }
    for (const Var& v : r.nodes) {
      bool out = is_graph_output(graph, v);
      for (const auto& [client, pos] : graph.clients(v)) {
        const bool inside = kind.count(client.node()) && find(client.node()) == root;
        const auto di = inside ? data_inputs(client, kind[client.node()]) : std::vector<std::size_t>{};
        out = out || !inside || std::find(di.begin(), di.end(), static_cast<std::size_t>(pos)) == di.end();
      }
      if (out) r.exits.push_back(v);
    }

    // The decision: the convolutions' saving against the conversions.
    double saving = 0, conversions = 0;
    std::string how = forced ? "forced" : timed ? "timed" : "cost model";
    try {
      for (const Var& v : r.nodes) {
        if (kind[v.node()] != Kind::conv) {
          // Ops between convolutions touch the padded channels too.
          const double pad = static_cast<double>(round_block(v.shape()[1]) - v.shape()[1]) /
                             static_cast<double>(v.shape()[1]);
          saving -= pad * 8.0 * static_cast<double>(numel(v.type().shape)) / machine.bytes_per_s();
          continue;
        }
        const ConvImplOp& c = *as_conv_impl(v);
        const ConvProblem p = c.problem(types_of(v.inputs()));
        if (forced) continue;
        if (timed) {
          const auto blocked = std::make_shared<detail::BlockedConvOp>(
              std::make_shared<AbstractConvOp>(ConvDirection::forward, c.conv_params()), p.C,
              detail::BlockedConvOp::Epilogue{c.epilogue().bias, c.epilogue().residual,
                                              c.epilogue().activation == ConvActivation::relu});
          std::vector<TensorType> bt = types_of(v.inputs());
          bt[0] = blocked_type(bt[0]);
          if (c.epilogue().residual) bt.back() = blocked_type(bt.back());
          saving += time_op(v.node()->op, types_of(v.inputs()), pool()) - time_op(blocked, bt, pool());
        } else {
          const ConvAlgorithm* a = c.algorithm();
          const double t = a ? a->estimated_seconds(p, machine) : INFINITY;
          if (!std::isfinite(t)) {
            how = "no estimate for " + (a ? a->name() : std::string("a run-time choice"));
            saving = -INFINITY;
            break;
          }
          saving += t - blocked_seconds(p, machine);
        }
      }
      for (const auto* list : {&r.entries, &r.exits})
        for (const Var& e : *list) {
          const bool in = list == &r.entries;
          if (forced) continue;
          if (timed) {
            const Var probe = input(e.dtype(), e.shape());
            const Var blocked = to_blocked(probe, kConvBlock);
            conversions += in ? time_op(blocked.node()->op, {e.type()}, pool())
                              : time_op(from_blocked(probe, e.shape()[1]).node()->op, {blocked.type()}, pool());
          } else {
            const double n = static_cast<double>(numel(e.type().shape));
            conversions += 4.0 * n * (1 + static_cast<double>(round_block(e.shape()[1])) /
                                              static_cast<double>(e.shape()[1])) / machine.bytes_per_s() +
                           kConvCallSeconds;
          }
        }
    } catch (const Error& e) {
      saving = -INFINITY;
      how = msg("not judged: ", e.what());
    }
    const bool apply_it = forced || saving > conversions;
    const std::string why = msg("layout region ", index, ": ", r.nodes.size(), " ops, ", r.convs, " convs, ",
                                r.entries.size() + r.exits.size(), " conversions; ", how, ": saves ",
                                std::isfinite(saving) ? ms_text(saving) : std::string("?"), " vs conversions ",
                                ms_text(conversions));
    ctx.stats.notes.push_back(msg("blocked_layout: ", why, apply_it ? " -> blocked" : " -> NCHW kept"));
    if (!apply_it) continue;

    // The rewrite: blocked forms of the region's ops, converted at the edges.
    std::map<Node*, Var> blocked;
    auto b = [&](const Var& u) -> Var {
      if (auto it = blocked.find(u.node()); it != blocked.end()) return it->second;
      return blocked[u.node()] = to_blocked(u, kConvBlock);
    };
    for (const Var& v : r.nodes) {
      const Var* ins = v.inputs().data();
      Var out;
      switch (kind[v.node()]) {
        case Kind::conv: {
          const ConvImplOp& c = *as_conv_impl(v);
          const detail::BlockedConvOp::Epilogue e{c.epilogue().bias, c.epilogue().residual, c.epilogue().activation == ConvActivation::relu};
          auto op = std::make_shared<detail::BlockedConvOp>(
              std::make_shared<AbstractConvOp>(ConvDirection::forward, c.conv_params()), ins[0].shape()[1], e, why);
          std::vector<Var> args{b(ins[0]), ins[1]};
          if (e.bias) args.push_back(ins[2]);
          if (e.residual) args.push_back(b(v.inputs().back()));
          out = apply(op, args, v.name());
          break;
        }
        case Kind::relu: out = apply(v.node()->op, {b(ins[0])}, v.name()); break;
        case Kind::add: out = apply(v.node()->op, {b(ins[0]), b(ins[1])}, v.name()); break;
        case Kind::bias: {
          const std::size_t x = data_inputs(v, Kind::bias)[0];
          const Var& bias = ins[1 - x];
          const Var bb = bias.rank() == 1 ? reshape(bias, Shape{1, bias.shape()[0]}) : bias;
          Shape s(static_cast<std::size_t>(v.rank()) + 1, 1);
          s[1] = round_block(v.shape()[1]) / kConvBlock;
          s.back() = kConvBlock;
          out = b(ins[x]) + reshape(to_blocked(bb, kConvBlock), s);
          out.named(v.name());
          break;
        }
        case Kind::pool:
          out = apply(std::make_shared<detail::BlockedPoolOp>(detail::pool_params(*v.op())), {b(ins[0])}, v.name());
          break;
        case Kind::none: break;
      }
      blocked[v.node()] = out;
    }
    for (const Var& v : r.exits) {
      Var back = from_blocked(blocked[v.node()], v.shape()[1]);
      back.named(v.name());
      graph.replace(v, back, ctx.current);
    }
  }
}

}  // namespace

void register_blocked_layout(RewriteDB& db) {
  // After conv_epilogue_fusion (-1), so the convolutions carry their epilogues, and before
  // elemwise_fusion (0), which would take the relus and adds into fused nodes.
  db.add_global("fusion", "blocked_layout", {"fast_run", "blocked_layout"}, -0.5,
                [](RewriteContext& ctx) { block_layouts(ctx, false); });
  // Every region, whatever the cost model says (tests and experiments): opt-in only.
  db.add_global("fusion", "blocked_layout_forced", {"blocked_layout_forced"}, -0.6,
                [](RewriteContext& ctx) { block_layouts(ctx, true); });
}

}  // namespace convgraph
