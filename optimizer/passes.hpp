#pragma once
// Internal: registration of every optimizer pass into the default RewriteDB, the state one
// optimize() call shares between passes, and small helpers the passes have in common.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/optimizer/rewrite_db.hpp"

namespace convgraph {

class TuningCache;
class MetaClock;
struct RunTimeTuning;  // meta_optimizer.cpp

// Phase positions: the order of docs/DESIGN.md's pipeline.
inline constexpr double kCanonicalizePos = 1;
inline constexpr double kMergePos = 2;
inline constexpr double kConstantFoldingPos = 3;
inline constexpr double kDevicePlacementPos = 4;
inline constexpr double kConvLoweringPos = 5;
inline constexpr double kFusionPos = 6;
inline constexpr double kCleanupPos = 7;

void register_canonicalize(RewriteDB& db);
void register_merge(RewriteDB& db);
void register_constant_folding(RewriteDB& db);
void register_device_placement(RewriteDB& db);
/// The device_placement pass itself (exposed for tests): moves every node whose op has a
/// kernel for `device` there, with transfers at the boundaries and outputs downloaded.
void place_on_device(FunctionGraph& graph, DeviceKind device);
void register_conv_lowering(RewriteDB& db);   // the conv_lowering phase + priority lowering
void register_meta_optimizer(RewriteDB& db);  // conv_meta, inside conv_lowering
void register_fusion(RewriteDB& db);
void register_conv_epilogue_fusion(RewriteDB& db);  // in the fusion phase, before elemwise_fusion
void register_grad_fusion(RewriteDB& db);           // the same (relu's gradient into pooling's)
void register_blocked_layout(RewriteDB& db);        // the same, after conv_epilogue_fusion (NCHW16c regions)
void register_cleanup(RewriteDB& db);

/// Common-subexpression elimination over the whole graph; returns the merges made.
int merge_graph(FunctionGraph& graph);

struct OptimizeState {
  const AlgorithmRegistry* registry = nullptr;
  std::shared_ptr<MetaClock> clock;
  /// Opened on first use by the meta-optimizer; saved by optimize() at the end.
  std::unique_ptr<TuningCache> cache;
  bool cache_opened = false;
  /// conv_meta nodes with shapes unknown at compile time share this (meta_optimizer.cpp).
  std::shared_ptr<RunTimeTuning> run_time_tuning;
  OptimizeState();
  ~OptimizeState();
};

/// True when v is one of the graph's outputs (a value the caller reads, so never fused away).
bool is_graph_output(const FunctionGraph& g, const Var& v);

/// Sends one line to Mode::log, or std::cerr.
void log_line(const Mode& mode, const std::string& line);

/// Runs `decide` in this process, or, under a tuning agreement (tuning_agreement.hpp) on a
/// rank other than 0, does not and returns rank 0's answer instead. Empty when `decide`
/// ran here (its own result stands); the meta-optimizer and blocked_layout both use it.
std::optional<std::string> rank0_choice(const std::function<std::string()>& decide);

}  // namespace convgraph
