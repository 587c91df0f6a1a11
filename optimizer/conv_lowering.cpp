// Convolution lowering: the algorithm selector (tags, priority, applicability, workspace)
// and the priority-lowering rewrite that turns each AbstractConvOp node into a ConvImplOp.
#include "convgraph/optimizer/conv_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/compile_stats.hpp"
#include "optimizer/passes.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

namespace {

constexpr std::string_view kPresetTags[] = {"fast_run", "fast_compile"};

bool has(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool carries(const ConvAlgorithm& a, const std::vector<std::string>& tags, std::string_view t) {
  return has(tags, t) || a.name() == t;
}

/// Tags the user named on purpose (not the preset ones): algorithms carrying them go first.
std::vector<std::string> explicit_tags(const Mode& mode, const ConvParams& params) {
  std::vector<std::string> out;
  for (const auto& t : mode.include_tags)
    if (std::find(std::begin(kPresetTags), std::end(kPresetTags), t) == std::end(kPresetTags)) out.push_back(t);
  if (params.request_fft && !has(out, "conv_fft")) out.push_back("conv_fft");
  return out;
}

/// Shared tail of both selectors: applicability and workspace, once tags allowed it.
void judge(ConvVerdict& v, const ConvProblem* problem) {
  if (!v.reason.empty() || problem == nullptr) return;
  if (Status s = v.algorithm->applicable(*problem); !s) {
    // Reports print "name: reason"; drop the name when the algorithm already led with it.
    const std::string lead = v.algorithm->name() + ": ";
    v.reason = s.reason().rfind(lead, 0) == 0 ? s.reason().substr(lead.size()) : s.reason();
    return;
  }
  v.workspace = v.algorithm->workspace_bytes(*problem);
  if (v.workspace > problem->workspace_limit)
    v.reason = msg("workspace ", bytes_text_iec(static_cast<double>(v.workspace)), " exceeds workspace_limit ",
                   bytes_text_iec(static_cast<double>(problem->workspace_limit)));
}

std::string fft_refusal(const ConvAlgorithm& a, const std::vector<std::string>& tags, const ConvParams& p) {
  if (!p.allow_fft && carries(a, tags, "conv_fft")) return "the node refuses FFT (allow_fft=false)";
  return {};
}

std::string types_text(const Var& v) {
  std::vector<std::string> ins;
  for (const auto& i : v.inputs()) ins.push_back(i.type().to_string());
  return msg("(", join_text(ins), ") -> ", v.type().to_string());
}

}  // namespace

std::vector<AlgorithmPtr> ConvCandidates::usable() const {
  std::vector<AlgorithmPtr> out;
  for (const auto& v : verdicts)
    if (v.reason.empty()) out.push_back(v.algorithm);
  return out;
}

std::vector<std::string> ConvCandidates::declined() const {
  std::vector<std::string> out;
  for (const auto& v : verdicts)
    if (!v.reason.empty()) out.push_back(v.algorithm->name() + ": " + v.reason);
  return out;
}

const AlgorithmRegistry& mode_registry(const Mode& mode) {
  return mode.registry ? *mode.registry : AlgorithmRegistry::builtin();
}

TagQuery algorithm_query(const Mode& mode, const ConvParams& params) {
  TagQuery q;
  q.include.push_back(mode.optimizer == "fast_compile" ? "fast_compile" : "fast_run");
  q = q.including(mode.include_tags).excluding(mode.exclude_tags).requiring(mode.require_tags);
  if (params.request_fft) q = q.including({"conv_fft"});
  return q;
}

ConvCandidates conv_candidates(const AbstractConvOp& op, const ConvProblem* problem, DeviceKind device,
                               const Mode& mode, const AlgorithmRegistry& registry) {
  const ConvParams& params = op.conv_params();
  const TagQuery q = algorithm_query(mode, params);
  const auto promote = explicit_tags(mode, params);
  ConvCandidates front, back;
  for (const auto& a : registry.all()) {
    if (a->device() != device) continue;
    const auto tags = a->tags();
    ConvVerdict v{a, q.reject_reason(tags, a->name()), false, false, 0};
    v.by_tags = !v.reason.empty();
    if (v.reason.empty()) v.reason = fft_refusal(*a, tags, params);
    judge(v, problem);
    for (const auto& t : promote) v.promoted = v.promoted || carries(*a, tags, t);
    (v.promoted ? front : back).verdicts.push_back(std::move(v));
  }
  for (auto& v : back.verdicts) front.verdicts.push_back(std::move(v));
  return front;
}

ConvCandidates meta_candidates(const AbstractConvOp& op, const ConvProblem& problem, DeviceKind device,
                               const Mode& mode, const AlgorithmRegistry& registry) {
  const ConvParams& params = op.conv_params();
  const TagQuery q = algorithm_query(mode, params);
  TagQuery hard;  // what no metaopt flag can override
  hard.exclude = q.exclude;
  hard.require = q.require;
  ConvCandidates out;
  for (const auto& a : registry.all()) {
    if (a->device() != device) continue;
    const auto tags = a->tags();
    const bool is_default = q.accepts(tags, a->name());
    auto tagged = [&](const std::string& t) {
      if (t == "default") return is_default;
      if (t == "alternative") return !is_default;
      return carries(*a, tags, t);
    };
    int count = is_default ? 1 : 0;
    for (const auto& t : mode.metaopt_include) count += tagged(t) ? 1 : 0;
    for (const auto& t : mode.metaopt_exclude) count -= tagged(t) ? 1 : 0;
    ConvVerdict v{a, {}, false, false, 0};
    for (const auto& t : hard.exclude)
      if (v.reason.empty() && carries(*a, tags, t)) v.reason = msg("excluded by optimizer_excluding=", t);
    for (const auto& t : hard.require)
      if (v.reason.empty() && !carries(*a, tags, t)) v.reason = msg("lacks the required tag ", t);
    if (v.reason.empty()) v.reason = fft_refusal(*a, tags, params);
    if (v.reason.empty() && count <= 0)
      v.reason = msg("not a meta candidate (", is_default ? "default" : "alternative",
                     "; count ", count, " after metaopt.optimizer_including/excluding)");
    v.by_tags = !v.reason.empty();
    judge(v, &problem);
    out.verdicts.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> conv_lowering_tags(const AbstractConvOp& op, const AlgorithmRegistry& registry) {
  std::vector<std::string> out;
  for (const auto& a : registry.all()) {
    const std::vector<std::string> tags = a->tags();
    if (!fft_refusal(*a, tags, op.conv_params()).empty()) continue;
    for (const auto& t : tags)
      if (std::find(std::begin(kPresetTags), std::end(kPresetTags), t) == std::end(kPresetTags) && !has(out, t))
        out.push_back(t);
  }
  out.emplace_back("conv_meta");  // the meta-optimizer's rewrite lowers it too
  return out;
}

std::string conv_node_label(const Var& v) {
  std::ostringstream os;
  os << '#' << v.node()->id << ' ' << (v.op() ? v.op()->name() : std::string("input"));
  if (!v.name().empty()) os << " '" << v.name() << "'";
  return os.str();
}

std::string explain_unlowered(const Var& node, const Mode& mode) {
  const auto* op = as_abstract_conv(node);
  std::ostringstream os;
  os << "node " << conv_node_label(node) << " [" << node.op()->label() << "] " << types_text(node)
     << " has no implementation.";
  if (!op) return os.str();
  os << "\n  tags that could lower it: " << join_text(conv_lowering_tags(*op, mode_registry(mode)));
  os << "\n  excluded tags: " << (mode.exclude_tags.empty() ? std::string("(none)") : join_text(mode.exclude_tags));
  if (!mode.require_tags.empty()) os << "\n  required tags: " << join_text(mode.require_tags);
  if (mode.optimizer == "None") os << "\n  optimizer=None: no rewrite ran, so nothing lowered it";

  const DeviceKind device = node.type().device;
  std::vector<TensorType> types;
  bool known = node.type().fully_known();
  for (const auto& i : node.inputs()) {
    types.push_back(i.type());
    known = known && i.type().fully_known() && numel(i.type().shape) > 0;  // zero-size: run time
  }
  ConvProblem problem;
  const ConvProblem* pp = nullptr;
  if (known) {
    try {
      problem = op->problem(types);
      problem.workspace_limit = mode.workspace_limit;
      pp = &problem;
    } catch (const Error& e) {
      os << "\n  (the problem could not be formed: " << e.what() << ")";
    }
  }
  const auto& reg = mode_registry(mode);
  const ConvCandidates c = conv_candidates(*op, pp, device, mode, reg);
  os << "\n  candidates on " << device_name(device) << (pp ? "" : " (shapes unknown: tags only)") << ":";
  if (c.verdicts.empty()) os << "\n    (no algorithm is registered for " << device_name(device) << ")";
  for (const auto& v : c.verdicts)
    os << "\n    " << v.algorithm->name() << ": " << (v.reason.empty() ? "usable" : v.reason);
  if (device != DeviceKind::cuda) {
    const auto& cuda = cuda_info();
    int n = 0;
    for (const auto& a : reg.all()) n += a->device() == DeviceKind::cuda ? 1 : 0;
    if (!cuda.available)
      os << "\n    cuda algorithms (" << n << " registered): no GPU: " << cuda.reason;
    else if (n > 0)
      os << "\n    cuda.* (" << n << " algorithms): not considered with device=cpu (set device=cuda)";
  }
  return os.str();
}

// ---- the cost model's choice --------------------------------------------------------------

bool uses_cost_model(const Mode& mode) {
  return std::find(mode.exclude_tags.begin(), mode.exclude_tags.end(), "conv_cost_model") == mode.exclude_tags.end();
}

bool lowers_by_cost(const ConvCandidates& c, const Mode& mode) {
  if (!uses_cost_model(mode)) return false;
  const auto usable = c.usable();
  return std::none_of(c.verdicts.begin(), c.verdicts.end(), [&](const ConvVerdict& v) {
    return v.promoted && !usable.empty() && v.algorithm == usable.front();
  });
}

AlgorithmPtr cheapest_algorithm(const std::vector<AlgorithmPtr>& usable, const ConvProblem& p,
                                const MachineModel& machine, std::string* why) {
  if (usable.empty()) return nullptr;
  std::vector<double> seconds;
  std::size_t best = 0;
  for (std::size_t i = 0; i < usable.size(); ++i) {
    seconds.push_back(usable[i]->estimated_seconds(p, machine));
    if (seconds[i] < seconds[best]) best = i;
  }
  if (why) {
    const auto ms = [](double s) {
      if (!std::isfinite(s)) return std::string("no estimate");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
      return std::string(buf);
    };
    *why = msg("cost model: ", usable[best]->name(), " ", ms(seconds[best]));
    std::vector<std::string> others;
    for (std::size_t i = 0; i < usable.size(); ++i)
      if (i != best) others.push_back(usable[i]->name() + " " + ms(seconds[i]));
    if (!others.empty()) *why += " (" + join_text(others, ", ") + ")";
  }
  return usable[best];
}

// ---- the priority-lowering rewrite ----------------------------------------------------

namespace {

std::optional<Var> lower_abstract_conv(const Var& v, RewriteContext& ctx) {
  const auto* op = as_abstract_conv(v);
  if (!op) return std::nullopt;
  const Mode& mode = ctx.mode;
  auto abstract = std::dynamic_pointer_cast<const AbstractConvOp>(v.node()->op);
  ConvImplOp::Options options;
  options.debug_check = mode.debug;
  options.workspace_limit = mode.workspace_limit;
  options.node_label = conv_node_label(v);

  std::vector<TensorType> types;
  bool known = v.type().fully_known();
  for (const auto& i : v.inputs()) {
    types.push_back(i.type());
    known = known && i.type().fully_known() && numel(i.type().shape) > 0;  // zero-size: run time
  }
  const auto& reg = mode_registry(mode);
  const DeviceKind device = v.type().device;
  if (!known) {
    const ConvCandidates c = conv_candidates(*op, nullptr, device, mode, reg);
    const auto usable = c.usable();
    if (usable.empty()) return std::nullopt;  // the final check explains why
    if (lowers_by_cost(c, mode)) options.cost_model = measured_machine(mode.threads);
    auto impl = std::make_shared<ConvImplOp>(
        abstract, usable,
        msg(options.cost_model ? "cost model" : "priority", ", chosen per shape at run time: shapes unknown at compile time"),
        options);
    return convgraph::apply(impl, v.inputs(), v.name());
  }

  ConvProblem p = op->problem(types);
  p.workspace_limit = mode.workspace_limit;
  const ConvCandidates c = conv_candidates(*op, &p, device, mode, reg);
  // Without an explicitly included tag, the usable algorithm the cost model estimates
  // fastest; with one (a user's choice, e.g. optimizer_including=conv_fft) or the cost
  // model excluded, the first usable one in priority order.
  const auto usable = c.usable();
  if (usable.size() > 1 && lowers_by_cost(c, mode)) {
    std::string why;
    const AlgorithmPtr pick = cheapest_algorithm(usable, p, measured_machine(mode.threads), &why);
    auto impl = std::make_shared<ConvImplOp>(abstract, pick, why, options);
    ctx.stats.notes.push_back(msg("lowering: ", conv_node_label(v), " -> ", pick->name(), " (", why, ")"));
    return convgraph::apply(impl, v.inputs(), v.name());
  }
  std::vector<std::string> passed_over;  // tag-enabled algorithms ahead of the winner that declined
  for (const auto& verdict : c.verdicts) {
    if (!verdict.reason.empty()) {
      if (!verdict.by_tags) passed_over.push_back(verdict.algorithm->name() + ": " + verdict.reason);
      continue;
    }
    std::string why = "priority";
    if (verdict.promoted) why += ", promoted by an included tag";
    if (!passed_over.empty()) why += "; declined first: " + join_text(passed_over, "; ");
    auto impl = std::make_shared<ConvImplOp>(abstract, verdict.algorithm, why, options);
    ctx.stats.notes.push_back(msg("lowering: ", conv_node_label(v), " -> ", verdict.algorithm->name(), " (", why, ")"));
    return convgraph::apply(impl, v.inputs(), v.name());
  }
  return std::nullopt;
}

}  // namespace

void register_conv_lowering(RewriteDB& db) {
  db.add_phase("conv_lowering", kConvLoweringPos, {"fast_run", "fast_compile"});
  db.add_local("conv_lowering", "lower_abstract_conv", {"fast_run", "fast_compile", "conv_priority"}, 1,
               lower_abstract_conv);
}

}  // namespace convgraph
