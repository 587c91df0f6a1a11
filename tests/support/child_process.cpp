#include "support/child_process.hpp"

#include <convgraph/core/error.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace convgraph::test {

namespace {
long long address_space_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long pages = -1;
  if (std::fscanf(f, "%lld", &pages) != 1) pages = -1;
  std::fclose(f);
  return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

// Waits for pid up to timeout_s, killing it after that; exit code or -signal.
int wait_for(pid_t pid, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1000;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1001;
}
}  // namespace

bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

int run_in_child(const std::function<int()>& fn, long long address_space_headroom, int timeout_s) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1002;
  if (pid == 0) {
    if (address_space_headroom > 0) {
      const long long now = address_space_bytes();
      if (now < 0) _exit(kChildSetupFailed);
      const rlimit lim{static_cast<rlim_t>(now + address_space_headroom), static_cast<rlim_t>(now + address_space_headroom)};
      if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(kChildSetupFailed);
    }
    int rc;
    try {
      rc = fn();
    } catch (const convgraph::Error&) {
      rc = kChildConvgraphError;
    } catch (...) {
      rc = kChildOtherException;
    }
    _exit(rc);
  }
  return wait_for(pid, timeout_s);
}

int run_test_in_new_process(const std::string& test_name,
                            const std::vector<std::pair<std::string, std::string>>& env, int timeout_s) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    bool overridden = false;
    for (const auto& [k, v] : env) overridden = overridden || std::strncmp(*e, (k + "=").c_str(), k.size() + 1) == 0;
    if (!overridden) env_strings.emplace_back(*e);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", name = test_name;
  char* argv[] = {exe.data(), name.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1003;
  return wait_for(pid, timeout_s);
}

}  // namespace convgraph::test
