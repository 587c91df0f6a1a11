// One convolution workload as both benchmarks see it: problem and operands, the candidate
// list (the meta-optimizer's selection), timing one candidate, and the reference check.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "benchmarks/bench_common.hpp"
#include "benchmarks/host_floats.hpp"
#include "backends/device_buffers.hpp"
#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/optimizer/conv_lowering.hpp"

namespace convgraph::bench {

constexpr double kMaxOperandBytes = 16.0 * (1ull << 30);

Buffer alloc_buffer(std::size_t floats) {
  Buffer b;
  const HostFloats host(floats);
  b.data = host.data();
  b.own = host.storage;
  b.size = floats;
  return b;
}

void fill_random(Buffer& b, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i < b.size; ++i) b.data[i] = dist(rng);
}

float* Workload::output() const {
  switch (problem.direction) {
    case ConvDirection::forward: return y.data;
    case ConvDirection::grad_inputs: return x.data;
    case ConvDirection::grad_weights: return w.data;
  }
  return nullptr;
}

std::size_t Workload::output_size() const {
  switch (problem.direction) {
    case ConvDirection::forward: return y.size;
    case ConvDirection::grad_inputs: return x.size;
    case ConvDirection::grad_weights: return w.size;
  }
  return 0;
}

ConvProblem make_problem(const Layer& layer, ConvDirection d, const Mode& mode) {
  // Sizes in double first: a silly layer line must be an error message, not an overflow.
  double x = double(layer.N) * double(layer.C), w = double(layer.K) * double(layer.C / layer.groups);
  double y = double(layer.N) * double(layer.K);
  for (int a = 0; a < layer.ndim(); ++a) {
    const auto ua = static_cast<std::size_t>(a);
    x *= double(layer.spatial[ua]);
    w *= double(layer.kernel[ua]);
    y *= double(layer.spatial[ua] + 2 * layer.pad[ua]) / double(layer.stride[ua]);
  }
  if ((x + w + y) * sizeof(float) > kMaxOperandBytes)
    throw UsageError(msg(layer.where, ": layer '", layer.name, "' needs about ", bytes_text((x + w + y) * 4),
                         " of operands (limit ", bytes_text(kMaxOperandBytes), ")"));
  try {
    ConvProblem p = ConvProblem::make(d, layer.params(), layer.x_shape(), layer.w_shape(), DType::float32,
                                      "convgraph-bench");
    p.workspace_limit = mode.workspace_limit;
    return p;
  } catch (const Error& e) {
    throw UsageError(msg(layer.where, ": layer '", layer.name, "': ", e.what()));
  }
}

namespace {
// A Tensor viewing a host buffer without owning it.
Tensor host_view(const Buffer& b) {
  auto st = std::make_shared<Storage>();
  st->data = b.data;
  st->bytes = b.size * sizeof(float);
  st->device = DeviceKind::cpu;  // no deleter: the Buffer owns the memory
  return Tensor(st, DType::float32, {static_cast<std::int64_t>(b.size)});
}

// The output operand's storage on the workload's device.
std::shared_ptr<Storage> device_output(const Workload& wl) {
  switch (wl.problem.direction) {
    case ConvDirection::forward: return wl.on_device[2];
    case ConvDirection::grad_inputs: return wl.on_device[0];
    case ConvDirection::grad_weights: return wl.on_device[1];
  }
  return nullptr;
}
}  // namespace

Workload make_workload(const Layer& layer, ConvDirection d, const Mode& mode, std::uint64_t seed) {
  Workload wl;
  wl.layer = layer;
  wl.problem = make_problem(layer, d, mode);
  const ConvProblem& p = wl.problem;
  wl.x = alloc_buffer(static_cast<std::size_t>(p.x_numel()));
  wl.w = alloc_buffer(static_cast<std::size_t>(p.w_numel()));
  wl.y = alloc_buffer(static_cast<std::size_t>(p.y_numel()));
  // Inputs random; the written operand too (the algorithm must overwrite it entirely).
  fill_random(wl.x, seed);
  fill_random(wl.w, seed + 1);
  fill_random(wl.y, seed + 2);
  wl.device = mode.device;
  if (wl.device != DeviceKind::cpu) {
    const Buffer* host[3] = {&wl.x, &wl.w, &wl.y};
    for (int i = 0; i < 3; ++i) {
      wl.on_device[i] = allocate_on(wl.device, host[i]->size * sizeof(float));
      Tensor dst(wl.on_device[i], DType::float32, {static_cast<std::int64_t>(host[i]->size)});
      copy_into(host_view(*host[i]), dst);
    }
  }
  return wl;
}

ConvTensors Workload::tensors() const {
  if (device == DeviceKind::cpu) return {x.data, w.data, y.data, {}};
  return {on_device[0]->data, on_device[1]->data, on_device[2]->data, {}};
}

