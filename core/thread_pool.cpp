#include "convgraph/core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "convgraph/core/error.hpp"

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

/// Spins until done() or about kSpinMicros have passed; true if done() held. Short enough
/// that an idle pool costs nothing measurable, long enough to span the gap between a
/// kernel's consecutive parallel loops.
constexpr int kSpinMicros = 50;
template <typename Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

int hardware_threads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
}
}  // namespace

int parse_thread_count(std::string_view text) {
  const auto bad = [&](const char* why) {
    return ValueError(msg("CONVGRAPH_THREADS='", text, "' is invalid: ", why, " (expected an integer from 1 to ",
                          kMaxThreads, "; unset it for one thread per core)"));
  };
  if (text.empty()) throw bad("empty");
  long long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') throw bad("not a decimal integer");
    v = v * 10 + (c - '0');
    if (v > kMaxThreads) throw bad("too many threads");
  }
  if (v < 1) throw bad("fewer than 1 thread");
  return static_cast<int>(v);
}

int configured_thread_count() {
  const char* env = std::getenv("CONVGRAPH_THREADS");
  if (env == nullptr || *env == '\0') return hardware_threads();
  return parse_thread_count(env);
}

ThreadPool::ThreadPool(int threads) {
  if (threads == 0) threads = hardware_threads();
  if (threads < 1 || threads > kMaxThreads)
    throw ValueError(msg("ThreadPool: threads must be from 1 to ", kMaxThreads, " (0 = one per core), got ", threads));
  // A thread that cannot start must not leave the others waiting on cv_ (destroying a
  // condition variable with waiters hangs) nor joinable (std::terminate): stop and join
  // them before reporting.
  int started = 0;
  try {
    workers_.reserve(static_cast<std::size_t>(threads - 1));
    for (; started + 1 < threads; ++started) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    stop_and_join();
    throw RuntimeError(msg("ThreadPool: could not start thread ", started + 1, " of ", threads - 1, " workers (",
                           e.what(), "); the ", started, " started were joined. Use fewer threads (Mode threads or ",
                           "CONVGRAPH_THREADS)"));
  } catch (const std::bad_alloc&) {
    stop_and_join();
    throw MemoryError(msg("ThreadPool: out of memory starting worker ", started + 1, " of ", threads - 1,
                          "; the ", started, " started were joined. Use fewer threads (Mode threads or ",
                          "CONVGRAPH_THREADS)"));
  }
}

void ThreadPool::stop_and_join() noexcept {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_and_join(); }

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
    spin_until([&] { return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != seen; });
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
    std::lock_guard<std::mutex> lk(mu_);
    job_ = nullptr;  // late workers see no job and go back to sleep
  }
  // A worker decrements busy_ (under mu_) after its last touch of `job`.
  if (!spin_until([&] { return busy_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return busy_ == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

ThreadPool& ThreadPool::default_pool() {
  // A throwing initialiser leaves the static uninitialised: the next call tries again.
  static ThreadPool pool(configured_thread_count());
  return pool;
}

}  // namespace convgraph
