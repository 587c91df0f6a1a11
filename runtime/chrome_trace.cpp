// The Chrome trace of a profiled call, written with nlohmann-json.
#include "runtime/chrome_trace.hpp"

#include <nlohmann/json.hpp>

namespace convgraph::detail {

std::string chrome_trace_json(const std::vector<NodeProfile>& nodes, const std::vector<TraceSpan>& spans) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < nodes.size() && i < spans.size(); ++i) {
    const NodeProfile& n = nodes[i];
    events.push_back({{"name", n.op},
                      {"cat", n.implementation.empty() ? std::string("op") : n.implementation},
                      {"ph", "X"},
                      {"ts", spans[i].start_us},
                      {"dur", spans[i].dur_us},
                      {"pid", 1},
                      {"tid", 1},
                      {"args", {{"node", n.node}}}});
  }
  const nlohmann::ordered_json trace = {{"traceEvents", std::move(events)}};
  return trace.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace convgraph::detail
