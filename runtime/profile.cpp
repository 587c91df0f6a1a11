#include "convgraph/runtime/profile.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/exit_profiles.hpp"

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

// ---- profile=True: the summaries printed at exit ----------------------------------------

namespace convgraph::detail {

namespace {

struct ExitEntry {
  std::string title, file;
  std::function<std::optional<ProfileStats>()> snapshot;
  std::optional<ProfileStats> last;  // set when the function died before exit
};

// Never destroyed: functions that outlive the exit handler (statics destroyed after it)
// may still retire themselves; after printing, that is ignored.
struct ExitProfiles {
  std::recursive_mutex mu;  // a snapshot may drop the last owner of a function, which retires it
  std::vector<ExitEntry> entries;
  bool printed = false;
};

ExitProfiles& exit_profiles() {
  static auto* p = new ExitProfiles;
  return *p;
}

std::string report_locked(ExitProfiles& r, const std::string& file) {
  std::vector<std::pair<const ExitEntry*, ProfileStats>> shown;
  for (const auto& e : r.entries) {
    if (e.file != file) continue;
    std::optional<ProfileStats> s = e.last ? e.last : e.snapshot();
    if (s) shown.emplace_back(&e, std::move(*s));
  }
  std::ostringstream os;
  os << "convgraph profile (profile=True): " << shown.size() << " function(s)\n";
  for (std::size_t i = 0; i < shown.size(); ++i)
    os << "\n=== function " << i + 1 << " of " << shown.size() << ": " << shown[i].first->title << " ===\n"
       << shown[i].second.summary();
  return os.str();
}

void print_exit_profiles() {
  ExitProfiles& r = exit_profiles();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (r.printed) return;
  r.printed = true;
  std::vector<std::string> files;
  for (const auto& e : r.entries)
    if (std::find(files.begin(), files.end(), e.file) == files.end()) files.push_back(e.file);
  for (const auto& file : files) {
    const std::string text = report_locked(r, file);
    if (file.empty()) {
      std::fputs(text.c_str(), stderr);
      continue;
    }
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      std::fprintf(stderr, "convgraph: warning: profile.file=%s: cannot write the profile there; it follows here\n%s",
                   file.c_str(), text.c_str());
  }
}

}  // namespace

int register_exit_profile(std::string title, std::string file, std::function<std::optional<ProfileStats>()> snapshot) {
  ExitProfiles& r = exit_profiles();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (r.entries.empty()) std::atexit(print_exit_profiles);
  r.entries.push_back({std::move(title), std::move(file), std::move(snapshot), std::nullopt});
  return static_cast<int>(r.entries.size()) - 1;
}

void retire_exit_profile(int id, ProfileStats last) {
  ExitProfiles& r = exit_profiles();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (id >= 0 && static_cast<std::size_t>(id) < r.entries.size()) r.entries[static_cast<std::size_t>(id)].last = std::move(last);
}

std::string exit_profile_report(const std::string& file) {
  ExitProfiles& r = exit_profiles();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  return report_locked(r, file);
}

}  // namespace convgraph::detail
