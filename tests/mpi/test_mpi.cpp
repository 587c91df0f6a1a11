// convgraph::dist on several ranks: ctest runs this program with mpirun on 2 and 3 ranks
// of this machine (tests/mpi/mpi_tests.cmake). Every rank runs every test case in the same
// order, so the collectives match; checks that could differ between ranks use CHECK (a
// REQUIRE failing on one rank alone would leave the others waiting in a collective).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include <convgraph/convgraph.hpp>
#include <convgraph/dist/mpi.hpp>

#include "dist/comm.hpp"

using namespace convgraph;
using Catch::Matchers::Contains;

namespace {

/// Rank 0's copy of t, on every rank (t must have the same type everywhere).
Tensor from_rank0(const Tensor& t) {
  SharedVar v = shared(t);
  dist::broadcast({v});
  return v.get_value();
}

double value(int rank, std::int64_t i, bool is_float) {
  return (rank + 1) * static_cast<double>(i % 5) - 2.0 * rank + (is_float ? 0.25 * rank : 0.0);
}

}  // namespace

TEST_CASE("mpi: allreduce sum and mean of several dtypes and shapes") {
  const int n = dist::size();
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64})
    for (const Shape& s : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 0, 4}, Shape{2, 3, 4}}) {
      INFO(dtype_name(t) << shape_to_string(s));
      Var x = input(t, s, "x");
      std::vector<Var> outs{dist::allreduce(x, dist::ReduceOp::sum)};
      if (is_float(t)) outs.push_back(dist::allreduce(x, dist::ReduceOp::mean));
      Function f = compile({x}, outs);
      for (int call = 0; call < 2; ++call) {  // a second call reuses the bucket state
        Tensor v(t, s);
        for (std::int64_t i = 0; i < v.numel(); ++i) v.set(i, value(dist::rank(), i + call, is_float(t)));
        const std::vector<Tensor> got = f({v});
        REQUIRE(got[0].shape() == s);
        for (std::int64_t i = 0; i < v.numel(); ++i) {
          double want = 0;
          for (int r = 0; r < n; ++r) want += value(r, i + call, is_float(t));
          CHECK(got[0].get(i) == want);  // small integers and quarters: exact in every dtype
          if (is_float(t)) CHECK(got[1].get(i) == Approx(want / n).epsilon(1e-6).margin(1e-6));
        }
      }
    }
}

TEST_CASE("mpi: allreduce refuses tensors of different sizes on different ranks") {
  Var x = input(DType::float32, {kUnknown}, "x");
  Function f = compile({x}, {dist::allreduce(x)});
  const std::int64_t mine = 3 + dist::rank();
  CHECK_THROWS_AS(f({Tensor::zeros(DType::float32, {mine})}), ValueError);
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {mine})}),
                    Contains("allreduce") && Contains(msg(mine, " elements on rank ", dist::rank())) &&
                        Contains(msg("between 3 and ", 2 + dist::size())));
  // The Function still works once the shapes agree.
  const Tensor ok = f({Tensor::full(DType::float32, {4}, 1.0)})[0];
  CHECK(ok.get(3) == dist::size());
}

TEST_CASE("mpi: broadcast sets every rank's variables to the root's") {
  const int r = dist::rank(), n = dist::size();
  SharedVar a = shared(Tensor::full(DType::float32, {2, 3}, r + 1), "a");
  SharedVar b = shared(Tensor::full(DType::int64, {4}, 10 * (r + 1)), "b");
  dist::broadcast({a, b});
  CHECK(a.get_value().get(5) == 1);
  CHECK(b.get_value().get(0) == 10);
  dist::broadcast({a}, n - 1);
  a.set_value(Tensor::full(DType::float32, {2, 3}, r + 1));
  dist::broadcast({a}, n - 1);
  CHECK(a.get_value().get(0) == n);

  CHECK_THROWS_WITH(dist::broadcast({a}, n), Contains(msg("dist::broadcast: root ", n, " is not a rank")));
  CHECK_THROWS_AS(dist::broadcast({a}, -1), ValueError);
  CHECK_THROWS_WITH(dist::broadcast({SharedVar()}), Contains("variable 0 is undefined"));
  SharedVar odd = shared(Tensor::zeros(DType::float32, {r + 1}), "odd");
  CHECK_THROWS_WITH(dist::broadcast({odd}), Contains("variable 0 'odd'") && Contains("on the root (rank 0)"));
}

