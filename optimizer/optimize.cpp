// optimize(): the pipeline driver, the checks before it (tags, cuDNN requests, device) and
// after it (no abstract node may remain), and the default rewrite database.
#include "convgraph/optimizer/optimize.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/optimizer/conv_lowering.hpp"
#include "convgraph/optimizer/meta_optimizer.hpp"
#include "convgraph/optimizer/rewrite_db.hpp"
#include "optimizer/passes.hpp"
#include "optimizer/text_util.hpp"

namespace convgraph {

OptimizeState::OptimizeState() = default;
OptimizeState::~OptimizeState() = default;

bool is_graph_output(const FunctionGraph& g, const Var& v) {
  for (const auto& o : g.outputs())
    if (o.same(v)) return true;
  return false;
}

void log_line(const Mode& mode, const std::string& line) {
  if (mode.log) mode.log(line);
  else std::cerr << line << '\n';
}

const RewriteDB& default_rewrite_db() {
  static const RewriteDB db = [] {
    RewriteDB d;
    register_canonicalize(d);
    register_merge(d);
    register_constant_folding(d);
    register_device_placement(d);
    register_conv_lowering(d);
    register_meta_optimizer(d);
    register_fusion(d);
    register_conv_epilogue_fusion(d);
    register_grad_fusion(d);
    register_blocked_layout(d);
    register_cleanup(d);
    return d;
  }();
  return db;
}

TagQuery rewrite_query(const Mode& mode) {
  TagQuery q;
  q.include.push_back(mode.optimizer == "fast_compile" ? "fast_compile" : "fast_run");
  return q.including(mode.include_tags).excluding(mode.exclude_tags);
}

namespace {

// Theano's vocabulary, valid whether or not this build has the algorithms carrying it.
const std::vector<std::string> kKnownTags = {
    "fast_run", "fast_compile", "conv_dnn",  "cudnn",          "conv_gemm", "conv_fft",
    "conv_direct", "conv_winograd", "conv_meta", "conv3d2d", "conv_reference", "default", "alternative",
    "conv_cost_model"};  // excluded: priority lowering takes list order instead of the cost model

void validate_tags(const Mode& mode, const AlgorithmRegistry& reg) {
  std::vector<std::string> vocab = kKnownTags;
  auto add = [&](const std::string& w) {
    if (std::find(vocab.begin(), vocab.end(), w) == vocab.end()) vocab.push_back(w);
  };
  for (const auto& w : default_rewrite_db().vocabulary()) add(w);
  for (const auto& a : reg.all()) {
    add(a->name());
    for (const auto& t : a->tags()) add(t);
  }
  const std::pair<const char*, const std::vector<std::string>*> lists[] = {
      {"optimizer_including", &mode.include_tags},       {"optimizer_excluding", &mode.exclude_tags},
      {"optimizer_requiring", &mode.require_tags},       {"metaopt.optimizer_including", &mode.metaopt_include},
      {"metaopt.optimizer_excluding", &mode.metaopt_exclude}};
  for (const auto& [flag, tags] : lists)
    for (const auto& t : *tags) {
      if (std::find(vocab.begin(), vocab.end(), t) != vocab.end()) continue;
      const std::string near = closest_match(t, vocab);
      throw FlagError(msg("flag ", flag, ": unknown tag '", t, "'", near.empty() ? "" : "; did you mean '" + near + "'?",
                          " (known tags: ", join_text(kKnownTags), "; rewrite names and algorithm names also work)"));
    }
}

void check_cudnn_request(const Mode& mode) {
  const char* flag = nullptr;
  if (std::find(mode.include_tags.begin(), mode.include_tags.end(), "cudnn") != mode.include_tags.end())
    flag = "optimizer_including=cudnn";
  else if (std::find(mode.require_tags.begin(), mode.require_tags.end(), "cudnn") != mode.require_tags.end())
    flag = "optimizer_requiring=cudnn";
  if (!flag) return;
  const CudaInfo& info = cuda_info();
  if (!info.built || !info.available)
    throw CompileError(msg(flag, ": cuDNN was requested but cannot be used: ", info.reason,
                           ". Remove the flag, or run on a machine with a GPU and a CUDA build."));
  if (mode.device != DeviceKind::cuda)
    throw CompileError(msg(flag, ": cuDNN was requested but device=", device_name(mode.device),
                           "; set device=cuda to run convolutions with cuDNN"));
}

void check_device(const Mode& mode) {
  if (mode.device != DeviceKind::cuda) return;
  const CudaInfo& info = cuda_info();
  if (!info.available) throw DeviceError(msg("device=cuda: no usable GPU: ", info.reason));
}

/// After each phase (DebugMode): every node's type must still be what its op infers.
void verify_types(const FunctionGraph& g, const std::string& phase) {
  for (const Var& v : g.toposort()) {
    if (!v.op()) continue;
    std::vector<TensorType> types;
    for (const auto& i : v.inputs()) types.push_back(i.type());
    TensorType t;
    try {
      t = v.op()->infer(types);
    } catch (const Error& e) {
      throw CompileError(msg("optimizer bug: after phase ", phase, ", ", conv_node_label(v), " no longer type-checks: ", e.what()));
    }
    TensorType declared = v.type();
    declared.device = t.device;  // placement moves nodes; infer may not know devices
    if (!declared.accepts(t))
      throw CompileError(msg("optimizer bug: after phase ", phase, ", ", conv_node_label(v), " has type ",
                             v.type().to_string(), " but its op infers ", t.to_string()));
  }
}

void check_lowered(const FunctionGraph& g, const Mode& mode) {
  std::vector<std::string> problems;
  for (const Var& v : g.toposort())
    if (v.op() && v.op()->is_abstract()) problems.push_back(explain_unlowered(v, mode));
  if (problems.empty()) return;
  throw CompileError(msg("convgraph: cannot compile: ", join_text(problems, "\n")));
}

}  // namespace

void optimize(FunctionGraph& graph, const Mode& mode, CompileStats& stats) {
  const AlgorithmRegistry& reg = mode_registry(mode);
  validate_tags(mode, reg);
  check_cudnn_request(mode);
  check_device(mode);
  if (mode.optimizer != "None") {
    OptimizeState state;
    state.registry = &reg;
    state.clock = mode.metaopt_clock ? mode.metaopt_clock : steady_meta_clock();
    RewriteContext ctx{graph, mode, stats, &state, {}};
    const RewriteDB& db = default_rewrite_db();
    const TagQuery q = rewrite_query(mode);
    struct SaveCache {  // tuning results are kept even when a later phase throws
      OptimizeState& s;
      ~SaveCache() {
        if (s.cache) s.cache->save();
      }
    } save{state};
    for (const RewritePhase* phase : db.query_phases(q)) {
      const auto t0 = std::chrono::steady_clock::now();
      db.run_phase(*phase, q, ctx);
      stats.pass_seconds.emplace_back(
          phase->name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
#ifndef NDEBUG
      verify_types(graph, phase->name);
#else
      if (mode.debug) verify_types(graph, phase->name);
#endif
    }
  }
  check_lowered(graph, mode);
}

}  // namespace convgraph
