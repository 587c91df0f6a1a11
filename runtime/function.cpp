// compile() and Function: optimize a private clone of the graph, then run it as a
// linear schedule of kernels over an arena planned from value lifetimes.
#include "convgraph/runtime/function.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/core/print.hpp"
#include "convgraph/optimizer/optimize.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "core/checked_math.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/fused_elementwise.hpp"
#include "backends/device_buffers.hpp"
#include "runtime/chrome_trace.hpp"
#include "runtime/exit_profiles.hpp"
#include "runtime/memory_planner.hpp"

namespace convgraph {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string node_label(const Var& v) {
  std::string s = "#" + std::to_string(v.node()->id) + " " +
                  (v.op() ? v.op()->name() : v.is_constant() ? "constant" : v.is_shared() ? "shared" : "input");
  if (!v.name().empty()) s += " '" + v.name() + "'";
  return s;
}

std::string arg_label(std::size_t i, const Var& in) {
  return "argument " + std::to_string(i) + (in.name().empty() ? "" : " ('" + in.name() + "')");
}

std::string join_labels(const std::vector<std::string>& labels) {
  std::string s;
  for (std::size_t i = 0; i < labels.size(); ++i) s += (i ? ", " : "") + labels[i];
  return s;
}

std::string update_label(std::size_t i, const Var& var) {
  return msg("update ", i, " (of shared variable ", var.name().empty() ? "#" + std::to_string(var.node()->id) : "'" + var.name() + "'", ")");
}

/// Ops whose kernel may write its output over an input of the output's shape: each
/// output element depends only on the input elements at the same index, read first.
bool writes_over_input(const Op& op) {
  using Class = detail::ElementwiseInfo::Class;
  const Class c = detail::elementwise_info(op).cls;
  return c == Class::unary || c == Class::binary || c == Class::where || detail::fused_program(op) != nullptr;
}
}  // namespace

struct Function::Impl {
  FunctionGraph graph;
  Mode mode;
  CompileStats stats;
  std::vector<Var> order;                          // every node, inputs first
  std::unordered_map<const Node*, int> slot;       // node -> index in order
  std::vector<int> last_use;                       // per slot: last step reading it
  std::unique_ptr<ThreadPool> own_pool;
  ThreadPool* pool = nullptr;

  // State: graph.outputs() is the user's outputs, then the update values.
  std::size_t n_outputs = 0;
  struct Update {
    std::shared_ptr<SharedSlot> cell;
    Var var;               // the user's variable (its type and name)
    int value = -1;        // slot of the new value
    bool in_place = false; // the value's node writes into the variable's storage
    bool copy = true;      // the value's buffer is not ours to give away: store a copy
  };
  std::vector<Update> updates;
  std::vector<int> in_place_target;                // per slot: the shared node it overwrites, or -1
  std::vector<std::shared_ptr<SharedSlot>> cells;  // every variable read or updated, in node-id order

  struct Plan {
    std::vector<Shape> arg_shapes;
    std::vector<TensorType> types;        // concrete, per slot
    std::vector<std::int64_t> offset;     // arena byte offset per slot, -1 if not in the arena
    std::size_t arena_bytes = 0, total_bytes = 0;
    std::size_t workspace_bytes[2] = {0, 0};  // per device: one shared scratch each
  };
  // Thread safety. Calls run one at a time under run_mu: they share the plan, the arena
  // and the workspaces, and ops keep per-node state (a conv's per-shape choice). What
  // accessors read (the byte counts, the profile) is published under stats_mu, so they
  // never wait for a running call and never see a half-updated profile.
  mutable std::mutex run_mu;                      // guards plan, arena, workspace
  mutable std::optional<Plan> plan;
  mutable std::shared_ptr<Storage> arena;
  mutable std::shared_ptr<Storage> workspace[2];  // indexed by DeviceKind
  mutable std::mutex stats_mu;                    // guards profile, arena_bytes, total_bytes
  mutable ProfileStats profile;
  mutable std::size_t arena_bytes = 0, total_bytes = 0;  // of the last call's plan

  int exit_profile = -1;  // profile=True: its entry among the summaries printed at exit

  explicit Impl(FunctionGraph g) : graph(std::move(g)) {}
  ~Impl() {
    if (exit_profile >= 0) detail::retire_exit_profile(exit_profile, profile);
  }

  bool is_output(int s) const {
    for (const auto& o : graph.outputs())
      if (slot.at(o.node()) == s) return true;
    return false;
  }