TEST_CASE("mpi: a data-parallel step equals the one-process step on the same global batch") {
  const int r = dist::rank(), n = dist::size();
  constexpr std::int64_t kGlobal = 6;  // divisible by 1, 2 and 3 ranks
  const std::int64_t shard = kGlobal / n;
  auto init = [](Shape s, double scale) {
    Tensor t(DType::float32, s);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, scale * std::sin(1.0 + 0.7 * static_cast<double>(i)));
    return t;
  };
  // Parameters, and a running mean of x (state the gradients do not reach).
  struct Model {
    std::vector<SharedVar> params;
    SharedVar stat;
    Var x, y, loss;
    Updates updates;
    std::vector<Var> grads;
  };
  auto build = [&](std::int64_t batch) {
    Model m;
    m.params = {shared(init({3, 4}, 0.5), "w1"), shared(init({4}, 0.1), "b1"), shared(init({4, 2}, 0.5), "w2")};
    m.stat = shared(Tensor::zeros(DType::float32, {3}), "x_mean");
    m.x = input(DType::float32, {batch, 3}, "x");
    m.y = input(DType::float32, {batch, 2}, "y");
    m.loss = mean(square(dot(tanh(dot(m.x, m.params[0]) + m.params[1]), m.params[2]) - m.y));
    m.grads = grad(m.loss, std::vector<Var>(m.params.begin(), m.params.end()));
    m.updates = sgd(m.params, m.grads, {.lr = 0.1, .momentum = 0.9});
    m.updates.emplace_back(m.stat, m.stat * 0.9 + mean(m.x, {0}) * 0.1);
    return m;
  };
  auto batch = [](int step, std::int64_t first, std::int64_t rows, std::int64_t cols, double f) {
    Tensor t(DType::float32, {rows, cols});
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.set(i, std::cos(f * static_cast<double>((first * cols + i) + 31 * step)));
    return t;
  };
  for (std::size_t bucket_bytes : {std::size_t{32}, std::size_t{1} << 20}) {
    INFO("bucket_bytes " << bucket_bytes);
    Model d = build(shard), one = build(kGlobal);
    Function step = compile({d.x, d.y}, {dist::allreduce(d.loss, dist::ReduceOp::mean)}, Mode::fast_run(),
                            dist::data_parallel(d.updates, d.grads, {.bucket_bytes = bucket_bytes}));
    Function step1 = compile({one.x, one.y}, {one.loss}, Mode::fast_run(), one.updates);
    for (int s = 0; s < 3; ++s) {
      const double loss = step({batch(s, r * shard, shard, 3, 0.3), batch(s, r * shard, shard, 2, 0.5)})[0].get(0);
      const double loss1 = step1({batch(s, 0, kGlobal, 3, 0.3), batch(s, 0, kGlobal, 2, 0.5)})[0].get(0);
      CHECK(loss == Approx(loss1).epsilon(1e-5));
    }
    for (std::size_t p = 0; p < d.params.size(); ++p) {
      INFO(d.params[p].name());
      const Tensor mine = d.params[p].get_value();
      CHECK(max_abs_diff(mine, one.params[p].get_value()) <= 1e-5);
      CHECK(max_abs_diff(mine, from_rank0(mine)) == 0);  // identical on every rank
    }
    CHECK(max_abs_diff(d.stat.get_value(), one.stat.get_value()) <= 1e-6);
  }
}

TEST_CASE("mpi: every rank runs the meta-optimizer's choice of rank 0") {
  Var x = input(DType::float32, {1, 2, 6, 6}, "x");
  Var w = input(DType::float32, {3, 2, 3, 3}, "w");
  const Mode mode = Mode::from_flags("optimizer_including=conv_meta,metaopt.cache=None");
  Function f = compile({x, w}, {conv2d(x, w)}, mode);
  std::string impl;
  for (const auto& v : f.graph().toposort())
    if (v.op() && !v.op()->implementation().empty()) impl += v.op()->params() + ";";
  CHECK_FALSE(impl.empty());
  CHECK(dist::detail::broadcast_string(impl) == impl);
  bool told = false;
  for (const auto& note : f.compile_stats().notes) told = told || note.find("chosen on rank 0") != std::string::npos;
  CHECK(told == (dist::rank() != 0));
}

TEST_CASE("mpi: shapes tuned at run time also run rank 0's choice") {
  Var x = input(DType::float32, {kUnknown, 2, 6, 6}, "x");  // batch known only at the call
  Var w = input(DType::float32, {3, 2, 3, 3}, "w");
  const Mode mode = Mode::from_flags("optimizer_including=conv_meta,metaopt.cache=None");
  Function f = compile({x, w}, {conv2d(x, w)}, mode);
  (void)f({Tensor::full(DType::float32, {2, 2, 6, 6}, 0.5), Tensor::full(DType::float32, {3, 2, 3, 3}, 0.25)});
  std::string chosen, impl;  // "-> algorithm" of each run-time choice, and the full text
  for (const auto& v : f.graph().toposort())
    if (v.op() && !v.op()->implementation().empty()) {
      impl += v.op()->implementation();
      for (std::size_t at = impl.find("-> "); at != std::string::npos; at = impl.find("-> ", at + 3))
        chosen += impl.substr(at, impl.find(' ', at + 3) - at) + ";";
    }
  CHECK_FALSE(chosen.empty());
  CHECK(dist::detail::broadcast_string(chosen) == chosen);
  CHECK((impl.find("chosen on rank 0") != std::string::npos) == (dist::rank() != 0));
}

TEST_CASE("mpi: rank_seed gives each rank its own dropout mask; a plain seed the same draws") {
  RandomStream per_rank(dist::rank_seed(5)), same(5);
  Var u = per_rank.uniform({16}), v = same.uniform({16});
  Function f = compile({}, {u, v});
  const std::vector<Tensor> got = f({});
  CHECK(max_abs_diff(got[1], from_rank0(got[1])) == 0);
  CHECK((max_abs_diff(got[0], from_rank0(got[0])) > 0) == (dist::rank() != 0));
}

int main(int argc, char** argv) {
  convgraph::dist::init(&argc, &argv);
  const int failed = Catch::Session().run(argc, argv);
  convgraph::dist::finalize();
  return failed;
}
