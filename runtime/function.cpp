// compile() and Function: optimize a private clone of the graph, then run it as a
// linear schedule of kernels over an arena planned from value lifetimes.
#include "convgraph/runtime/function.hpp"

#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/core/print.hpp"
#include "convgraph/optimizer/optimize.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "core/checked_math.hpp"
#include "core/escape.hpp"
#include "backends/device_buffers.hpp"
#include "runtime/memory_planner.hpp"

namespace convgraph {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string node_label(const Var& v) {
  std::string s = "#" + std::to_string(v.node()->id) + " " + (v.op() ? v.op()->name() : v.is_constant() ? "constant" : "input");
  if (!v.name().empty()) s += " '" + v.name() + "'";
  return s;
}

std::string arg_label(std::size_t i, const Var& in) {
  return "argument " + std::to_string(i) + (in.name().empty() ? "" : " ('" + in.name() + "')");
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

  explicit Impl(FunctionGraph g) : graph(std::move(g)) {}

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
      if (v.is_constant()) {
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
      // allocator, which reuses freed blocks the same way.
      if (!is_output(static_cast<int>(i)) && p.types[i].device == DeviceKind::cpu) {
        const auto bytes = detail::checked_nbytes(p.types[i].shape, p.types[i].dtype, msg("node ", node_label(v)));
        requests.push_back({bytes, static_cast<int>(i), std::max(static_cast<int>(i), last_use[i])});
        request_slot.push_back(static_cast<int>(i));
      }
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
    std::ostringstream trace;  // Chrome trace events of this call, when profiling
    // This call's per-node statistics (profile=true), merged into `profile` at the end:
    // the labels never change after compile(), so they are read without stats_mu.
    struct Sample {
      double seconds = 0;
      std::size_t output_bytes = 0, workspace_bytes = 0;
    };
    std::vector<Sample> samples(mode.profile ? profile.nodes.size() : 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Var& v = order[i];
      if (v.is_input()) continue;
      if (v.is_constant()) {
        values[i] = *v.constant_value();
        continue;
      }
      const TensorType& t = p.types[i];
      if (p.offset[i] >= 0)
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
        const NodeProfile& np = profile.nodes[step];  // node, op, implementation: fixed
        Sample& sample = samples[step];
        const double dt = seconds_since(t0);
        sample.seconds = dt;
        const double start_us = std::chrono::duration<double, std::micro>(t0 - t_call).count();
        trace << (step ? ",\n" : "") << "{\"name\":\"" << np.op << "\",\"cat\":\"" << (np.implementation.empty() ? "op" : np.implementation)
              << "\",\"ph\":\"X\",\"ts\":" << start_us << ",\"dur\":" << dt * 1e6
              << ",\"pid\":1,\"tid\":1,\"args\":{\"node\":\"" << detail::escape_quotes(np.node) << "\"}}";
        sample.output_bytes = values[i].nbytes();
        std::vector<TensorType> tys;
        for (const auto& in : v.inputs()) tys.push_back(p.types[static_cast<std::size_t>(slot.at(in.node()))]);
        sample.workspace_bytes = v.op()->workspace_bytes(tys);
      }
      ++step;
    }
    std::vector<Tensor> outs;
    for (const auto& o : graph.outputs()) {
      const Tensor& val = values[static_cast<std::size_t>(slot.at(o.node()))];
      // Outputs that are inputs, constants or repeated are copied so the caller owns them.
      bool fresh = o.op() != nullptr;
      for (const auto& prev : outs) fresh = fresh && prev.storage() != val.storage();
      outs.push_back(fresh ? val : val.clone());
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
    if (mode.profile) profile.chrome_trace = "{\"traceEvents\":[\n" + trace.str() + "\n]}\n";
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
  os << "cpu kernels: " << cpu_isa_name(active_cpu_isa()) << " (this CPU supports "
     << cpu_isa_name(detected_cpu_isa()) << "; CONVGRAPH_CPU_ISA lowers it)\n";
  return os.str();
}

Function compile(const std::vector<Var>& inputs, const std::vector<Var>& outputs, const Mode& mode) {
  const auto t0 = Clock::now();
  auto impl = std::make_shared<Function::Impl>(FunctionGraph(inputs, outputs));
  impl->mode = mode;
  optimize(impl->graph, mode, impl->stats);  // throws when an abstract node is left unlowered
  if (mode.threads > 0) {
    impl->own_pool = std::make_unique<ThreadPool>(mode.threads);
    impl->pool = impl->own_pool.get();
  } else {
    impl->pool = &ThreadPool::default_pool();
  }
  impl->index();
  impl->stats.total_seconds = seconds_since(t0);
  return Function(std::move(impl));
}

}  // namespace convgraph
