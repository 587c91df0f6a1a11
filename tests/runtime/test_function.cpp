#include <atomic>
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <thread>

#include "runtime/memory_planner.hpp"

using namespace convgraph;

TEST_CASE("function: argument checks name the input and stay usable after a failure", "[runtime]") {
  Var x = input(DType::float32, {kUnknown, 2}, "x");
  Var y = input(DType::float32, {2}, "y");
  Function f = compile({x, y}, {x * y});
  const Tensor good_x = Tensor::from({1, 2, 3, 4}, {2, 2});
  const Tensor good_y = Tensor::from({10, 100}, {2});
  CHECK_THROWS_AS(f({good_x}), RuntimeError);
  CHECK_THROWS_WITH(f({good_x}), Catch::Contains("expected 2"));
  CHECK_THROWS_AS(f({good_x.astype(DType::float64), good_y}), TypeError);
  CHECK_THROWS_WITH(f({good_x, Tensor::from({1, 2, 3}, {3})}), Catch::Contains("'y'") && Catch::Contains("(3,)"));
  CHECK_THROWS_AS(f({Tensor::from({1, 2, 3}, {3}), good_y}), ShapeError);
  CHECK_THROWS_AS(f({Tensor::from({1, 2, 3}, {1, 3}), good_y}), ShapeError);
  CHECK_THROWS_AS(f({Tensor(), good_y}), ValueError);
  CHECK(f({good_x, good_y})[0].to_vector() == std::vector<double>{10, 200, 30, 400});
  // Unknown leading dimension: any size works.
  CHECK(f({Tensor::from({1, 1}, {1, 2}), good_y})[0].to_vector() == std::vector<double>{10, 100});
}

TEST_CASE("function: non-contiguous arguments, inputs as outputs, repeated outputs", "[runtime]") {
  Var x = input(DType::float32, {2, 2}, "x");
  Var e = x + 1.0;
  Function f = compile({x}, {x, e, e});
  Tensor t = Tensor::from({1, 2, 3, 4}, {2, 2}).permute({1, 0});
  auto out = f({t});
  CHECK(out[0].to_vector() == std::vector<double>{1, 3, 2, 4});
  CHECK(out[1].to_vector() == std::vector<double>{2, 4, 3, 5});
  CHECK(out[1].storage() != out[2].storage());
}

TEST_CASE("memory planner: lifetimes that overlap never share bytes; others reuse", "[runtime]") {
  using detail::BufferRequest;
  const std::vector<BufferRequest> req = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {64, 3, 4}};
  const auto plan = detail::plan_arena(req);
  for (std::size_t a = 0; a < req.size(); ++a)
    for (std::size_t b = a + 1; b < req.size(); ++b) {
      const bool live_together = req[a].first <= req[b].last && req[b].first <= req[a].last;
      const bool overlap = plan.offsets[a] < plan.offsets[b] + req[b].bytes && plan.offsets[b] < plan.offsets[a] + req[a].bytes;
      CHECK_FALSE((live_together && overlap));
    }
  CHECK(plan.arena_bytes < plan.total_bytes);
  CHECK(plan.arena_bytes >= 2 * 1024);
}

TEST_CASE("function: a chain reuses buffers (peak below the sum)", "[runtime]") {
  Var x = input(DType::float32, {256}, "x");
  Var v = x;
  for (int i = 0; i < 10; ++i) v = exp(v * 0.5) - 1.0;
  // Without fusion, which would turn the chain into one node with no intermediates.
  Function f = compile({x}, {sum(v)}, Mode::fast_run().excluding("fusion"));
  (void)f({Tensor::zeros(DType::float32, {256})});
  CHECK(f.peak_bytes() > 0);
  CHECK(f.peak_bytes() * 4 < f.total_intermediate_bytes());
}

TEST_CASE("function: profile reports per-node time, memory and a summary", "[runtime]") {
  Mode m = Mode::fast_run();
  m.profile = true;
  Var x = input(DType::float32, {64, 64}, "x");
  Function f = compile({x}, {sum(exp(x).named("ex"))}, m);
  for (int i = 0; i < 3; ++i) (void)f({Tensor::zeros(DType::float32, {64, 64})});
  const ProfileStats& p = f.profile();
  CHECK(p.calls == 3);
  REQUIRE_FALSE(p.nodes.empty());
  bool found = false;
  for (const auto& n : p.nodes)
    if (n.node.find("'ex'") != std::string::npos) {
      found = true;
      CHECK(n.calls == 3);
      CHECK(n.output_bytes == 64 * 64 * 4);
    }
  CHECK(found);
  CHECK_THAT(p.summary(), Catch::Contains("Apply nodes") && Catch::Contains("'ex'"));
  CHECK_FALSE(f.describe().empty());
  CHECK_THAT(p.chrome_trace, Catch::StartsWith("{\"traceEvents\"") && Catch::Contains("\"ph\":\"X\""));
}

TEST_CASE("thread pool: covers the range exactly once and propagates exceptions", "[runtime]") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10000);
  pool.parallel_for(10000, [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (auto& h : hits) CHECK(h.load() == 1);
  CHECK_THROWS_AS(pool.parallel_for(100, [](std::int64_t b, std::int64_t) {
                    if (b >= 0) throw ValueError("boom");
                  }),
                  ValueError);
  std::atomic<int> total{0};
  pool.parallel_for(10, [&](std::int64_t b, std::int64_t e) { total += static_cast<int>(e - b); });
  CHECK(total == 10);
}