  void index() {
    order = graph.toposort();
    for (std::size_t i = 0; i < order.size(); ++i) slot[order[i].node()] = static_cast<int>(i);
    last_use.assign(order.size(), -1);
    for (std::size_t i = 0; i < order.size(); ++i)
      for (const auto& in : order[i].inputs()) last_use[static_cast<std::size_t>(slot.at(in.node()))] = static_cast<int>(i);
    profile.nodes.clear();
    for (const auto& v : order)
      if (v.op()) profile.nodes.push_back({node_label(v), v.op()->name(), v.op()->implementation(), 0, 0, 0, 0});
    index_updates();
  }

  // Which updates run in place, which copy, and the variables a call locks.
  void index_updates() {
    std::vector<std::pair<std::uint64_t, std::shared_ptr<SharedSlot>>> locked;
    std::unordered_map<const SharedSlot*, int> read_at;  // variable -> its slot, when the graph reads it
    for (std::size_t i = 0; i < order.size(); ++i)
      if (order[i].is_shared()) {
        read_at[order[i].node()->shared.get()] = static_cast<int>(i);
        locked.emplace_back(order[i].node()->id, order[i].node()->shared);
      }
    in_place_target.assign(order.size(), -1);
    const auto& outs = graph.outputs();
    std::vector<int> uses(order.size(), 0);  // how many outputs and updates return each slot
    for (const auto& o : outs) uses[static_cast<std::size_t>(slot.at(o.node()))]++;
    for (std::size_t u = 0; u < updates.size(); ++u) {
      Update& up = updates[u];
      up.value = slot.at(outs[n_outputs + u].node());
      locked.emplace_back(up.var.node()->id, up.cell);
      const Var& value = order[static_cast<std::size_t>(up.value)];
      const auto vs = static_cast<std::size_t>(up.value);
      // A fresh op buffer that nothing else returns can be handed to the variable as is.
      up.copy = !value.op() || uses[vs] > 1;
      auto r = read_at.find(up.cell.get());
      if (up.copy || r == read_at.end() || !writes_over_input(*value.op()) || value.type().device != DeviceKind::cpu)
        continue;
      const int var_slot = r->second;
      const bool reads_var = std::any_of(value.inputs().begin(), value.inputs().end(),
                                         [&](const Var& in) { return in.node() == order[static_cast<std::size_t>(var_slot)].node(); });
      // The value's node must be the variable's last reader, and the variable no output.
      if (reads_var && last_use[static_cast<std::size_t>(var_slot)] == up.value && !is_output(var_slot)) {
        up.in_place = true;
        in_place_target[vs] = var_slot;
      }
    }
    std::sort(locked.begin(), locked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    cells.clear();
    for (const auto& [id, cell] : locked)
      if (cells.empty() || cells.back() != cell) cells.push_back(cell);
  }

  const Plan& plan_for(const std::vector<Tensor>& args) const {
    std::vector<Shape> shapes;
    for (const auto& a : args) shapes.push_back(a.shape());
    if (plan && plan->arg_shapes == shapes) return *plan;
    Plan p;
    p.arg_shapes = shapes;
    p.types.resize(order.size());
    p.offset.assign(order.size(), -1);
    std::vector<detail::BufferRequest> requests;
    std::vector<int> request_slot;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Var& v = order[i];
      if (v.is_input()) {
        p.types[i] = v.type();
        p.types[i].shape = args[static_cast<std::size_t>(slot_to_arg(static_cast<int>(i)))].shape();
        continue;
      }
      if (v.is_constant() || v.is_shared()) {
        p.types[i] = v.type();
        continue;
      }
      std::vector<TensorType> ins;
      for (const auto& in : v.inputs()) ins.push_back(p.types[static_cast<std::size_t>(slot.at(in.node()))]);
      try {
        p.types[i] = v.op()->infer(ins);
        p.types[i].device = v.type().device;  // placement decided it; not every infer() tracks devices
        auto& ws = p.workspace_bytes[static_cast<int>(p.types[i].device)];
        ws = std::max(ws, v.op()->workspace_bytes(ins));
      } catch (const Error& e) {
        rethrow_with(e, msg("while computing the shape of node ", node_label(v), ": "));
      }
      // Host intermediates share the arena; device values come from the device's caching
      // allocator, which reuses freed blocks the same way. Outputs, update values among
      // them, are allocated fresh (or are the variable's storage: in-place updates).
      if (!is_output(static_cast<int>(i)) && p.types[i].device == DeviceKind::cpu) {
        const auto bytes = detail::checked_nbytes(p.types[i].shape, p.types[i].dtype, msg("node ", node_label(v)));
        requests.push_back({bytes, static_cast<int>(i), std::max(static_cast<int>(i), last_use[i])});
        request_slot.push_back(static_cast<int>(i));
      }
    }
    for (std::size_t u = 0; u < updates.size(); ++u) {
      const TensorType& want = updates[u].var.type();
      const TensorType& got = p.types[static_cast<std::size_t>(updates[u].value)];
      if (got.shape != want.shape)
        throw ShapeError(msg("Function call: ", update_label(u, updates[u].var), ": the new value is ", got.to_string(),
                             " but the variable is ", want.to_string()));
    }
    const detail::ArenaPlan ap = detail::plan_arena(requests);
    for (std::size_t r = 0; r < requests.size(); ++r)
      p.offset[static_cast<std::size_t>(request_slot[r])] = static_cast<std::int64_t>(ap.offsets[r]);
    p.arena_bytes = ap.arena_bytes;
    p.total_bytes = ap.total_bytes;
    if (!arena || arena->bytes < p.arena_bytes) arena = allocate_host(p.arena_bytes);
    for (int d = 0; d < 2; ++d)
      if (p.workspace_bytes[d] > 0 && (!workspace[d] || workspace[d]->bytes < p.workspace_bytes[d]))
        workspace[d] = allocate_on(static_cast<DeviceKind>(d), p.workspace_bytes[d]);
    plan = std::move(p);
    std::lock_guard<std::mutex> stats(stats_mu);
    profile.peak_bytes = arena_bytes = plan->arena_bytes;
    total_bytes = plan->total_bytes;
    return *plan;
  }

