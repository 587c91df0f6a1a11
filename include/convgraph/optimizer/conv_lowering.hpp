#pragma once
/// Which ConvAlgorithm may implement an abstract convolution node, and why the others may
/// not. One selector serves priority lowering, the meta-optimizer, run-time choice and the
/// "no implementation" error, so all four agree.
#include <string>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/optimizer/mode.hpp"
#include "convgraph/optimizer/rewrite_db.hpp"

namespace convgraph {

/// One algorithm's verdict for one node, in priority order.
struct ConvVerdict {
  AlgorithmPtr algorithm;
  std::string reason;     ///< empty: usable
  bool promoted = false;  ///< moved to the front by an explicitly included tag (conv_fft...)
  bool by_tags = false;   ///< declined by the tag query (not a candidate at all), not by the problem
  std::size_t workspace = 0;
};

struct ConvCandidates {
  std::vector<ConvVerdict> verdicts;  ///< every algorithm of the device, priority order
  std::vector<AlgorithmPtr> usable() const;
  /// "cpu.fft: stride 2 not supported" lines for the declined ones.
  std::vector<std::string> declined() const;
};

/// The tag query algorithms are filtered with: the optimizer preset (fast_run or
/// fast_compile) plus optimizer_including (plus conv_fft for a request_fft node),
/// optimizer_excluding and optimizer_requiring.
TagQuery algorithm_query(const Mode& mode, const ConvParams& params);

/// Algorithms of `device` that may implement `op` under `mode`, in priority order:
/// registry order, except that algorithms carrying an explicitly included tag (e.g.
/// optimizer_including=conv_fft, or a request_fft node) go first. `problem` null means
/// shapes unknown: only tags are checked; otherwise applicability and workspace too.
ConvCandidates conv_candidates(const AbstractConvOp& op, const ConvProblem* problem, DeviceKind device,
                               const Mode& mode, const AlgorithmRegistry& registry);

/// The meta-optimizer's candidates, with Theano's multiset semantics (SEMANTICS 2.6):
/// every algorithm the priority query accepts counts 1 (pseudo-tag "default"; the others
/// are "alternative"); each metaopt.optimizer_including tag it carries adds 1, each
/// metaopt.optimizer_excluding tag subtracts 1; count > 0 keeps it. optimizer_excluding,
/// optimizer_requiring and allow_fft=false still rule an algorithm out.
ConvCandidates meta_candidates(const AbstractConvOp& op, const ConvProblem& problem, DeviceKind device,
                               const Mode& mode, const AlgorithmRegistry& registry);

/// Whether priority lowering chooses by the cost model (the default) or by list order
/// (optimizer_excluding=conv_cost_model).
bool uses_cost_model(const Mode& mode);

/// Whether priority lowering chooses among `c`'s usable algorithms by the cost model: the
/// mode allows it and the first usable one was not put first by an explicitly included
/// tag (a user's choice, as in Theano). One rule for compile-time, run-time and the bench.
bool lowers_by_cost(const ConvCandidates& c, const Mode& mode);

/// Of `usable` (priority order, all applicable to `p`), the one the cost model estimates
/// fastest on `machine`: the first on ties, and the first of all when none has an
/// estimate. `why` (if given) gets "cost model: cpu.winograd 2.1 ms (cpu.corrmm 5.3 ms, ...)".
AlgorithmPtr cheapest_algorithm(const std::vector<AlgorithmPtr>& usable, const ConvProblem& p,
                                const MachineModel& machine, std::string* why = nullptr);

/// The registry a mode lowers with (Mode::registry or the built-in one).
const AlgorithmRegistry& mode_registry(const Mode& mode);

/// The implementation tags that could lower `op`, from the registry: every tag its
/// algorithms carry (less the presets fast_run/fast_compile, and FFT's for a node that
/// refuses FFT), in priority order, then conv_meta.
std::vector<std::string> conv_lowering_tags(const AbstractConvOp& op, const AlgorithmRegistry& registry);

/// "#12 AbstractConv 'conv1'": how messages name a node.
std::string conv_node_label(const Var& v);

/// The message body for an abstract node left in the graph: the node, its types, the
/// tags that could lower it, the excluded tags and each candidate's reason.
std::string explain_unlowered(const Var& node, const Mode& mode);

}  // namespace convgraph
