#pragma once
/// Profiling records, in the spirit of Theano's ProfileStats.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "convgraph/optimizer/compile_stats.hpp"

namespace convgraph {

struct NodeProfile {
  std::string node;            ///< debugprint-style label: "#12 AbstractConv 'conv1'"
  std::string op;              ///< op name (class)
  std::string implementation;  ///< chosen implementation, if any
  std::int64_t calls = 0;
  double seconds = 0;          ///< total time over all calls
  std::size_t output_bytes = 0;
  std::size_t workspace_bytes = 0;
};

struct ProfileStats {
  std::int64_t calls = 0;
  double call_seconds = 0;
  std::size_t peak_bytes = 0;
  std::vector<NodeProfile> nodes;  ///< schedule order
  /// Tables by op and by node with % time, cumulative %, per-call time, and memory.
  std::string summary() const;
  /// Chrome trace-event JSON of the last call (chrome://tracing, Perfetto).
  std::string chrome_trace;
};

}  // namespace convgraph
