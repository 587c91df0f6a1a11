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
// Which ops of a region run blocked is decided per op: the cost model estimates each op in
// both layouts (a convolution: its chosen NCHW algorithm's estimate against the blocked
// kernel's - FLOPs at the efficiency of its register tile, with the padded channels' lanes
// and last row tile wasted; the other ops: their traffic, padded when blocked) and each
// conversion (its traffic), and, from every op blocked, flips single ops to the other layout
// while the total falls. So a convolution on few channels (a network's first) stays NCHW
// and the conversion moves to the cheapest tensor. Under the meta-optimizer (conv_meta) the
// whole region is run instead - the cost model's choice, all NCHW and all blocked, every op
// and conversion, on random data of its shapes, warm-up excluded, median of five
// interleaved runs - and the fastest kept (cached per region signature).
//
// Training graphs (any gradient convolution) are left alone: the backward pass reads the
// forward activations in NCHW, so a region there would mostly add conversions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>

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


/// Floats of t in the blocked form (its channels rounded up to the block).
double padded_numel(const TensorType& t) {
  return static_cast<double>(numel(t.shape)) * static_cast<double>(round_block(t.shape[1])) /
         static_cast<double>(t.shape[1]);
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
  // A tile keeps 6 pixels x up to 4 output blocks in flight: with one block (K <= 16) its
  // 6 accumulator chains, each waiting on its last FMA, reach about 60% of the rate of
  // wider tiles (measured on resnet8's 16-channel layers).
  const double chains = 6.0 * std::min(4.0, static_cast<double>(round_block(p.K) / kConvBlock));
  // 0.75 at best: measured against cpu.direct's estimate (the same kind of kernel) on
  // 16-128 channels, 3x3 and 5x5, at 2 threads, so that the two are compared alike.
  const double eff = 0.75 * lanes * tiles * reduction / (reduction + 16.0) * std::min(1.0, chains / 10.0);
  const double bytes = 4.0 * static_cast<double>(p.N * (round_block(p.C) * p.in_numel() + round_block(p.K) * p.out_numel()) +
                                                 3 * round_block(p.K) * round_block(p.C) * p.kernel_numel());
  return p.flops() / (m.flops_per_s() * eff) + bytes / m.bytes_per_s() + kConvCallSeconds;
}

/// A conversion's estimate: it reads one form and writes the other.
double conversion_seconds(const TensorType& t, const MachineModel& m) {
  return 4.0 * (static_cast<double>(numel(t.shape)) + padded_numel(t)) / m.bytes_per_s() + kConvCallSeconds;
}

std::vector<TensorType> types_of(const std::vector<Var>& vs) {
  std::vector<TensorType> out;
  for (const auto& v : vs) out.push_back(v.type());
  return out;
}

std::string ms_text(double s) { return msg(std::round(s * 1e6) / 1e3, " ms"); }

/// One op of a region, with what the decision needs.
struct Member {
  Var v;
  Kind kind = Kind::none;
  std::vector<std::pair<Var, int>> in;  ///< data inputs and their member index (-1: outside)
  std::vector<int> readers;             ///< members reading it as data
  bool leaves = false;                  ///< read outside the region, as a non-data input, or returned
  double nchw = 0, blocked = 0;         ///< estimated seconds in each layout (blocked: inf if unknown)
  std::string estimate;                 ///< the convolution's estimates, for describe()
};
using Labels = std::vector<char>;  // per member: 1 blocked, 0 NCHW

