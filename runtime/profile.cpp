#include "convgraph/runtime/profile.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace convgraph {

std::string ProfileStats::summary() const {
  std::ostringstream os;
  char line[512];
  double total = 0;
  for (const auto& n : nodes) total += n.seconds;
  os << "Function profile: " << calls << " call(s), " << call_seconds << " s in calls, " << total
     << " s in kernels, peak intermediate memory " << peak_bytes << " bytes\n";
  // By op class.
  std::map<std::string, std::pair<double, std::int64_t>> by_op;
  for (const auto& n : nodes) {
    by_op[n.op].first += n.seconds;
    by_op[n.op].second += 1;
  }
  std::vector<std::pair<std::string, std::pair<double, std::int64_t>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  os << "\nOps\n  <% time> <cum %> <total s> <per call s> <#apply> <op>\n";
  double cum = 0;
  for (const auto& [name, st] : ops) {
    const double pct = total > 0 ? 100 * st.first / total : 0;
    cum += pct;
    std::snprintf(line, sizeof line, "  %6.1f%% %6.1f%% %10.6f %12.3e %8lld  %s\n", pct, cum, st.first,
                  calls ? st.first / static_cast<double>(calls) : 0.0, static_cast<long long>(st.second), name.c_str());
    os << line;
  }
  // By node.
  std::vector<const NodeProfile*> sorted;
  for (const auto& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  os << "\nApply nodes\n  <% time> <cum %> <total s> <per call s> <#call> <out bytes> <workspace> <node> [impl]\n";
  cum = 0;
  for (const auto* n : sorted) {
    const double pct = total > 0 ? 100 * n->seconds / total : 0;
    cum += pct;
    std::snprintf(line, sizeof line, "  %6.1f%% %6.1f%% %10.6f %12.3e %7lld %11zu %11zu  %s%s%s%s\n", pct, cum, n->seconds,
                  n->calls ? n->seconds / static_cast<double>(n->calls) : 0.0, static_cast<long long>(n->calls),
                  n->output_bytes, n->workspace_bytes, n->node.c_str(), n->implementation.empty() ? "" : " [",
                  n->implementation.c_str(), n->implementation.empty() ? "" : "]");
    os << line;
  }
  return os.str();
}

}  // namespace convgraph