std::vector<Candidate> list_candidates(const Layer& layer, const ConvProblem& p, const Mode& mode,
                                       bool all_algorithms) {
  Shape target;
  if (p.direction == ConvDirection::grad_inputs) target = p.x_shape();
  if (p.direction == ConvDirection::grad_weights) target = p.w_shape();
  const AbstractConvOp op(p.direction, layer.params(), target);
  const AlgorithmRegistry& reg = mode_registry(mode);
  const ConvCandidates meta = meta_candidates(op, p, mode.device, mode, reg);
  ConvCandidates wide = meta;
  if (all_algorithms) {
    // Every non-reference algorithm counts once more: Theano's "alternative" pseudo-tag.
    Mode m = mode;
    m.metaopt_include.push_back("alternative");
    m.metaopt_exclude.push_back("conv_reference");
    wide = meta_candidates(op, p, mode.device, m, reg);
  }
  std::vector<Candidate> out;
  for (std::size_t i = 0; i < wide.verdicts.size(); ++i) {
    const ConvVerdict& v = wide.verdicts[i];
    if (v.algorithm->name() == "cpu.reference") continue;  // the oracle, not a candidate
    Candidate c;
    c.algorithm = v.algorithm;
    c.workspace = v.workspace;
    c.eligible = meta.verdicts[i].reason.empty();
    c.timed = v.reason.empty();
    // Reasons often start with the algorithm's own name; the table already shows it.
    std::string why = c.timed ? meta.verdicts[i].reason : v.reason;
    if (const std::string prefix = v.algorithm->name() + ": "; why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    if (c.timed && !c.eligible)
      why = why.rfind("not a meta candidate", 0) == 0 ? "alternative, not a meta candidate" : "alternative: " + why;
    c.reason = c.eligible ? std::string() : why;
    out.push_back(std::move(c));
  }
  // fast_run's own pick: the first usable algorithm an included tag promotes, else the
  // cost model's cheapest (as lower_abstract_conv decides with shapes known).
  Mode fast = mode;
  fast.metaopt_include.clear();
  fast.metaopt_exclude.clear();
  const ConvCandidates lowering = conv_candidates(op, &p, mode.device, fast, reg);
  const auto usable = lowering.usable();
  const MachineModel& machine = measured_machine(mode.threads);
  if (!usable.empty()) {
    const AlgorithmPtr pick = lowers_by_cost(lowering, fast) ? cheapest_algorithm(usable, p, machine) : usable.front();
    for (Candidate& c : out) c.default_choice = c.algorithm == pick;
  }
  for (Candidate& c : out)
    if (c.algorithm->applicable(p)) c.estimated_ms = c.algorithm->estimated_seconds(p, machine) * 1e3;
  return out;
}

// ---- the reference check ---------------------------------------------------------------

namespace {

struct Subset {
  std::int64_t N, C, K, G;  ///< batch, in channels, out channels, groups kept
};

/// Copies [A'][B'][inner] out of [A][B][inner] (the leading A' x B' blocks).
void gather(const float* src, std::int64_t B, std::int64_t inner, std::int64_t A2, std::int64_t B2, float* dst) {
  for (std::int64_t a = 0; a < A2; ++a)
    std::memcpy(dst + a * B2 * inner, src + a * B * inner, static_cast<std::size_t>(B2 * inner) * sizeof(float));
}

/// The written operand's subset, gathered from a full-size tensor of the problem.
void gather_output(const ConvProblem& p, const Subset& s, const float* full, float* dst) {
  switch (p.direction) {
    case ConvDirection::forward: gather(full, p.K, p.out_numel(), s.N, s.K, dst); break;
    case ConvDirection::grad_inputs: gather(full, p.C, p.in_numel(), s.N, s.C, dst); break;
    case ConvDirection::grad_weights: gather(full, p.Cg(), p.kernel_numel(), s.K, s.C / s.G, dst); break;
  }
}

double subset_flops(const ConvProblem& p, const Subset& s) {
  return 2.0 * double(s.N) * double(s.K) * double(s.C / s.G) * double(p.kernel_numel()) * double(p.out_numel());
}

/// Shrinks the free dimensions of the direction (never a summed one, so each kept output
/// element is computed from exactly the same terms as in the full problem) until the
/// reference's cost fits `max_flops`. Grouped problems keep whole groups.
Subset choose_subset(const ConvProblem& p, double max_flops) {
  Subset s{p.N, p.C, p.K, p.G};
  if (max_flops <= 0) return s;
  const bool grouped = p.G > 1;
  const auto dir = p.direction;
  std::vector<std::int64_t*> order;  // shrunk first to last
  if (dir != ConvDirection::grad_weights) order.push_back(&s.N);
  if (grouped) {
    order.push_back(&s.G);
  } else {
    if (dir != ConvDirection::grad_inputs) order.push_back(&s.K);
    if (dir != ConvDirection::forward) order.push_back(&s.C);
  }
  for (std::int64_t* d : order) {
    while (*d > 1 && subset_flops(p, grouped ? Subset{s.N, s.G * p.Cg(), s.G * p.Kg(), s.G} : s) > max_flops)
      *d = (*d + 1) / 2;
    if (grouped) {
      s.C = s.G * p.Cg();
      s.K = s.G * p.Kg();
    }
  }
  return s;
}

}  // namespace

ErrorCheck make_error_check(const Workload& wl, double max_flops) {
  const ConvProblem& p = wl.problem;
  const Subset s = choose_subset(p, max_flops);
  ErrorCheck check;
  ConvProblem& q = check.sub;
  q = p;
  q.N = s.N;
  q.C = s.C;
  q.K = s.K;
  q.G = s.G;
  Buffer x = alloc_buffer(static_cast<std::size_t>(q.x_numel()));
  Buffer w = alloc_buffer(static_cast<std::size_t>(q.w_numel()));
  Buffer y = alloc_buffer(static_cast<std::size_t>(q.y_numel()));
  gather(wl.x.data, p.C, p.in_numel(), q.N, q.C, x.data);
  gather(wl.w.data, p.Cg(), p.kernel_numel(), q.K, q.Cg(), w.data);
  gather(wl.y.data, p.K, p.out_numel(), q.N, q.K, y.data);
  reference_conv(q, ConvTensors{x.data, w.data, y.data, {}});
  switch (p.direction) {
    case ConvDirection::forward: check.want = y; break;
    case ConvDirection::grad_inputs: check.want = x; break;
    case ConvDirection::grad_weights: check.want = w; break;
  }
  check.fraction = double(check.want.size) / double(wl.output_size());
  std::string d;
  auto note = [&](const char* name, std::int64_t kept, std::int64_t all) {
    if (kept < all) d += msg(d.empty() ? "" : ", ", name, "<", kept, " of ", all);
  };
  note("n", q.N, p.N);
  if (p.G > 1) note("groups", q.G, p.G);
  else {
    note("k", q.K, p.K);
    note("c", q.C, p.C);
  }
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.3g%%", 100.0 * check.fraction);
  check.description = d.empty() ? std::string("all outputs") : msg(d, " (", pct, " of outputs)");
  return check;
}

CheckResult check_output(const Workload& wl, const ErrorCheck& check) {
  const ConvProblem& p = wl.problem;
  const Subset s{check.sub.N, check.sub.C, check.sub.K, check.sub.G};
  Buffer got = alloc_buffer(check.want.size);
  gather_output(p, s, wl.output(), got.data);
  // The meta-optimizer's and DebugMode's judgement: relative to the largest |reference|.
  const ConvCheck c = compare_conv_results(got.data, check.want.data, static_cast<std::int64_t>(got.size),
                                           DType::float32);
  CheckResult r;
  r.max_abs_err = c.max_error;
  r.rel_err = c.scale > 0 ? c.max_error / c.scale : c.max_error;
  r.ok = c.ok;
  if (!c.ok) r.detail = c.to_string();
  return r;
}

Timing time_algorithm(const Workload& wl, const ConvAlgorithm& algo, std::size_t workspace, ThreadPool* pool,
                      int repeats, double early_stop, double best) {
  const bool gpu = wl.device != DeviceKind::cpu;
  Buffer ws = alloc_buffer(gpu ? 0 : (workspace + sizeof(float) - 1) / sizeof(float));
  std::shared_ptr<Storage> dws = gpu && workspace > 0 ? allocate_on(wl.device, workspace) : nullptr;
  std::fill_n(wl.output(), wl.output_size(), std::numeric_limits<float>::quiet_NaN());
  std::shared_ptr<Storage> dout = gpu ? device_output(wl) : nullptr;
  Buffer out_view{nullptr, wl.output(), wl.output_size()};
  if (gpu) {
    Tensor d(dout, DType::float32, {static_cast<std::int64_t>(wl.output_size())});
    copy_into(host_view(out_view), d);
  }
  const ConvContext ctx{pool, gpu ? (dws ? dws->data : nullptr) : ws.data, workspace, nullptr};
  const ConvTensors t = wl.tensors();
  // One timed run; a GPU run is synchronised so the clock sees the kernel, not the launch.
  auto run_once = [&] {
    const double s0 = now_seconds();
    algo.run(wl.problem, t, ctx);
    if (gpu) synchronize(wl.device);
    return now_seconds() - s0;
  };
  // Brings the GPU result back into the host copy that check_output() reads.
  auto fetch = [&] {
    if (!gpu) return;
    Tensor h = host_view(out_view);
    copy_into(Tensor(dout, DType::float32, {static_cast<std::int64_t>(wl.output_size())}), h);
  };
  const double warm = run_once();  // warm-up: caches, page faults, lazy plans
  Timing out;
  if (early_stop > 0 && best > 0 && warm > early_stop * best) {
    out.stats = summarize({warm});
    out.samples = {warm};
    out.early_stopped = true;
    fetch();
    return out;
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) times.push_back(run_once());
  out.stats = summarize(times);
  out.samples = std::move(times);
  fetch();
  return out;
}

}  // namespace convgraph::bench