/// The estimated time of a labelling: each member in its layout, one to_blocked per NCHW
/// tensor a blocked member reads, one from_blocked per blocked member read in NCHW.
double labelled_seconds(const std::vector<Member>& r, const Labels& l, const MachineModel& m, int* conversions = nullptr) {
  double s = 0;
  int n = 0;
  std::vector<Node*> converted;
  for (std::size_t i = 0; i < r.size(); ++i) {
    s += l[i] ? r[i].blocked : r[i].nchw;
    if (!l[i]) continue;
    for (const auto& [u, j] : r[i].in)
      if ((j < 0 || !l[static_cast<std::size_t>(j)]) &&
          std::find(converted.begin(), converted.end(), u.node()) == converted.end()) {
        converted.push_back(u.node());
        s += conversion_seconds(u.type(), m), ++n;
      }
    if (r[i].leaves || std::any_of(r[i].readers.begin(), r[i].readers.end(), [&](int j) { return !l[static_cast<std::size_t>(j)]; }))
      s += conversion_seconds(r[i].v.type(), m), ++n;
  }
  if (conversions) *conversions = n;
  return s;
}

/// The share of a region's NCHW estimate a blocked labelling must save.
constexpr double kMargin = 0.95;

/// The cost model's labelling: from every member blocked that can be, members flip to the
/// other layout while that lowers the estimate - one at a time, or a connected run of
/// members in the same layout at once (so a chain that does not pay goes back to NCHW
/// although each of its ops alone would only add conversions) - so a region sheds the
/// convolutions blocking does not suit (few channels) and moves its conversions to the
/// cheapest tensors.
Labels model_labels(const std::vector<Member>& r, const MachineModel& m) {
  Labels l(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) l[i] = std::isfinite(r[i].blocked);
  double best = labelled_seconds(r, l, m);
  // The members connected to i through data edges between members labelled as i is.
  auto run = [&](std::size_t i) {
    std::vector<std::size_t> out{i}, todo{i};
    while (!todo.empty()) {
      const std::size_t k = todo.back();
      todo.pop_back();
      std::vector<int> next = r[k].readers;
      for (const auto& in : r[k].in) next.push_back(in.second);
      for (int j : next) {
        const auto u = static_cast<std::size_t>(j);
        if (j >= 0 && l[u] == l[i] && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u), todo.push_back(u);
      }
    }
    return out;
  };
  auto try_flip = [&](const std::vector<std::size_t>& set) {
    for (std::size_t k : set)
      if (!l[k] && !std::isfinite(r[k].blocked)) return false;
    for (std::size_t k : set) l[k] ^= 1;
    const double t = labelled_seconds(r, l, m);
    if (t < best * (1 - 1e-9)) return best = t, true;
    for (std::size_t k : set) l[k] ^= 1;
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < r.size(); ++i) changed = try_flip({i}) || changed;
    for (std::size_t i = 0; i < r.size(); ++i) changed = try_flip(run(i)) || changed;
  }
  return l;
}

