#pragma once
/// A small fixed pool for data-parallel kernels. Work is handed out in chunks from a
/// shared counter, so a slow core (these hosts sometimes halve one vCPU) takes less.
/// Between jobs the workers (and the caller, waiting for them) spin for a short while
/// before sleeping: a convolution runs several parallel loops back to back, and waking a
/// sleeping thread (a halted vCPU) costs tens of microseconds each time.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace convgraph {

/// The largest thread count a pool may have (ThreadPool, Mode threads, CONVGRAPH_THREADS).
inline constexpr int kMaxThreads = 1024;

/// Parses a CONVGRAPH_THREADS value strictly: decimal digits only, 1..kMaxThreads.
/// Anything else (empty, "abc", "4x", "0", "-2", "100000") is a ValueError naming
/// CONVGRAPH_THREADS and the value.
int parse_thread_count(std::string_view text);

/// The thread count the process is configured for: CONVGRAPH_THREADS when set (and
/// non-empty), else one per hardware thread (at most kMaxThreads). The one place that
/// reads the variable; throws parse_thread_count's ValueError for a bad value.
int configured_thread_count();

class ThreadPool {
 public:
  /// threads == 0: one per hardware thread (at most kMaxThreads); otherwise 1..kMaxThreads
  /// (ValueError outside). If a thread cannot be started, the ones already running are
  /// stopped and joined, and a RuntimeError (MemoryError for std::bad_alloc) is thrown.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  /// Calls fn(begin, end) over [0, n) in chunks of at least `grain`, on every thread
  /// including the caller; returns when all are done. Rethrows the first exception.
  /// Nested calls from inside fn run serially on the calling thread.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                    std::int64_t grain = 1);

  /// A process-wide pool of configured_thread_count() threads, made on first use; a bad
  /// CONVGRAPH_THREADS is a ValueError then (and on every later call).
  static ThreadPool& default_pool();

 private:
  struct Job;
  void worker_loop();
  static void run_chunks(Job& job);
  void stop_and_join() noexcept;

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  Job* job_ = nullptr;
  // Written under mu_; atomic so the spinning threads can read them without it.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> stop_{false};
  std::mutex submit_mu_;
};

}  // namespace convgraph
