#pragma once
/// Mode: how compile() optimizes and runs a graph. One value passed to compile() -
/// no process-global configuration. Built from presets, chained setters, or the flag
/// language of docs/DESIGN.md ("device=cpu,optimizer_including=conv_fft,...", also read
/// from the CONVGRAPH_FLAGS environment variable).
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
  bool profile = false;                   ///< collect per-node time and memory
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
  /// The effective settings as a flag string.
  std::string to_string() const;
};

}  // namespace convgraph
