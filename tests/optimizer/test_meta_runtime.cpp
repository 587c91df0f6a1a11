// Run-time tuning (conv_meta with a batch size known only at call time): the first call
// with each new shape times the candidates on that shape, later calls reuse the choice,
// results stay correct, the tuning cache remembers it, and concurrent callers tune once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "cache_setup.hpp"
#include "fakes.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

struct Tuned {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  AlgorithmRegistry reg;
  std::shared_ptr<FakeAlgorithm> slow, fast;
  std::vector<std::string> log;
  Tuned() {
    slow = std::make_shared<FakeAlgorithm>("fake.slow", std::vector<std::string>{"conv_gemm", "fast_run"}, 5e-3, clock);
    fast = std::make_shared<FakeAlgorithm>("fake.fast", std::vector<std::string>{"conv_direct", "fast_run"}, 1e-3, clock);
    reg.add(slow);
    reg.add(fast);
  }
  Mode mode(const std::string& cache = "None") {
    Mode m = Mode::from_flags("optimizer_including=conv_meta,metaopt.verbose=1,metaopt.cache=" + cache);
    m.registry = &reg;
    m.metaopt_clock = clock;
    m.log = [this](const std::string& line) { log.push_back(line); };
    return m;
  }
  int count(const std::string& what) const {
    return static_cast<int>(std::count_if(log.begin(), log.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; }));
  }
  int tunings() const { return count("a new shape at run time"); }
};

Tensor random_tensor(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  Tensor t(DType::float32, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng));
  return t;
}

// Valid cross-correlation, stride 1, written out here as the independent reference.
Tensor naive_valid_corr(const Tensor& x, const Tensor& w) {
  const auto N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const auto K = w.shape()[0], R = w.shape()[2], S = w.shape()[3];
  Tensor y = Tensor::zeros(DType::float32, {N, K, H - R + 1, W - S + 1});
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t i = 0; i + R <= H; ++i)
        for (std::int64_t j = 0; j + S <= W; ++j) {
          double acc = 0;
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t r = 0; r < R; ++r)
              for (std::int64_t s = 0; s < S; ++s)
                acc += static_cast<double>(x.at<float>({n, c, i + r, j + s})) * w.at<float>({k, c, r, s});
          y.at<float>({n, k, i, j}) = static_cast<float>(acc);
        }
  return y;
}

struct DynNet {
  Var x = input(DType::float32, {kUnknown, 3, 6, 6}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.filter_flip = false, .name = "dyn"});
};

}  // namespace

TEST_CASE("metaopt: a symbolic batch is tuned once per new shape at run time", "[optimizer][metaopt][runtime_tuning]") {
  Tuned t;
  DynNet n;
  Function f = compile({n.x, n.w}, {n.y}, t.mode());
  CHECK(t.tunings() == 0);  // nothing known to time at compile time
  const Tensor w = random_tensor({4, 3, 3, 3}, 1), x2 = random_tensor({2, 3, 6, 6}, 2), x3 = random_tensor({3, 3, 6, 6}, 3);

  const auto y2 = f({x2, w});
  CHECK(t.tunings() == 1);
  CHECK(t.slow->runs >= 4);  // warm-up + at least 3 timed runs on the real shape
  CHECK(max_abs_diff(y2[0], naive_valid_corr(x2, w)) < 1e-4);
  const auto* impl = conv_impls(f.graph())[0];
  CHECK_THAT(impl->implementation(), Contains("-> fake.fast (run time, timing: 1.000 ms"));

  // The same shape again: no timing, the chosen algorithm runs once.
  const int slow_runs = t.slow->runs, fast_runs = t.fast->runs;
  f({x2, w});
  CHECK(t.tunings() == 1);
  CHECK(t.slow->runs == slow_runs);
  CHECK(t.fast->runs == fast_runs + 1);

  // A new batch size: tuned again, on that shape.
  const auto y3 = f({x3, w});
  CHECK(t.tunings() == 2);
  CHECK(t.slow->runs > slow_runs);
  CHECK(max_abs_diff(y3[0], naive_valid_corr(x3, w)) < 1e-4);
  CHECK(t.count("= fake.fast") == 2);  // the verbose log says what won, each time
}

TEST_CASE("metaopt: run-time tuning results go to the tuning cache and are reused from it", "[optimizer][metaopt][runtime_tuning]") {
  TempPath cache("runtime_tuning");
  DynNet n;
  const Tensor w = random_tensor({4, 3, 3, 3}, 1), x2 = random_tensor({2, 3, 6, 6}, 2);
  {
    Tuned t;
    Function f = compile({n.x, n.w}, {n.y}, t.mode(cache.path));
    f({x2, w});
    CHECK(t.tunings() == 1);
  }
  CHECK_THAT(slurp(cache.path), Contains("fake.fast"));
  Tuned again;  // a new process would see the same: the file holds the choice
  Function g = compile({n.x, n.w}, {n.y}, again.mode(cache.path));
  g({x2, w});
  CHECK(again.count("cache hit -> fake.fast") == 1);
  CHECK(again.slow->runs == 0);
  CHECK(again.fast->runs == 1);  // the call itself, no timing
}

TEST_CASE("metaopt: one Function called from several threads tunes each shape once", "[optimizer][metaopt][runtime_tuning]") {
  Tuned t;
  DynNet n;
  Function f = compile({n.x, n.w}, {n.y}, t.mode());
  const Tensor w = random_tensor({4, 3, 3, 3}, 1);
  const Tensor xs[2] = {random_tensor({2, 3, 6, 6}, 2), random_tensor({5, 3, 6, 6}, 3)};
  const Tensor want[2] = {naive_valid_corr(xs[0], w), naive_valid_corr(xs[1], w)};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 3; ++k) {
        const int s = (i + k) % 2;
        if (max_abs_diff(f({xs[s], w})[0], want[s]) > 1e-4) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(t.tunings() == 2);
}

TEST_CASE("metaopt: run-time tuning with the built-in CPU algorithms on the real clock", "[optimizer][metaopt][runtime_tuning]") {
  std::vector<std::string> log;
  Mode m = Mode::from_flags("optimizer_including=conv_meta,metaopt.verbose=1,metaopt.cache=None,metaopt.budget=0.5");
  m.log = [&log](const std::string& line) { log.push_back(line); };
  DynNet n;
  Function f = compile({n.x, n.w}, {n.y}, m);
  const Tensor w = random_tensor({4, 3, 3, 3}, 4), x = random_tensor({2, 3, 6, 6}, 5);
  CHECK(max_abs_diff(f({x, w})[0], naive_valid_corr(x, w)) < 1e-4);
  CHECK(max_abs_diff(f({x, w})[0], naive_valid_corr(x, w)) < 1e-4);
  std::string text;
  for (const auto& l : log) text += l + "\n";
  CHECK(std::count_if(log.begin(), log.end(), [](const std::string& l) { return l.find("a new shape at run time") != std::string::npos; }) == 1);
  CHECK_THAT(text, Contains("cpu.corrmm") && Contains("(median of") && Contains("[metaopt]   = "));
  CHECK_THAT(conv_impls(f.graph())[0]->implementation(), Contains("(run time, timing: "));
}
