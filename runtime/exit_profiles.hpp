#pragma once
// Internal: profile=True prints every profiled function's summary when the process exits
// (Theano's behaviour), to stderr or to profile.file.
#include <functional>
#include <optional>
#include <string>

#include "convgraph/runtime/profile.hpp"

namespace convgraph::detail {

/// Registers a profiled function. `snapshot` returns its current statistics, or nothing
/// once it is gone; a function that dies before exit hands its last statistics to
/// retire_exit_profile() instead. Returns the id retire_exit_profile() takes.
int register_exit_profile(std::string title, std::string file, std::function<std::optional<ProfileStats>()> snapshot);
void retire_exit_profile(int id, ProfileStats last);

/// The text printed at exit for the registered functions writing to `file` (tests).
std::string exit_profile_report(const std::string& file);

}  // namespace convgraph::detail
