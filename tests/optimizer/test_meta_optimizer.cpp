// The meta-optimizer with fake algorithms on a fake clock: it keeps the fastest, rejects
// wrong results, honours the metaopt multiset flags, the budget and unknown shapes, and
// reports everything at metaopt.verbose=1.
#include <catch2/catch.hpp>

#include "fakes.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

struct Bench {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  AlgorithmRegistry reg;
  std::vector<std::string> log;
  std::shared_ptr<FakeAlgorithm> add(const std::string& name, std::vector<std::string> tags, double cost,
                                     bool wrong = false) {
    auto a = std::make_shared<FakeAlgorithm>(name, std::move(tags), cost, clock, wrong);
    reg.add(a);
    return a;
  }
  Mode mode(const std::string& flags = "") {
    Mode m = Mode::from_flags("optimizer_including=conv_meta,metaopt.verbose=1,metaopt.cache=None," + flags);
    m.registry = &reg;
    m.metaopt_clock = clock;
    m.log = [this](const std::string& line) { log.push_back(line); };
    return m;
  }
  std::string text() const {
    std::string s;
    for (const auto& l : log) s += l + "\n";
    return s;
  }
};

struct Net {
  Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "c1"});
};

}  // namespace

TEST_CASE("metaopt: the fastest candidate wins, whatever the priority order", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.slow", {"conv_gemm", "fast_run"}, 5e-3);
  b.add("fake.fast", {"conv_direct", "fast_run"}, 1e-3);
  b.add("fake.medium", {"conv_winograd", "fast_run"}, 2e-3);
  Net n;
  CompileStats stats;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode(), &stats);
  CHECK(chosen(g) == std::vector<std::string>{"fake.fast"});
  CHECK_THAT(conv_impls(g)[0]->implementation(), Contains("fake.fast (timing: 1.000 ms, fastest of 3"));
  const std::string out = b.text();
  CHECK_THAT(out, Contains("'c1'") && Contains("fake.slow") && Contains("5.000 ms") && Contains("GFLOP/s") &&
                      Contains("ws 0 B") && Contains("= fake.fast"));
  // Without conv_meta, priority picks the first.
  Mode plain = b.mode();
  plain.include_tags.clear();
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, plain)) == std::vector<std::string>{"fake.slow"});
  bool noted = false;
  for (const auto& note : stats.notes) noted = noted || note.find("metaopt") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("metaopt: warm-up plus at least three timed runs, median kept", "[optimizer][metaopt]") {
  Bench b;
  auto a = b.add("fake.only", {"conv_gemm", "fast_run"}, 0.1);  // slow enough that no extra runs are added
  Net n;
  optimized({n.x, n.w}, {n.y}, b.mode());
  CHECK(a->runs == 4);
  CHECK_THAT(b.text(), Contains("median of 3"));
}

TEST_CASE("metaopt: a close call is decided by alternating rounds, not one burst", "[optimizer][metaopt]") {
  Bench b;
  // fake.a is the faster, but its first burst (warm-up and 9 runs) falls in a slow spell.
  auto a = b.add("fake.a", {"conv_gemm", "fast_run"}, 1e-3);
  a->slow_runs = 10;
  a->slow_cost = 1.2e-3;
  auto c = b.add("fake.c", {"conv_direct", "fast_run"}, 1.1e-3);
  Net n;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode());
  CHECK(chosen(g) == std::vector<std::string>{"fake.a"});
  CHECK_THAT(conv_impls(g)[0]->implementation(), Contains("timing: 1.000 ms"));  // the rounds' median
  CHECK_THAT(b.text(), Contains("close call") && Contains("the order changed"));
  CHECK(a->runs == 10 + 9);  // 3 rounds of 3 runs each
  CHECK(c->runs == 10 + 9);
}