/// The blocked forms of the members labelled blocked, converted at the edges; returns the
/// (member, NCHW replacement) pairs for the blocked members read in NCHW.
std::vector<std::pair<Var, Var>> build(const std::vector<Member>& r, const Labels& l,
                                       const std::function<std::string(std::size_t)>& why) {
  std::vector<Var> blocked(r.size());
  std::map<Node*, Var> entering;
  auto b = [&](const std::pair<Var, int>& in) -> Var {
    if (in.second >= 0 && l[static_cast<std::size_t>(in.second)]) return blocked[static_cast<std::size_t>(in.second)];
    auto it = entering.find(in.first.node());
    return it != entering.end() ? it->second : entering[in.first.node()] = to_blocked(in.first, kConvBlock);
  };
  std::vector<std::pair<Var, Var>> exits;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (!l[i]) continue;
    const Member& m = r[i];
    const Var& v = m.v;
    const Var* ins = v.inputs().data();
    Var out;
    switch (m.kind) {
      case Kind::conv: {
        const ConvImplOp& c = *as_conv_impl(v);
        const detail::BlockedConvOp::Epilogue e{c.epilogue().bias, c.epilogue().residual,
                                                c.epilogue().activation == ConvActivation::relu};
        auto op = std::make_shared<detail::BlockedConvOp>(
            std::make_shared<AbstractConvOp>(ConvDirection::forward, c.conv_params()), ins[0].shape()[1], e, why(i));
        std::vector<Var> args;  // (no initializer list: GCC 12 warns of a bound it misreads)
        args.push_back(b(m.in[0]));
        args.push_back(ins[1]);
        if (e.bias) args.push_back(ins[2]);
        if (e.residual) args.push_back(b(m.in[1]));
        out = apply(op, args, v.name());
        break;
      }
      case Kind::relu: out = apply(v.node()->op, {b(m.in[0])}, v.name()); break;
      case Kind::add: out = apply(v.node()->op, {b(m.in[0]), b(m.in[1])}, v.name()); break;
      case Kind::bias: {
        const std::size_t x = data_inputs(v, Kind::bias)[0];
        const Var& bias = ins[1 - x];
        const Var bb = bias.rank() == 1 ? reshape(bias, Shape{1, bias.shape()[0]}) : bias;
        Shape s(static_cast<std::size_t>(v.rank()) + 1, 1);
        s[1] = round_block(v.shape()[1]) / kConvBlock;
        s.back() = kConvBlock;
        out = b(m.in[0]) + reshape(to_blocked(bb, kConvBlock), s);
        out.named(v.name());
        break;
      }
      case Kind::pool:
        out = apply(std::make_shared<detail::BlockedPoolOp>(detail::pool_params(*v.op())), {b(m.in[0])}, v.name());
        break;
      case Kind::none: break;
    }
    blocked[i] = out;
    if (m.leaves || std::any_of(m.readers.begin(), m.readers.end(), [&](int j) { return !l[static_cast<std::size_t>(j)]; })) {
      Var back = from_blocked(out, v.shape()[1]);
      back.named(v.name());
      exits.emplace_back(v, back);
    }
  }
  return exits;
}

/// What a labelling runs: the new nodes behind its exits (to_blocked, blocked ops,
/// from_blocked) and the members left in NCHW, in an order that runs.
std::vector<Var> program(const std::vector<Member>& r, const Labels& l, const std::vector<std::pair<Var, Var>>& exits,
                         const std::set<Node*>& before) {
  std::vector<Var> out;
  std::set<Node*> seen;
  std::function<void(const Var&)> visit = [&](const Var& v) {
    if (!v.op() || before.count(v.node()) || !seen.insert(v.node()).second) return;
    for (const Var& u : v.inputs()) visit(u);
    out.push_back(v);
  };
  for (const auto& e : exits) visit(e.second);
  for (std::size_t i = 0; i < r.size(); ++i)
    if (!l[i]) out.push_back(r[i].v);
  return out;
}

/// Median seconds of each program (warm-up excluded, runs interleaved so that a change in
/// the machine's load hits all alike). Values a program does not compute are random
/// inputs, the same for all.
std::vector<double> time_programs(const std::vector<std::vector<Var>>& progs, ThreadPool& pool) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::map<Node*, Tensor> given;
  auto input_value = [&](const Var& u) -> Tensor {
    if (auto it = given.find(u.node()); it != given.end()) return it->second;
    Tensor t = Tensor::zeros(u.dtype(), u.shape());
    if (u.dtype() == DType::float32)
      for (std::int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.raw())[i] = dist(rng);
    return given[u.node()] = t;
  };
  struct Step {
    const Op* op;
    std::vector<std::pair<int, Tensor>> in;  ///< (step, -1: the given tensor)
    Tensor out;
  };
  std::vector<std::vector<Step>> runs;
  std::size_t ws = 0;
  for (const auto& prog : progs) {
    std::map<Node*, int> at;
    std::vector<Step>& steps = runs.emplace_back();
    for (const Var& v : prog) {
      Step s{v.op(), {}, Tensor(v.dtype(), v.shape())};
      for (const Var& u : v.inputs())
        s.in.push_back(at.count(u.node()) ? std::pair<int, Tensor>{at[u.node()], Tensor()} : std::pair<int, Tensor>{-1, input_value(u)});
      ws = std::max(ws, v.op()->workspace_bytes(types_of(v.inputs())));
      at[v.node()] = static_cast<int>(steps.size());
      steps.push_back(std::move(s));
    }
  }
  std::vector<std::uint8_t> buffer(ws + 64);
  ExecContext ctx;
  ctx.pool = &pool;
  ctx.workspace = buffer.data() + (64 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 64) % 64;
  ctx.workspace_bytes = ws;
  const KernelRegistry& reg = KernelRegistry::builtin();
  auto run = [&](std::vector<Step>& steps) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> in;
    for (Step& s : steps) {
      in.clear();
      for (const auto& [j, t] : s.in) in.push_back(j < 0 ? t : steps[static_cast<std::size_t>(j)].out);
      reg.run(*s.op, in, s.out, ctx);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  constexpr int kRuns = 5;
  std::vector<std::vector<double>> s(runs.size());
  for (int rep = 0; rep <= kRuns; ++rep)
    for (std::size_t p = 0; p < runs.size(); ++p)
      if (const double t = run(runs[p]); rep > 0) s[p].push_back(t);
  std::vector<double> med;
  for (auto& x : s) {
    std::sort(x.begin(), x.end());
    med.push_back(x[kRuns / 2]);
  }
  return med;
}