  int slot_to_arg(int s) const {
    const auto& ins = graph.inputs();
    for (std::size_t a = 0; a < ins.size(); ++a)
      if (slot.at(ins[a].node()) == s) return static_cast<int>(a);
    return -1;
  }

  [[noreturn]] static void rethrow_with(const Error& e, const std::string& prefix) {
    const std::string what = prefix + e.what();
    if (dynamic_cast<const TypeError*>(&e)) throw TypeError(what);
    if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(what);
    if (dynamic_cast<const ValueError*>(&e)) throw ValueError(what);
    if (dynamic_cast<const MismatchError*>(&e)) throw MismatchError(what);
    if (dynamic_cast<const MemoryError*>(&e)) throw MemoryError(what);
    if (dynamic_cast<const DeviceContextError*>(&e)) throw DeviceContextError(what);
    if (dynamic_cast<const DeviceError*>(&e)) throw DeviceError(what);
    throw RuntimeError(what);
  }

  void check_args(const std::vector<Tensor>& args) const {
    const auto& ins = graph.inputs();
    if (args.size() != ins.size())
      throw RuntimeError(msg("Function call: expected ", ins.size(), " argument(s), got ", args.size()));
    for (std::size_t i = 0; i < args.size(); ++i) {
      const TensorType& want = ins[i].type();
      const Tensor& a = args[i];
      if (!a.defined()) throw ValueError(msg("Function call: ", arg_label(i, ins[i]), " is an undefined tensor"));
      if (a.dtype() != want.dtype)
        throw TypeError(msg("Function call: ", arg_label(i, ins[i]), " has dtype ", dtype_name(a.dtype()),
                            " but the input is declared ", want.to_string()));
      if (a.rank() != want.rank())
        throw ShapeError(msg("Function call: ", arg_label(i, ins[i]), " has shape ", shape_to_string(a.shape()),
                             " (rank ", a.rank(), ") but the input is declared ", want.to_string()));
      for (int d = 0; d < a.rank(); ++d)
        if (want.shape[static_cast<std::size_t>(d)] >= 0 && want.shape[static_cast<std::size_t>(d)] != a.shape()[static_cast<std::size_t>(d)])
          throw ShapeError(msg("Function call: ", arg_label(i, ins[i]), " has shape ", shape_to_string(a.shape()),
                               " but the input is declared ", want.to_string(), " (axis ", d, ")"));
      if (a.device() != want.device)
        throw TypeError(msg("Function call: ", arg_label(i, ins[i]), " lives on ", device_name(a.device()),
                            " but the input is declared on ", device_name(want.device)));
    }
  }

