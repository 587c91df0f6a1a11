#pragma once
// Private: the Chrome trace-event JSON of one profiled call (chrome://tracing, Perfetto).
#include <string>
#include <vector>

#include "convgraph/runtime/profile.hpp"

namespace convgraph::detail {

/// When node i of the schedule ran, relative to the start of the call.
struct TraceSpan {
  double start_us = 0, dur_us = 0;
};

/// {"traceEvents": [...]}: one complete ("X") event per node, named by its op, with the
/// chosen implementation as category and the node's label in args. Any text is escaped
/// (names may hold quotes, control characters or bytes that are not UTF-8: those become
/// U+FFFD), so the result always parses.
std::string chrome_trace_json(const std::vector<NodeProfile>& nodes, const std::vector<TraceSpan>& spans);

}  // namespace convgraph::detail