TEST_CASE("metaopt: a close call's rounds only run within the budget, and a failure there keeps the first choice",
          "[optimizer][metaopt]") {
  {
    Bench b;  // the first pass spends 0.52 s of 1 s; the rounds would take 1.17 s more
    b.add("fake.a", {"conv_gemm", "fast_run"}, 0.06);
    auto c = b.add("fake.c", {"conv_direct", "fast_run"}, 0.07);
    Net n;
    CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode("metaopt.budget=1"))) == std::vector<std::string>{"fake.a"});
    CHECK_THAT(b.text(), !Contains("close call"));
    CHECK(c->runs == 4);
  }
  {
    Bench b;  // the leader fails when it runs again: the first pass's choice stands
    auto a = b.add("fake.a", {"conv_gemm", "fast_run"}, 1e-3);
    b.add("fake.c", {"conv_direct", "fast_run"}, 1.1e-3);
    a->throws_after = 10;
    Net n;
    CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode())) == std::vector<std::string>{"fake.a"});
    CHECK_THAT(b.text(), Contains("timing again failed") && Contains("the first timings decide"));
  }
}

TEST_CASE("metaopt: a slower candidate one of whose runs beat the leader is timed again", "[optimizer][metaopt]") {
  Bench b;
  // fake.a takes 1 ms, but a slow spell holds its runs 3-6 to 8 ms: its first pass (the
  // warm-up, then 1, 8, 8 and 8 ms) has a median of 8 ms, 4x fake.c's, and a fastest run of 1.
  auto a = b.add("fake.a", {"conv_gemm", "fast_run"}, 1e-3);
  a->slow_from = 2;
  a->slow_runs = 4;
  a->slow_cost = 8e-3;
  b.add("fake.c", {"conv_direct", "fast_run"}, 2e-3);
  Net n;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode());
  CHECK(chosen(g) == std::vector<std::string>{"fake.a"});
  CHECK_THAT(b.text(), Contains("fake.a ran once in 1.000 ms, timed again") && Contains("the order changed"));
  // The rule alone: the runner-up within the margin, else the first whose fastest run beat
  // the leader's median, else none.
  CHECK(confirm_challenger({1.0, 1.2, 5.0}, {1.0, 1.1, 0.5}, 1.3) == 1);
  CHECK(confirm_challenger({1.0, 2.0, 5.0}, {1.0, 1.5, 0.5}, 1.3) == 2);
  CHECK(confirm_challenger({1.0, 2.0, 5.0}, {1.0, 1.5, 1.0}, 1.3) == -1);
  CHECK(confirm_challenger({1.0}, {1.0}, 1.3) == -1);
  CHECK_THROWS_AS(confirm_challenger({1.0, 2.0}, {1.0}, 1.3), ValueError);
}

TEST_CASE("metaopt: a clear winner is not timed again", "[optimizer][metaopt]") {
  Bench b;
  auto a = b.add("fake.a", {"conv_gemm", "fast_run"}, 1e-3);
  auto c = b.add("fake.c", {"conv_direct", "fast_run"}, 1.5e-3);
  Net n;
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode())) == std::vector<std::string>{"fake.a"});
  CHECK_THAT(b.text(), !Contains("close call"));
  CHECK(a->runs == 10);
  CHECK(c->runs == 10);
}

TEST_CASE("metaopt: a wrong algorithm is rejected by the cross-check, however fast", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.right", {"conv_gemm", "fast_run"}, 4e-3);
  b.add("fake.wrong", {"conv_direct", "fast_run"}, 1e-4, /*wrong=*/true);
  Net n;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode());
  CHECK(chosen(g) == std::vector<std::string>{"fake.right"});
  CHECK_THAT(b.text(), Contains("fake.wrong") && Contains("rejected: wrong result") && Contains("largest error"));
}

TEST_CASE("metaopt: candidates that do not apply or need too much workspace are skipped, saying why", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.any", {"conv_gemm", "fast_run"}, 4e-3);
  auto s1 = b.add("fake.s1", {"conv_fft", "fast_run"}, 1e-3);
  s1->only_stride1 = true;
  auto hungry = b.add("fake.hungry", {"conv_direct", "fast_run"}, 1e-4);
  hungry->workspace = 10 << 20;
  Net n;
  Var y2 = conv2d(n.x, n.w, {.subsample = {2, 2}, .name = "c2"});
  const auto g = optimized({n.x, n.w}, {n.y, y2}, b.mode("workspace_limit=1M"));
  CHECK(chosen(g) == std::vector<std::string>{"fake.s1", "fake.any"});
  CHECK_THAT(b.text(), Contains("fake.s1") && Contains("skipped: stride 2 not supported") &&
                           Contains("fake.hungry") && Contains("exceeds workspace_limit"));
}

