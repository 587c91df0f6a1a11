#pragma once
/// Mode: how compile() optimizes and runs a graph. One value passed to compile() -
/// no process-global configuration. Built from presets, chained setters, or the flag
/// language of docs/DESIGN.md ("device=cpu,optimizer_including=conv_fft,...").
///
/// Precedence, as THEANO_FLAGS and code: the CONVGRAPH_FLAGS environment variable is the
/// base under every Mode, and what a program sets in code goes on top (compile() runs
/// with Mode::effective()). A setting counts as set in code when it differs from the
/// default, or when a preset, a setter or the flag language set it (Mode::code_flags),
/// so `Mode::fast_run().with_flags("profile=False")` switches off an environment's
/// profile=True. Tag lists (optimizer_including, ...) are the union of both.
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "convgraph/core/device.hpp"

namespace convgraph {

class AlgorithmRegistry;
class MetaClock;  // optimizer/meta_optimizer.hpp

struct Mode {
  std::string optimizer = "fast_run";     ///< "fast_run", "fast_compile" or "None"
  std::vector<std::string> include_tags;  ///< optimizer_including
  std::vector<std::string> exclude_tags;  ///< optimizer_excluding
  std::vector<std::string> require_tags;  ///< optimizer_requiring
  DeviceKind device = DeviceKind::cpu;
  bool debug = false;                     ///< DebugMode: check every conv against the reference
  bool profile = false;                   ///< collect per-node time and memory; summary at exit
  std::string profile_file;               ///< profile.file: where the exit summary goes; empty = stderr
  int metaopt_verbose = 0;
  std::vector<std::string> metaopt_include;
  std::vector<std::string> metaopt_exclude;
  std::string metaopt_cache;              ///< tuning cache file; empty = default location, "None" = off
  double metaopt_budget = 10.0;           ///< seconds of timing per node (metaopt.budget)
  std::size_t workspace_limit = std::numeric_limits<std::size_t>::max();
  int threads = 0;                        ///< 0 = the default pool
  /// Algorithms to lower convolutions with; nullptr = AlgorithmRegistry::builtin().
  const AlgorithmRegistry* registry = nullptr;
  /// Clock the meta-optimizer times candidates with; nullptr = std::chrono::steady_clock.
  /// Tests inject a fake one to control which candidate looks fastest.
  std::shared_ptr<MetaClock> metaopt_clock;
  /// Where metaopt.verbose lines and optimizer warnings go; nullptr = std::cerr.
  std::function<void(const std::string&)> log;
  /// Flags set in code even where their value is the default ("profile", "mode", ...):
  /// the flag language and the setters add them. A field assigned directly counts as set
  /// in code when it differs from the default; add its flag name here to make a default
  /// value win over CONVGRAPH_FLAGS too.
  std::vector<std::string> code_flags;

  static Mode fast_run();
  static Mode fast_compile();
  static Mode debug_mode();
  static Mode none();  ///< optimizer=None: no rewrites (abstract convolutions then fail)

  Mode including(std::string_view tags) const;  ///< ":"-separated tags
  Mode excluding(std::string_view tags) const;
  Mode requiring(std::string_view tags) const;
  Mode with_flags(std::string_view flags) const;

  /// Parses the flag language on top of `base`; throws FlagError listing the valid flags
  /// or values on any unknown flag or bad value.
  static Mode from_flags(std::string_view flags, const Mode& base = fast_run());
  /// fast_run() with CONVGRAPH_FLAGS applied (the default of compile()).
  static Mode from_env();
  /// What compile() runs with: the defaults, CONVGRAPH_FLAGS over them, and every setting
  /// this Mode makes in code over those (see the class comment). Throws FlagError naming
  /// CONVGRAPH_FLAGS when the environment holds an unknown flag or a bad value, whatever
  /// the program passes.
  Mode effective() const;
  /// The environment layer alone: fast_run() with CONVGRAPH_FLAGS applied, code_flags
  /// naming the flags it sets (FlagError naming CONVGRAPH_FLAGS when it is bad).
  static Mode env_layer();
  /// The effective settings as a flag string.
  std::string to_string() const;
};

/// One line of the effective configuration.
struct ConfigEntry {
  std::string name;    ///< flag name: "device", "metaopt.verbose", ...
  std::string value;   ///< effective value, as the flag language writes it
  std::string origin;  ///< "default", "env" (CONVGRAPH_FLAGS), "code", or "env+code" (tag lists)
  std::string values;  ///< what it accepts: "cpu|cuda"
  std::string doc;     ///< one line on what it does
};

/// Every flag of `mode.effective()` with its value, where it came from and its doc line.
std::vector<ConfigEntry> config_entries(const Mode& mode = Mode{});
/// The same as text, as Python's print(theano.config) shows it:
///   device (cpu|cuda)
///       Doc:    where compiled functions run
///       Value:  cpu
///       From:   default
std::string config(const Mode& mode = Mode{});

}  // namespace convgraph
