#pragma once
/// Running a check in a separate process, for cases that must not touch the test process:
/// a memory limit (setrlimit), a fresh ThreadPool::default_pool() under some environment.
/// Both return the child's exit code, or -(signal number) if it was killed (a hang is
/// killed after `timeout_s`, so it fails the test instead of stalling the suite).
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace convgraph::test {

/// Exit codes of run_in_child's child: fn's own return value, or one of these.
inline constexpr int kChildConvgraphError = 70;   ///< fn threw a convgraph::Error
inline constexpr int kChildOtherException = 71;   ///< fn threw anything else
inline constexpr int kChildSetupFailed = 72;      ///< the limit could not be set

/// Forks; the child (only this thread exists there) optionally limits its address space
/// to its current size plus `address_space_headroom` bytes (0 = no limit), runs fn and
/// exits with fn's return value or one of the codes above.
int run_in_child(const std::function<int()>& fn, long long address_space_headroom = 0, int timeout_s = 60);

/// True under AddressSanitizer, ThreadSanitizer or MemorySanitizer, whose shadow memory
/// cannot live with an RLIMIT_AS limit.
bool sanitized_build();

/// Runs this test executable again, running only the test case `test_name` (which may be
/// hidden, tag "[.]"), with `env` added to the environment; its output goes to /dev/null.
/// Catch2's exit code is the number of failed assertions: 0 means the child test passed.
int run_test_in_new_process(const std::string& test_name,
                            const std::vector<std::pair<std::string, std::string>>& env, int timeout_s = 120);

}  // namespace convgraph::test