TEST_CASE("metaopt: each candidate gets its own workspace; one too large costs only itself", "[optimizer][metaopt]") {
  Bench b;
  auto small = b.add("fake.small_ws", {"conv_gemm", "fast_run"}, 2e-3);
  small->workspace = 1 << 20;
  auto huge = b.add("fake.huge_ws", {"conv_direct", "fast_run"}, 1e-4);
  huge->workspace = std::size_t{1} << 52;  // 4 PiB: no machine has it
  auto none = b.add("fake.no_ws", {"conv_winograd", "fast_run"}, 3e-3);
  Net n;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode("workspace_limit=unlimited"));
  CHECK(chosen(g) == std::vector<std::string>{"fake.small_ws"});
  CHECK(small->runs > 0);  // timed, although the greediest candidate could not be served
  CHECK(none->runs > 0);
  CHECK(huge->runs == 0);
  CHECK_THAT(b.text(), Contains("fake.huge_ws") && Contains("skipped: cannot allocate") && Contains("of workspace"));
}

TEST_CASE("metaopt: a lost device context stops tuning and reaches the caller", "[optimizer][metaopt]") {
  Bench b;
  auto first = b.add("fake.first", {"conv_gemm", "fast_run"}, 4e-3);
  auto lost = b.add("fake.lost", {"conv_direct", "fast_run"}, 1e-4);
  lost->loses_context = true;
  auto after = b.add("fake.after", {"conv_winograd", "fast_run"}, 1e-3);
  Net n;
  CHECK_THROWS_AS(optimized({n.x, n.w}, {n.y}, b.mode()), DeviceContextError);
  CHECK(first->runs > 0);
  CHECK(after->runs == 0);  // not timed on a dead context, no silent fallback
  CHECK_THAT(b.text(), Contains("fake.lost") && Contains("the device context is lost, tuning stops"));
  CHECK_THAT(b.text(), !Contains("falling back"));
}

TEST_CASE("metaopt: metaopt.optimizer_including/excluding use Theano's multiset counts", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.gemm", {"conv_gemm", "fast_run"}, 3e-3);
  b.add("fake.direct", {"conv_direct", "fast_run"}, 2e-3);
  b.add("fake.alt", {"conv_gemm", "conv3d2d"}, 1e-3);  // not default: an "alternative"
  Net n;
  // Default set only: the alternative is not timed even though it is fastest.
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode())) == std::vector<std::string>{"fake.direct"});
  // Including its tag adds it (count 0 + 1).
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode("metaopt.optimizer_including=conv3d2d"))) ==
        std::vector<std::string>{"fake.alt"});
  // Including "alternative" and excluding "default" leaves only the alternatives.
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode("metaopt.optimizer_including=alternative,"
                                                   "metaopt.optimizer_excluding=default"))) ==
        std::vector<std::string>{"fake.alt"});
  // Excluding conv_direct: direct counts 1 - 1 = 0; gemm stays.
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode("metaopt.optimizer_excluding=conv_direct"))) ==
        std::vector<std::string>{"fake.gemm"});
  // optimizer_excluding is a hard limit that metaopt flags cannot undo.
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode("optimizer_excluding=conv_gemm,"
                                                   "metaopt.optimizer_including=conv3d2d"))) ==
        std::vector<std::string>{"fake.direct"});
}

TEST_CASE("metaopt: a candidate that fails (out of memory) is skipped and recorded", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.ok", {"conv_gemm", "fast_run"}, 4e-3);
  auto boom = b.add("fake.boom", {"conv_direct", "fast_run"}, 1e-4);
  boom->throws = true;
  Net n;
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode())) == std::vector<std::string>{"fake.ok"});
  CHECK_THAT(b.text(), Contains("fake.boom") && Contains("failed: fake.boom: out of memory"));
  // Nothing usable at all: priority lowering takes over (and picks the first by priority).
  Bench only;
  auto sole = only.add("fake.sole", {"conv_gemm", "fast_run"}, 1e-3);
  sole->throws = true;
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, only.mode())) == std::vector<std::string>{"fake.sole"});
  CHECK_THAT(only.text(), Contains("no candidate could be timed"));
}

