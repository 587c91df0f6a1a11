// convgraph::dist in one process, without initialising MPI (tests/mpi runs it on 2 and 3
// ranks): the argument checks, the errors of a build or process without MPI, and the shape
// of the data-parallel graph: buckets, their chain, and a schedule that starts every
// reduction before it waits for any.
#include <catch2/catch.hpp>
#include <string>

#include <convgraph/convgraph.hpp>
#include <convgraph/dist/mpi.hpp>

using namespace convgraph;
using Catch::Matchers::Contains;

namespace {

/// A two-layer regression model: its parameters, gradients and SGD updates.
struct Tiny {
  SharedVar w1 = shared(Tensor::full(DType::float32, {3, 4}, 0.1), "w1");
  SharedVar b1 = shared(Tensor::zeros(DType::float32, {4}), "b1");
  SharedVar w2 = shared(Tensor::full(DType::float32, {4, 1}, 0.2), "w2");
  Var x = input(DType::float32, {2, 3}, "x");
  Var loss = mean(square(dot(relu(dot(x, w1) + b1), w2)));
  std::vector<Var> grads = grad(loss, {w1, b1, w2});
  Updates updates = sgd({w1, b1, w2}, grads, {.lr = 0.1, .momentum = 0.9});
};

std::size_t count_op(const Function& f, const std::string& name) {
  std::size_t n = 0;
  for (const auto& v : f.graph().toposort()) n += v.op() && v.op()->name() == name;
  return n;
}

}  // namespace

TEST_CASE("dist: without MPI a process is a job of one, and MPI calls say why they fail") {
  CHECK(dist::mpi_built() == (CONVGRAPH_WITH_MPI != 0));
  REQUIRE_FALSE(dist::initialized());
  CHECK(dist::rank() == 0);
  CHECK(dist::size() == 1);
  const std::string why = dist::mpi_built() ? "not initialised" : "built without MPI";
  CHECK_THROWS_WITH(dist::barrier(), Contains("dist::barrier") && Contains(why));
  CHECK_THROWS_WITH(dist::broadcast({shared(Tensor::zeros(DType::float32, {2}))}), Contains("dist::broadcast") && Contains(why));
  if (!dist::mpi_built()) CHECK_THROWS_AS(dist::init(), RuntimeError);
  // The node builds anywhere; running it needs MPI.
  Var x = input(DType::float32, {3}, "x");
  Function f = compile({x}, {dist::allreduce(x)});
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {3})}), Contains("allreduce") && Contains(why));
}

TEST_CASE("dist: allreduce and data_parallel reject bad arguments, naming them") {
  CHECK_THROWS_WITH(dist::allreduce(Var()), Contains("allreduce: x is an undefined variable"));
  CHECK_THROWS_AS(dist::allreduce(input(DType::boolean, {2})), TypeError);
  CHECK_THROWS_WITH(dist::allreduce(input(DType::boolean, {2})), Contains("allreduce: x has dtype bool"));
  CHECK_THROWS_WITH(dist::allreduce(input(DType::float16, {2})), Contains("float16"));
  CHECK_THROWS_WITH(dist::allreduce(input(DType::int64, {2}), dist::ReduceOp::mean),
                    Contains("op mean needs a float dtype") && Contains("int64"));
  Tiny m;
  CHECK_THROWS_WITH(dist::allreduce_gradients({m.grads[0], Var()}), Contains("gradient 1 is an undefined variable"));
  CHECK_THROWS_WITH(dist::allreduce_gradients({input(DType::int32, {2})}), Contains("gradient 0") && Contains("mean"));
  Var unrelated = input(DType::float32, {3, 4}, "g");
  CHECK_THROWS_WITH(dist::data_parallel(m.updates, {m.grads[0], unrelated}),
                    Contains("data_parallel: gradient 1 ('g') is used by no update value"));
}

TEST_CASE("dist: data_parallel buckets the gradients, chains the buckets and waits after every start") {
  Tiny m;
  // Default buckets: the three gradients (and no state to average) in one reduction.
  Updates one = dist::data_parallel(m.updates, m.grads);
  REQUIRE(one.size() == m.updates.size());
  Function f1 = compile({m.x}, {m.loss}, Mode::fast_run(), one);
  CHECK(count_op(f1, "allreduce_start") == 1);
  CHECK(count_op(f1, "allreduce_wait") == 3);

  // 16-byte buckets: one per gradient, started in the order the backward pass makes them.
  Updates three = dist::data_parallel(m.updates, m.grads, {.bucket_bytes = 16});
  Function f3 = compile({m.x}, {m.loss}, Mode::fast_run(), three);
  CHECK(count_op(f3, "allreduce_start") == 3);
  std::vector<std::string> order;
  for (const auto& v : f3.graph().toposort())
    if (v.op()) order.push_back(v.op()->name());
  std::size_t last_start = 0, first_wait = order.size(), first_start = order.size(), work_between = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] == "allreduce_start") first_start = std::min(first_start, i), last_start = i;
    if (order[i] == "allreduce_wait") first_wait = std::min(first_wait, i);
  }
  for (std::size_t i = first_start + 1; i < last_start; ++i) work_between += order[i] != "allreduce_start";
  CHECK(last_start < first_wait);  // every reduction is in flight before the first wait
  CHECK(work_between > 0);         // and the backward pass computes while the first one runs
  // Each start after the first takes the previous start as its order-only input.
  std::size_t chained = 0;
  for (const auto& v : f3.graph().toposort())
    if (v.op() && v.op()->name() == "allreduce_start" && v.inputs()[0].op() &&
        v.inputs()[0].op()->name() == "allreduce_start")
      ++chained;
  CHECK(chained == 2);
}

TEST_CASE("dist: the gradient of allreduce is an allreduce of the output gradient") {
  Var x = input(DType::float64, {4}, "x");
  Var c = input(DType::float64, {4}, "c");
  for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::mean}) {
    Var g = grad(sum(dist::allreduce(x, op) * c), x);
    REQUIRE(g.op() != nullptr);
    CHECK(g.op()->name() == "allreduce_wait");
    CHECK_THAT(g.op()->params(), Contains(op == dist::ReduceOp::sum ? "op=sum" : "op=mean"));
  }
}

TEST_CASE("dist: rank_seed is a deterministic mix of the seed and the rank") {
  CHECK(dist::rank_seed(7) == dist::rank_seed(7));
  CHECK(dist::rank_seed(7) != dist::rank_seed(8));
  CHECK(dist::rank_seed(7) != 7);
}
