#pragma once
/// The rewrite database (pytensor's RewriteDatabase/SequenceDB/EquilibriumDB in one):
/// phases run in position order; each phase holds global rewrites (run once, in order)
/// and local rewrites (tried on every node, applied until nothing changes, with an
/// iteration cap). Every phase and rewrite is registered once with a name and tags, and
/// a TagQuery picks which ones run.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

class FunctionGraph;
struct Mode;
struct CompileStats;
struct OptimizeState;

/// Tag selection with pytensor's semantics: an entry is selected when it has at least
/// one included tag, no excluded tag, and every required tag. An entry's name counts as
/// one of its tags, so a single rewrite can be switched off by name.
struct TagQuery {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  std::vector<std::string> require;

  /// "fast_run:+conv_fft:-conv_gemm:&cudnn": a bare or '+' tag includes, '-' excludes,
  /// '&' requires. Throws FlagError on an empty tag.
  static TagQuery parse(std::string_view text);
  bool accepts(const std::vector<std::string>& tags, std::string_view name = {}) const;
  /// Why `accepts` is false, in words ("excluded by optimizer_excluding=conv_gemm");
  /// empty when accepted.
  std::string reject_reason(const std::vector<std::string>& tags, std::string_view name = {}) const;
  TagQuery including(const std::vector<std::string>& tags) const;
  TagQuery excluding(const std::vector<std::string>& tags) const;
  TagQuery requiring(const std::vector<std::string>& tags) const;
  std::string to_string() const;  ///< the parse() syntax
};

/// What a rewrite sees: the graph it edits, the mode, statistics to append to, and
/// state private to one optimize() call (tuning cache, diagnostics).
struct RewriteContext {
  FunctionGraph& graph;
  const Mode& mode;
  CompileStats& stats;
  OptimizeState* state = nullptr;
  /// Name of the phase and rewrite running now (for replace() reasons and notes).
  std::string current;
};

/// A local rewrite looks at one node and returns its replacement, or nothing.
using LocalRewrite = std::function<std::optional<Var>(const Var& node, RewriteContext& ctx)>;
/// A global rewrite walks the whole graph itself.
using GlobalRewrite = std::function<void(RewriteContext& ctx)>;

struct RewritePhase {
  std::string name;
  std::vector<std::string> tags;
  double position = 0;
};

struct RewriteEntry {
  std::string name;
  std::string phase;
  std::vector<std::string> tags;
  double position = 0;  ///< order inside the phase, lowest first
  LocalRewrite local;   ///< exactly one of local / global is set
  GlobalRewrite global;
};

class RewriteDB {
 public:
  /// Iteration cap of the local-rewrite fixed point (full sweeps over the graph).
  static constexpr int kMaxSweeps = 64;

  /// Throws ValueError when the name is taken (by a phase, a rewrite, or as a tag).
  void add_phase(std::string name, double position, std::vector<std::string> tags);
  void add_local(std::string phase, std::string name, std::vector<std::string> tags, double position,
                 LocalRewrite fn);
  void add_global(std::string phase, std::string name, std::vector<std::string> tags, double position,
                  GlobalRewrite fn);

  /// Phases in position order.
  std::vector<const RewritePhase*> phases() const;
  /// Selected phases, in order.
  std::vector<const RewritePhase*> query_phases(const TagQuery& q) const;
  /// Selected rewrites of one phase, in position order.
  std::vector<const RewriteEntry*> query(const TagQuery& q, std::string_view phase) const;
  /// Every name and tag (for flag validation and "did you mean").
  std::vector<std::string> vocabulary() const;
  /// One line per phase and rewrite with tags and position (pytensor's print_summary).
  std::string summary() const;

  /// Runs the selected phases on ctx.graph, appending (phase, seconds) to
  /// ctx.stats.pass_seconds and a note when a fixed point is not reached.
  void run(const TagQuery& q, RewriteContext& ctx) const;
  /// Runs one phase's selected rewrites (globals in order, then locals to a fixed point).
  /// Returns the number of replacements made by local rewrites.
  int run_phase(const RewritePhase& phase, const TagQuery& q, RewriteContext& ctx) const;

 private:
  void check_name(const std::string& name, const std::vector<std::string>& tags) const;
  void add(RewriteEntry e);
  std::vector<RewritePhase> phases_;
  std::vector<RewriteEntry> entries_;
};

/// The database compile() uses: canonicalize, merge, constant_folding, device_placement,
/// conv_lowering (conv_meta, then priority lowering), fusion, cleanup.
const RewriteDB& default_rewrite_db();

}  // namespace convgraph