TEST_CASE("metaopt: unknown shapes are left to run-time tuning, and verbose says so", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.slow", {"conv_gemm", "fast_run"}, 5e-3);
  b.add("fake.fast", {"conv_direct", "fast_run"}, 1e-3);
  Var x = input(DType::float32, {kUnknown, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "dyn"});
  const auto g = optimized({x, w}, {y}, b.mode());
  CHECK(chosen(g) == std::vector<std::string>{"auto"});
  CHECK_THAT(b.text(), Contains("'dyn'") && Contains("shapes not fully known") && Contains("tuned at run time"));
  CHECK_THAT(conv_impls(g)[0]->implementation(), Contains("fastest as timed on each new shape"));
}

TEST_CASE("metaopt: the per-node budget stops timing further candidates", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.a", {"conv_gemm", "fast_run"}, 0.4);
  auto second = b.add("fake.b", {"conv_direct", "fast_run"}, 0.1);
  Net n;
  const auto g = optimized({n.x, n.w}, {n.y}, b.mode("metaopt.budget=1"));  // fake.a alone spends 1.6 s
  CHECK(chosen(g) == std::vector<std::string>{"fake.a"});
  CHECK(second->runs == 0);
  CHECK_THAT(b.text(), Contains("fake.b") && Contains("time budget"));
}

TEST_CASE("metaopt: a candidate far slower in warm-up is not timed further", "[optimizer][metaopt]") {
  Bench b;
  b.add("fake.fast", {"conv_gemm", "fast_run"}, 1e-3);
  auto slow = b.add("fake.glacial", {"conv_direct", "fast_run"}, 1.0);
  Net n;
  CHECK(chosen(optimized({n.x, n.w}, {n.y}, b.mode())) == std::vector<std::string>{"fake.fast"});
  CHECK(slow->runs == 1);
  CHECK_THAT(b.text(), Contains("not timed further"));
}

TEST_CASE("metaopt: merged identical convolutions are tuned once; equal problems hit the cache", "[optimizer][metaopt]") {
  Bench b;
  auto a = b.add("fake.one", {"conv_gemm", "fast_run"}, 0.1);
  Net n;
  Var twin = conv2d(n.x, n.w, {.name = "twin"});           // merged with n.y
  Var z = input(DType::float32, {2, 3, 8, 8}, "z");
  Var other = conv2d(z, n.w, {.name = "same_problem"});    // not merged, same problem
  const auto g = optimized({n.x, n.w, z}, {n.y, twin, other}, b.mode());
  CHECK(chosen(g).size() == 2);
  CHECK(a->runs == 4);  // one warm-up + three runs, for the first node only
  CHECK_THAT(b.text(), Contains("cache hit -> fake.one"));
}

TEST_CASE("metaopt: the real CPU algorithms can be tuned", "[optimizer][metaopt]") {
  Net n;
  std::vector<std::string> log;
  // Without blocked_layout: under conv_meta it times the conv's region in the blocked layout
  // too and may keep that (test_blocked_layout covers it); here the NCHW algorithms are tuned.
  Mode m = Mode::from_flags(
      "optimizer_including=conv_meta:conv_fft,optimizer_excluding=blocked_layout,metaopt.verbose=1,metaopt.cache=None");
  m.log = [&](const std::string& l) { log.push_back(l); };
  Function f = compile({n.x, n.w}, {n.y}, m);
  const auto impls = conv_impls(f.graph());
  REQUIRE(impls.size() == 1);
  CHECK_THAT(impls[0]->implementation(), Contains("timing:"));
  std::string all;
  for (const auto& l : log) all += l + "\n";
  CHECK_THAT(all, Contains("cpu.corrmm") && Contains("cpu.direct") && Contains("cpu.fft") && Contains("= cpu."));
}