/// What identifies a region for the timing cache: its ops, types and wiring, and threads.
std::string signature(const std::vector<Member>& r, int threads) {
  std::ostringstream os;
  os << threads;
  for (const Member& m : r) {
    os << ';' << m.v.op()->name() << '(' << m.v.op()->params() << ')' << m.leaves;
    for (const Var& u : m.v.inputs()) os << ',' << u.type().to_string();
    for (const auto& in : m.in) os << '<' << in.second;
  }
  return os.str();
}

/// The most memory conv_meta's region timing may take (beyond, the cost model decides).
constexpr double kTimedBytes = 1024.0 * (1 << 20);

/// conv_meta's decisions, per region signature: the labelling that ran fastest.
std::mutex timed_mutex;
std::map<std::string, Labels>& timed_cache() {
  static std::map<std::string, Labels> cache;
  return cache;
}

/// A labelling as text ("0110": NCHW or blocked per op) for the tuning agreement, and back
/// (nothing when the text does not fit a region of n ops).
std::string labels_text(const Labels& l) {
  std::string s;
  for (const int b : l) s += b ? '1' : '0';
  return s;
}
std::optional<Labels> labels_from_text(const std::string& s, std::size_t n) {
  if (s.size() != n || s.find_first_not_of("01") != std::string::npos) return std::nullopt;
  Labels l(n);
  for (std::size_t i = 0; i < n; ++i) l[i] = s[i] == '1';
  return l;
}

std::string count_text(const Labels& l) {
  return msg(std::count(l.begin(), l.end(), 1), " of ", l.size(), " ops blocked");
}

