#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>

using namespace convgraph;

TEST_CASE("autodiff: gradients accumulate over every path", "[core][autodiff]") {
  Var x = input(DType::float64, {3}, "x");
  Var y = x * x + x * 3.0;  // dy/dx = 2x + 3
  Var g = grad(sum(y), x);
  const Tensor out = compile({x}, {g})({Tensor::from({1, 2, -1}, {3}, DType::float64)})[0];
  CHECK(out.to_vector() == std::vector<double>{5, 7, 1});
}

TEST_CASE("autodiff: second-order gradients", "[core][autodiff]") {
  Var x = input(DType::float64, {}, "x");
  Var y = x * x * x;  // y'' = 6x
  Var g1 = grad(y, x);
  Var g2 = grad(g1, x);
  const auto out = compile({x}, {g1, g2})({Tensor::scalar(2, DType::float64)});
  CHECK(out[0].get(0) == Approx(12));
  CHECK(out[1].get(0) == Approx(12));
}

TEST_CASE("autodiff: errors for non-scalar costs and disconnected inputs", "[core][autodiff][errors]") {
  Var x = input(DType::float32, {3}, "x");
  Var w = input(DType::float32, {3}, "w");
  Var cost = sum(x * 2.0);
  CHECK_THROWS_AS(grad(x * 2.0, x), TypeError);
  CHECK_THROWS_WITH(grad(x * 2.0, x), Catch::Contains("scalar") && Catch::Contains("(3,)"));
  CHECK_THROWS_AS(grad(sum(cast(x, DType::int32)), x), TypeError);
  CHECK_THROWS_AS(grad(cost, w), ValueError);
  CHECK_THROWS_WITH(grad(cost, w), Catch::Contains("'w'"));
  Var gz = grad(cost, w, Disconnected::zero);
  const Tensor z = compile({x, w}, {gz})({Tensor::from({1, 2, 3}, {3}), Tensor::from({1, 2, 3}, {3})})[0];
  CHECK(z.to_vector() == std::vector<double>{0, 0, 0});
}

TEST_CASE("verify_grad: catches a wrong gradient", "[core][autodiff]") {
  // An op whose declared gradient is wrong by a factor of two must be reported.
  struct BadDouble final : Op {
    std::string name() const override { return "bad_double"; }
    TensorType infer(const std::vector<TensorType>& in) const override { return in[0]; }
    std::vector<Var> grad(const std::vector<Var>&, const Var&, const Var& g) const override { return {g * 4.0}; }
    void perform(const std::vector<Tensor>& in, Tensor& out, const ExecContext&) const override {
      for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, 2 * in[0].get(i));
    }
  };
  auto bad = [](const std::vector<Var>& v) { return apply(std::make_shared<BadDouble>(), {v[0]}); };
  CHECK_THROWS_AS(verify_grad(bad, {Tensor::from({1, 2}, {2}, DType::float64)}), MismatchError);
  CHECK_THROWS_AS(verify_grad([](const std::vector<Var>& v) { return zeros_like(v[0]) + 1.0; },
                              {Tensor::from({1, 2}, {2}, DType::float64)}),
                  MismatchError);  // all-zero gradients are reported, not passed
}
