// Thread-pool sizes (issue 9): 1..kMaxThreads, a strict CONVGRAPH_THREADS, and a
// constructor that reports a thread it cannot start as a convgraph::Error after joining
// the others (it used to hang in pthread_cond_destroy or call std::terminate).
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <convgraph/core/thread_pool.hpp>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "support/child_process.hpp"

using namespace convgraph;
using Catch::Matchers::Contains;

namespace {
// Sets CONVGRAPH_THREADS for one scope, restoring the previous value.
class ScopedThreadsEnv {
 public:
  explicit ScopedThreadsEnv(const char* value) {
    if (const char* old = std::getenv("CONVGRAPH_THREADS")) old_ = old;
    if (value) setenv("CONVGRAPH_THREADS", value, 1);
    else unsetenv("CONVGRAPH_THREADS");
  }
  ~ScopedThreadsEnv() {
    if (old_) setenv("CONVGRAPH_THREADS", old_->c_str(), 1);
    else unsetenv("CONVGRAPH_THREADS");
  }

 private:
  std::optional<std::string> old_;
};
}  // namespace

TEST_CASE("thread pool: CONVGRAPH_THREADS parses strictly", "[runtime][threads][limits]") {
  CHECK(parse_thread_count("1") == 1);
  CHECK(parse_thread_count("8") == 8);
  CHECK(parse_thread_count("1024") == kMaxThreads);
  for (const char* bad : {"abc", "", "0", "-2", "+4", "4x", " 4", "4 ", "1.5", "1025", "100000",
                          "99999999999999999999999"}) {
    INFO("CONVGRAPH_THREADS='" << bad << "'");
    CHECK_THROWS_AS(parse_thread_count(bad), ValueError);
    CHECK_THROWS_WITH(parse_thread_count(bad),
                      Contains("CONVGRAPH_THREADS='" + std::string(bad) + "'") && Contains("1 to 1024"));
  }
}

TEST_CASE("thread pool: configured_thread_count reads CONVGRAPH_THREADS", "[runtime][threads][limits]") {
  {
    ScopedThreadsEnv env(nullptr);
    const int n = configured_thread_count();
    CHECK(n >= 1);
    CHECK(n <= kMaxThreads);
  }
  {
    ScopedThreadsEnv env("");  // empty = unset
    CHECK(configured_thread_count() >= 1);
  }
  {
    ScopedThreadsEnv env("3");
    CHECK(configured_thread_count() == 3);
  }
  {
    ScopedThreadsEnv env("abc");  // used to mean "all cores"
    CHECK_THROWS_AS(configured_thread_count(), ValueError);
    CHECK_THROWS_WITH(configured_thread_count(), Contains("CONVGRAPH_THREADS='abc'"));
  }
  {
    ScopedThreadsEnv env("100000");  // used to call std::terminate
    CHECK_THROWS_WITH(configured_thread_count(), Contains("CONVGRAPH_THREADS='100000'") && Contains("too many"));
  }
}

TEST_CASE("thread pool: sizes outside 1..1024 are ValueErrors", "[runtime][threads][limits]") {
  CHECK_THROWS_AS(ThreadPool(-1), ValueError);
  CHECK_THROWS_WITH(ThreadPool(-1), Contains("ThreadPool") && Contains("got -1") && Contains("1 to 1024"));
  CHECK_THROWS_AS(ThreadPool(kMaxThreads + 1), ValueError);
  CHECK_THROWS_WITH(ThreadPool(4096), Contains("ThreadPool") && Contains("got 4096"));
  ThreadPool one(1);
  CHECK(one.size() == 1);
  ThreadPool hw(0);
  CHECK(hw.size() >= 1);
  CHECK(hw.size() <= kMaxThreads);
  ThreadPool three(3);
  CHECK(three.size() == 3);
  std::atomic<std::int64_t> total{0};
  three.parallel_for(1000, [&](std::int64_t b, std::int64_t e) { total += e - b; });
  CHECK(total == 1000);
}

TEST_CASE("thread pool: Mode threads is limited to 1024", "[runtime][threads][limits]") {
  CHECK_THROWS_AS(Mode::from_flags("threads=4096"), FlagError);
  CHECK_THROWS_WITH(Mode::from_flags("threads=4096"), Contains("threads") && Contains("4096"));
  CHECK(Mode::from_flags("threads=2").threads == 2);
  Var x = input(DType::float32, {4}, "x");
  Mode m;
  m.threads = 5000;
  CHECK_THROWS_AS(compile({x}, {x * 2.0}, m), ValueError);
  CHECK_THROWS_WITH(compile({x}, {x * 2.0}, m), Contains("ThreadPool") && Contains("5000"));
}

TEST_CASE("thread pool: a thread that cannot start is an Error, the others are joined", "[runtime][threads][limits]") {
  if (test::sanitized_build()) {
    WARN("SKIPPED: sanitizers cannot run under RLIMIT_AS");
    return;
  }
  // 1024 threads need >= 2 GiB of stacks; 64 MiB of address space runs out first. This
  // used to hang in pthread_cond_destroy; the child is killed (and the test fails) if so.
  const int rc = test::run_in_child(
      [] {
        try {
          ThreadPool pool(kMaxThreads);
          return 1;  // every thread started: the limit did not bite
        } catch (const RuntimeError& e) {
          return std::string(e.what()).find("could not start thread") != std::string::npos ? 0 : 2;
        } catch (const MemoryError&) {
          return 0;
        }
      },
      64LL << 20, 60);
  CHECK(rc == 0);
}

// Run in a fresh process by the test below: there ThreadPool::default_pool() has not
// been made yet, and CONVGRAPH_THREADS is set to a bad value.
TEST_CASE("thread pool child: the default pool under a bad CONVGRAPH_THREADS", "[.][threads_child]") {
  const char* env = std::getenv("CONVGRAPH_THREADS");
  REQUIRE(env != nullptr);
  const std::string value = env;
  CHECK_THROWS_AS(ThreadPool::default_pool(), ValueError);
  CHECK_THROWS_WITH(ThreadPool::default_pool(), Contains("CONVGRAPH_THREADS='" + value + "'"));
  Var x = input(DType::float32, {4}, "x");
  CHECK_THROWS_AS(compile({x}, {x * 2.0}), ValueError);  // the pool is first needed here
}

TEST_CASE("thread pool: a bad CONVGRAPH_THREADS is a ValueError when the pool is first needed",
          "[runtime][threads][limits]") {
  const std::string child = "thread pool child: the default pool under a bad CONVGRAPH_THREADS";
  // 0 is what Catch2 returns when every check in the child passed (no std::terminate,
  // no silent "all cores").
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_THREADS", "abc"}}) == 0);
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_THREADS", "100000"}}) == 0);
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_THREADS", "0"}}) == 0);
}
