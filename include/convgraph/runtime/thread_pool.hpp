#pragma once
/// A small fixed pool for data-parallel kernels. Work is handed out in chunks from a
/// shared counter, so a slow core (these hosts sometimes halve one vCPU) takes less.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace convgraph {

class ThreadPool {
 public:
  /// threads <= 0: one per hardware thread.
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

  /// A process-wide pool sized by CONVGRAPH_THREADS or the hardware.
  static ThreadPool& default_pool();

 private:
  struct Job;
  void worker_loop();
  static void run_chunks(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::mutex submit_mu_;
};

}  // namespace convgraph