  std::vector<Tensor> run(const std::vector<Tensor>& args) const {
    std::lock_guard<std::mutex> lock(run_mu);
    // Then every shared variable of the call, in node-id order (the same in every
    // Function), so two calls sharing variables cannot deadlock.
    std::vector<std::unique_lock<std::mutex>> cell_locks;
    cell_locks.reserve(cells.size());
    for (const auto& c : cells) cell_locks.emplace_back(c->mu);
    check_args(args);
    const auto t_call = Clock::now();
    const Plan& p = plan_for(args);
    std::vector<Tensor> values(order.size());
    for (std::size_t a = 0; a < args.size(); ++a)
      values[static_cast<std::size_t>(slot.at(graph.inputs()[a].node()))] = args[a].contiguous();
    ExecContext host_ctx{pool, workspace[0] ? workspace[0]->data : nullptr, p.workspace_bytes[0], nullptr};
    ExecContext device_ctx{pool, workspace[1] ? workspace[1]->data : nullptr, p.workspace_bytes[1], nullptr};
    std::size_t step = 0;
    std::vector<Tensor> ins;
    // This call's per-node statistics (profile=true), merged into `profile` at the end:
    // the labels never change after compile(), so they are read without stats_mu.
    struct Sample {
      double seconds = 0;
      std::size_t output_bytes = 0, workspace_bytes = 0;
      detail::TraceSpan span;  // for the Chrome trace
    };
    std::vector<Sample> samples(mode.profile ? profile.nodes.size() : 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Var& v = order[i];
      if (v.is_input()) continue;
      if (v.is_constant()) {
        values[i] = *v.constant_value();
        continue;
      }
      if (v.is_shared()) {
        values[i] = v.node()->shared->value;
        continue;
      }
      const TensorType& t = p.types[i];
      if (in_place_target[i] >= 0)
        values[i] = values[static_cast<std::size_t>(in_place_target[i])];  // the variable's own storage
      else if (p.offset[i] >= 0)
        values[i] = Tensor(arena, t.dtype, t.shape, p.offset[i] / static_cast<std::int64_t>(dtype_size(t.dtype)));
      else if (t.device == DeviceKind::cpu)
        values[i] = Tensor(t.dtype, t.shape);
      else
        values[i] = Tensor(allocate_on(t.device, detail::checked_nbytes(t.shape, t.dtype, msg("node ", node_label(v)))), t.dtype, t.shape);
      const ExecContext& ctx = t.device == DeviceKind::cpu ? host_ctx : device_ctx;
      ins.clear();
      for (const auto& in : v.inputs()) ins.push_back(values[static_cast<std::size_t>(slot.at(in.node()))]);
      const auto t0 = Clock::now();
      try {
        KernelRegistry::builtin().run(*v.op(), ins, values[i], ctx);
      } catch (const Error& e) {
        rethrow_with(e, msg("while running node ", node_label(v), " (", v.op()->label(), "): "));
      } catch (const std::bad_alloc&) {
        throw MemoryError(msg("while running node ", node_label(v), " (", v.op()->label(),
                              "): out of memory (std::bad_alloc) in its kernel; its output ", t.to_string(), " has ",
                              values[i].nbytes(), " bytes, the workspace ", ctx.workspace_bytes, " bytes"));
      }
      if (mode.profile) {
        Sample& sample = samples[step];
        const double dt = seconds_since(t0);
        sample.seconds = dt;
        sample.span = {std::chrono::duration<double, std::micro>(t0 - t_call).count(), dt * 1e6};
        sample.output_bytes = values[i].nbytes();
        std::vector<TensorType> tys;
        for (const auto& in : v.inputs()) tys.push_back(p.types[static_cast<std::size_t>(slot.at(in.node()))]);
        sample.workspace_bytes = v.op()->workspace_bytes(tys);
      }
      ++step;
    }
    std::vector<Tensor> outs;
    for (std::size_t k = 0; k < n_outputs; ++k) {
      const Var& o = graph.outputs()[k];
      const Tensor& val = values[static_cast<std::size_t>(slot.at(o.node()))];
      // Outputs that are inputs, constants or repeated are copied so the caller owns them.
      bool fresh = o.op() != nullptr;
      for (const auto& prev : outs) fresh = fresh && prev.storage() != val.storage();
      outs.push_back(fresh ? val : val.clone());
    }
    // Every value is computed: now store them (in-place ones already are).
    for (const Update& up : updates) {
      if (up.in_place) continue;
      const Tensor& val = values[static_cast<std::size_t>(up.value)];
      up.cell->value = up.copy ? val.clone() : val;
    }
    std::lock_guard<std::mutex> stats(stats_mu);
    for (std::size_t n = 0; n < samples.size(); ++n) {
      NodeProfile& np = profile.nodes[n];
      np.calls++;
      np.seconds += samples[n].seconds;
      np.output_bytes = samples[n].output_bytes;
      np.workspace_bytes = samples[n].workspace_bytes;
    }
    profile.calls++;
    profile.call_seconds += seconds_since(t_call);
    if (mode.profile) {
      std::vector<detail::TraceSpan> spans;
      for (const Sample& sample : samples) spans.push_back(sample.span);
      profile.chrome_trace = detail::chrome_trace_json(profile.nodes, spans);
    }
    return outs;
  }
};

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& args) const { return impl_->run(args); }
const FunctionGraph& Function::graph() const { return impl_->graph; }
const Mode& Function::mode() const { return impl_->mode; }
ProfileStats Function::profile() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->profile;  // a snapshot: later calls do not change it
}
const CompileStats& Function::compile_stats() const { return impl_->stats; }
std::size_t Function::peak_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->arena_bytes;
}
std::size_t Function::total_intermediate_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->total_bytes;
}

