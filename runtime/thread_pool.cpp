#include "convgraph/runtime/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>

namespace convgraph {

struct ThreadPool::Job {
  std::int64_t n = 0;
  std::int64_t chunk = 1;
  const std::function<void(std::int64_t, std::int64_t)>* fn = nullptr;
  std::atomic<std::int64_t> next{0};
  std::mutex err_mu;
  std::exception_ptr error;
};

namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(Job& job) {
  const bool was_inside = t_inside_pool;
  t_inside_pool = true;
  for (;;) {
    const std::int64_t begin = job.next.fetch_add(job.chunk);
    if (begin >= job.n) break;
    const std::int64_t end = std::min(job.n, begin + job.chunk);
    try {
      (*job.fn)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lk(job.err_mu);
      if (!job.error) job.error = std::current_exception();
      job.next.store(job.n);  // stop handing out work
    }
  }
  t_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      ++busy_;
    }
    run_chunks(*job);
    {
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
    }
    done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(std::int64_t n,
                              const std::function<void(std::int64_t, std::int64_t)>& fn,
                              std::int64_t grain) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  if (workers_.empty() || t_inside_pool || n <= grain) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  Job job;
  job.n = n;
  job.fn = &fn;
  // About 4 chunks per thread: small enough to balance a slow core, large enough to amortise.
  job.chunk = std::max<std::int64_t>(grain, n / (4 * static_cast<std::int64_t>(size())));
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &job;
    ++generation_;
  }
  cv_.notify_all();
  run_chunks(job);
  {
    std::unique_lock<std::mutex> lk(mu_);
    job_ = nullptr;  // late workers see no job and go back to sleep
    done_cv_.wait(lk, [&] { return busy_ == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

ThreadPool& ThreadPool::default_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("CONVGRAPH_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

}  // namespace convgraph