/// conv_meta's timing of one region: runs it in each candidate labelling - all NCHW, the
/// cost model's best (whatever its margin), all blocked, and all but the ops the model rules
/// out - and sets `l` to the fastest, with the times in `how`. When it cannot time (one
/// candidate, too much memory, a failed run) `l` stays and `how` says why.
void time_labellings(const std::vector<Member>& r, const Labels& model, const std::set<Node*>& before,
                     const std::function<ThreadPool&()>& pool, Labels& l, std::string& how) {
  const Labels none(r.size(), 0);
  std::vector<Labels> cands{none, model};
  // All blocked, and all the model does not rule out: the convolutions blocked within
  // 1.5x of NCHW, and the other ops that read a blocked value.
  Labels all(r.size()), plausible(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    all[i] = std::isfinite(r[i].blocked);
    plausible[i] = r[i].kind == Kind::conv ? r[i].blocked <= 1.5 * r[i].nchw
                                           : std::any_of(r[i].in.begin(), r[i].in.end(), [&](const auto& in) {
                                               return in.second >= 0 && plausible[static_cast<std::size_t>(in.second)];
                                             });
  }
  cands.push_back(all);
  cands.push_back(plausible);
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  try {
    if (cands.size() == 1) throw CompileError("one candidate");
    std::vector<std::vector<Var>> progs;
    double bytes = 0;  // every value of every candidate is held at once
    for (const Labels& c : cands) {
      progs.push_back(program(r, c, build(r, c, [](std::size_t) { return std::string(); }), before));
      for (const Var& v : progs.back()) bytes += static_cast<double>(numel(v.type().shape) * dtype_size(v.dtype()));
    }
    if (bytes > kTimedBytes)
      throw MemoryError(msg("the candidates' values need ", bytes / (1 << 20), " MiB (limit ", kTimedBytes / (1 << 20), ")"));
    const std::vector<double> s = time_programs(progs, pool());
    const std::size_t best = static_cast<std::size_t>(std::min_element(s.begin(), s.end()) - s.begin());
    how = "timed:";
    for (std::size_t i = 0; i < cands.size(); ++i)
      how += msg(i ? ", " : " ", cands[i] == none ? std::string("NCHW") : count_text(cands[i]), " ", ms_text(s[i]));
    l = cands[best];
  } catch (const Error& e) {
    how += msg("; not timed: ", e.what());  // the cost model's decision stands
  }
}

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
  // Regions in the order of their first op: the same on every rank of a job (the tuning
  // agreement below pairs each rank's regions by that order), unlike node addresses.
  std::vector<std::vector<Member>> regions;
  std::map<Node*, std::size_t> region_of_root;
  for (const Var& v : order)
    if (kind.count(v.node())) {
      Member m;
      m.v = v;
      m.kind = kind[v.node()];
      const auto [it, fresh] = region_of_root.emplace(find(v.node()), regions.size());
      if (fresh) regions.emplace_back();
      regions[it->second].push_back(std::move(m));
    }

  const MachineModel machine = measured_machine(ctx.mode.threads);
  const bool timed = !forced && std::find(ctx.mode.include_tags.begin(), ctx.mode.include_tags.end(), "conv_meta") !=
                                    ctx.mode.include_tags.end();
  std::unique_ptr<ThreadPool> own_pool;
  auto pool = [&]() -> ThreadPool& {
    if (ctx.mode.threads <= 0 || ctx.mode.threads == ThreadPool::default_pool().size())
      return ThreadPool::default_pool();
    if (!own_pool) own_pool = std::make_unique<ThreadPool>(ctx.mode.threads);
    return *own_pool;
  };
  std::set<Node*> before;
  for (const Var& v : order) before.insert(v.node());

  int index = 0;
  for (std::vector<Member>& r : regions) {
    ++index;
    // Wiring and the per-op estimates.
    std::map<Node*, int> at;
    for (std::size_t i = 0; i < r.size(); ++i) at[r[i].v.node()] = static_cast<int>(i);
    for (std::size_t i = 0; i < r.size(); ++i) {
      Member& m = r[i];
      const std::vector<std::size_t> di = data_inputs(m.v, m.kind);
      for (std::size_t k : di) {
        const Var& u = m.v.inputs()[k];
        const int j = at.count(u.node()) ? at[u.node()] : -1;
        m.in.emplace_back(u, j);
        if (j >= 0) r[static_cast<std::size_t>(j)].readers.push_back(static_cast<int>(i));
      }
      m.leaves = is_graph_output(graph, m.v);
      for (const auto& [client, pos] : graph.clients(m.v)) {
        const auto it = at.find(client.node());
        const auto cd = it == at.end() ? std::vector<std::size_t>{} : data_inputs(client, r[static_cast<std::size_t>(it->second)].kind);
        m.leaves = m.leaves || it == at.end() || std::find(cd.begin(), cd.end(), static_cast<std::size_t>(pos)) == cd.end();
      }
    }
    std::string trouble;
    for (Member& m : r) {
      if (m.kind != Kind::conv) {
        // Memory-bound: its data inputs and output, padded in the blocked form.
        double n = static_cast<double>(numel(m.v.type().shape)), nb = padded_numel(m.v.type());
        for (const auto& in : m.in) n += static_cast<double>(numel(in.first.type().shape)), nb += padded_numel(in.first.type());
        m.nchw = 4 * n / machine.bytes_per_s() + kConvCallSeconds;
        m.blocked = 4 * nb / machine.bytes_per_s() + kConvCallSeconds;
        continue;
      }
      const ConvImplOp& c = *as_conv_impl(m.v);
      try {
        const ConvProblem p = c.problem(types_of(m.v.inputs()));
        const ConvAlgorithm* a = c.algorithm();
        m.nchw = a ? a->estimated_seconds(p, machine) : INFINITY;
        m.blocked = blocked_seconds(p, machine);
        m.estimate = msg(a ? a->name() : std::string("run-time choice"), " ", ms_text(m.nchw), " vs blocked ", ms_text(m.blocked));
        // No estimate for the NCHW form: keep it (a choice the model cannot judge).
        if (!std::isfinite(m.nchw)) m.nchw = 0, m.blocked = INFINITY;
      } catch (const Error& e) {
        m.nchw = 0, m.blocked = INFINITY;
        trouble = msg("; not judged: ", e.what());
      }
    }

    // The decision.
    Labels l(r.size(), 1);
    const Labels none(r.size(), 0);
    std::string how = "forced";
    double nchw_s = 0;
    for (const Member& m : r) nchw_s += m.nchw;
    Labels model = l;
    if (!forced) {
      model = model_labels(r, machine);
      int n = 0;
      const double chosen = labelled_seconds(r, model, machine, &n);
      how = msg("cost model: NCHW ", ms_text(nchw_s), ", best ", count_text(model), " ", ms_text(chosen), " (", n, " conversions)");
      // The estimates are good to some ten percent: a region whose saving is within that
      // of its cost stays NCHW (no conversions, the algorithms the rest of the graph expects).
      l = chosen <= kMargin * nchw_s ? model : none;
    }
    if (timed) {
      // The meta-optimizer runs the whole region in each layout - every op and conversion,
      // on random data of its shapes - and keeps the fastest (time_labellings). Under a
      // tuning agreement (a data-parallel job) rank 0 decides and every rank takes its
      // labelling, so all run the same kernels.
      const std::string key = signature(r, ctx.mode.threads);
      std::unique_lock lock(timed_mutex);
      const auto decide = [&]() -> std::string {
        if (auto it = timed_cache().find(key); it != timed_cache().end()) {
          l = it->second;
          how = msg("timed (cached): ", count_text(l));
        } else {
          time_labellings(r, model, before, pool, l, how);
          timed_cache()[key] = l;
        }
        return labels_text(l) + "\n" + how;
      };
      if (const std::optional<std::string> theirs = rank0_choice(decide)) {
        const std::size_t nl = theirs->find('\n');
        if (const auto agreed = labels_from_text(theirs->substr(0, nl), r.size())) {
          l = *agreed;
          how = "chosen on rank 0: " + (nl == std::string::npos ? std::string() : theirs->substr(nl + 1));
        } else {
          how += "; rank 0's labelling does not fit this region, the cost model's stands";
        }
      }
    }
    int convs = 0, blocked_convs = 0;
    for (std::size_t i = 0; i < r.size(); ++i)
      if (r[i].kind == Kind::conv) ++convs, blocked_convs += l[i];
    const bool any = blocked_convs > 0;  // (blocked pooling alone saves nothing worth a conversion)
    const std::string why = msg("layout region ", index, ": ", r.size(), " ops, ", convs, " convs; ", how, trouble);
    ctx.stats.notes.push_back(msg("blocked_layout: ", why,
                                  any ? msg(" -> blocked (", blocked_convs, " convs)") : std::string(" -> NCHW kept")));
    if (!any) continue;
    for (const auto& [v, back] : build(r, l, [&](std::size_t i) {
           return r[i].estimate.empty() ? why : msg("layout region ", index, ", ", how.substr(0, how.find(':')), ": ", r[i].estimate);
         }))
      graph.replace(v, back, ctx.current);
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