std::string Function::describe() const {
  std::ostringstream os;
  for (const auto& v : impl_->order) {
    if (!v.op()) continue;
    os << "#" << v.node()->id << " " << v.op()->label();
    if (!v.name().empty()) os << " '" << v.name() << "'";
    os << " -> " << v.type().to_string();
    const std::string impl = v.op()->implementation();
    if (!impl.empty()) os << "  [" << impl << "]";
    os << '\n';
  }
  for (std::size_t u = 0; u < impl_->updates.size(); ++u) {
    const auto& up = impl_->updates[u];
    os << "update " << (up.var.name().empty() ? "#" + std::to_string(up.var.node()->id) : "'" + up.var.name() + "'")
       << " <- #" << impl_->order[static_cast<std::size_t>(up.value)].node()->id
       << (up.in_place ? "  [in place]" : up.copy ? "  [copy]" : "  [swap]") << '\n';
  }
  os << "cpu kernels: " << cpu_isa_name(active_cpu_isa()) << " (this CPU supports "
     << cpu_isa_name(detected_cpu_isa()) << "; CONVGRAPH_CPU_ISA lowers it)\n";
  return os.str();
}

Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode) {
  return compile(inputs, outputs, mode, Updates{});
}

Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode,
                 const Updates& updates) {
  const auto t0 = Clock::now();
  std::vector<Var> values = outputs;
  std::vector<const SharedSlot*> seen;
  for (std::size_t u = 0; u < updates.size(); ++u) {
    const auto& [var, value] = updates[u];
    if (!var.is_shared()) throw ValueError(msg("compile: update ", u, ": the variable is undefined"));
    if (!value.defined()) throw ValueError(msg("compile: ", update_label(u, var), ": the new value is undefined"));
    const TensorType& want = var.type();
    const TensorType& got = value.type();
    if (got.dtype != want.dtype)
      throw TypeError(msg("compile: ", update_label(u, var), ": the new value is ", got.to_string(),
                          " but the variable is ", want.to_string(), "; cast it"));
    if (!want.accepts(got))
      throw ShapeError(msg("compile: ", update_label(u, var), ": the new value is ", got.to_string(),
                           " but the variable is ", want.to_string()));
    const SharedSlot* cell = var.node()->shared.get();
    if (std::find(seen.begin(), seen.end(), cell) != seen.end())
      throw ValueError(msg("compile: ", update_label(u, var), ": the variable is updated twice (an earlier update has it)"));
    seen.push_back(cell);
    values.push_back(value);
  }
  auto impl = std::make_shared<Function::Impl>(FunctionGraph(inputs, values));
  impl->n_outputs = outputs.size();
  for (const auto& up : updates) impl->updates.push_back({up.first.node()->shared, up.first});
  impl->mode = mode.effective();  // CONVGRAPH_FLAGS under the program's settings
  optimize(impl->graph, impl->mode, impl->stats);  // throws when an abstract node is left unlowered
  if (impl->mode.threads > 0) {
    impl->own_pool = std::make_unique<ThreadPool>(impl->mode.threads);
    impl->pool = impl->own_pool.get();
  } else {
    impl->pool = &ThreadPool::default_pool();
  }
  impl->index();
  impl->stats.total_seconds = seconds_since(t0);
  if (impl->mode.profile) {
    std::vector<std::string> outs;
    for (std::size_t k = 0; k < outputs.size(); ++k) outs.push_back(node_label(outputs[k]));
    std::weak_ptr<Function::Impl> weak = impl;
    impl->exit_profile = detail::register_exit_profile(
        msg("outputs ", join_labels(outs), "; ", impl->mode.to_string()), impl->mode.profile_file,
        [weak]() -> std::optional<ProfileStats> {
          const auto live = weak.lock();
          if (!live) return std::nullopt;
          std::lock_guard<std::mutex> lock(live->stats_mu);
          return live->profile;
        });
  }
  return Function(std::move(impl));
}

}  // namespace convgraph
