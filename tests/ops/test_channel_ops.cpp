// bias_add (and its per-channel gradient op) and global_avg_pool over (N, C, ...) tensors:
// against loops written from the definitions, for ranks 2 to 5, float32 and float64, small
// and parallel sizes; verify_grad; bad inputs.
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <random>

using namespace convgraph;

namespace {

Tensor random_tensor(const Shape& shape, unsigned seed, DType dt = DType::float64) {
  Tensor t(DType::float64, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t.astype(dt);
}

/// Elements per (n, c) pair: the product of the axes after the channel axis.
std::int64_t inner(const Shape& s) {
  std::int64_t v = 1;
  for (std::size_t a = 2; a < s.size(); ++a) v *= s[a];
  return v;
}

}  // namespace

TEST_CASE("bias_add: matches x + b[c] and its b-gradient sums over all but axis 1", "[ops][bias_add]") {
  const std::vector<Shape> shapes = {{3, 4}, {2, 3, 5}, {2, 3, 4, 5}, {1, 2, 3, 2, 2}, {3, 2, 1, 1}, {8, 16, 24, 24},
                                     {256, 200}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::float64, DType::float32}) {
      INFO(shape_to_string(shape) << " " << dtype_name(dt));
      const std::int64_t n = shape[0], c = shape[1], s = inner(shape);
      const Tensor x = random_tensor(shape, 1, dt), b = random_tensor({c}, 2, dt), gy = random_tensor(shape, 3, dt);
      Var vx = input(dt, shape), vb = input(dt, {c}), vg = input(dt, shape);
      const Var y = bias_add(vx, vb);
      // The gradients autodiff builds: gy itself for x, one bias_add_grad op for b.
      const auto g = grad(sum(y * vg), {vx, vb});
      const auto out = compile({vx, vb, vg}, {y, g[0], g[1]})({x, b, gy});
      Tensor want_y(DType::float64, shape), want_gb = Tensor::zeros(DType::float64, {c});
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t k = 0; k < c; ++k)
          for (std::int64_t j = 0; j < s; ++j) {
            const std::int64_t at = (i * c + k) * s + j;
            want_y.set(at, x.get(at) + b.get(k));
            want_gb.set(k, want_gb.get(k) + gy.get(at));
          }
      const double tol = dt == DType::float32 ? 1e-5 * static_cast<double>(n * s) : 1e-9;
      CHECK(max_abs_diff(out[0].astype(DType::float64), want_y) <= (dt == DType::float32 ? 1e-6 : 0));
      CHECK(max_abs_diff(out[1], gy) == 0);
      CHECK(out[2].shape() == Shape{c});
      CHECK(max_abs_diff(out[2].astype(DType::float64), want_gb) <= tol);
    }
}

TEST_CASE("bias_add: gradients pass verify_grad", "[ops][bias_add][grad]") {
  for (const Shape& shape : {Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 2, 3, 2}, Shape{1, 3, 2, 2, 2}}) {
    INFO(shape_to_string(shape));
    const Tensor x = random_tensor(shape, 4), b = random_tensor({shape[1]}, 5);
    CHECK_NOTHROW(verify_grad([](const auto& v) { return bias_add(v[0], v[1]); }, {x, b}));
    // Second order: the b-gradient op is linear in gy, its adjoint broadcasts over axis 1.
    CHECK_NOTHROW(verify_grad([](const auto& v) { return grad(sum(pow(bias_add(v[0], v[1]), 2.0)), v[1]); }, {x, b}));
  }
}

TEST_CASE("bias_add: bad inputs raise typed errors naming op and values", "[ops][bias_add][errors]") {
  using Catch::Contains;
  Var x = input(DType::float32, {2, 3, 4, 4});
  CHECK_THROWS_AS(bias_add(x, input(DType::float32, {4})), ShapeError);
  CHECK_THROWS_WITH(bias_add(x, input(DType::float32, {4})),
                    Contains("bias_add") && Contains("(4,)") && Contains("(3,)") && Contains("(2, 3, 4, 4)"));
  CHECK_THROWS_AS(bias_add(x, input(DType::float32, {1, 3})), ShapeError);
  CHECK_THROWS_AS(bias_add(x, input(DType::float64, {3})), TypeError);
  CHECK_THROWS_WITH(bias_add(x, input(DType::float64, {3})), Contains("bias_add") && Contains("float64"));
  CHECK_THROWS_AS(bias_add(input(DType::float32, {3}), input(DType::float32, {3})), ShapeError);
  CHECK_THROWS_WITH(bias_add(input(DType::float32, {3}), input(DType::float32, {3})),
                    Contains("bias_add") && Contains("rank >= 2") && Contains("(3,)"));
  CHECK_THROWS_AS(bias_add(input(DType::int32, {2, 3}), input(DType::int32, {3})), TypeError);
  // Known only at run time: the call fails naming both shapes.
  Var u = input(DType::float32, {kUnknown, kUnknown}), ub = input(DType::float32, {kUnknown});
  const Function f = compile({u, ub}, {bias_add(u, ub)});
  CHECK(f({Tensor::zeros(DType::float32, {2, 3}), Tensor::zeros(DType::float32, {3})})[0].shape() == Shape{2, 3});
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {2, 3}), Tensor::zeros(DType::float32, {4})}),
                    Contains("bias_add") && Contains("(4,)"));
}

TEST_CASE("global_avg_pool: means over the spatial axes, gradient spreads evenly", "[ops][pool][global]") {
  for (const Shape& shape : {Shape{2, 3, 5}, Shape{2, 3, 4, 5}, Shape{1, 2, 3, 2, 4}, Shape{3, 2, 1, 1},
                             Shape{16, 32, 12, 12}})
    for (DType dt : {DType::float64, DType::float32}) {
      INFO(shape_to_string(shape) << " " << dtype_name(dt));
      const std::int64_t n = shape[0], c = shape[1], s = inner(shape);
      const Tensor x = random_tensor(shape, 6, dt), gy = random_tensor({n, c}, 7, dt);
      Var vx = input(dt, shape), vg = input(dt, {n, c});
      const Var y = global_avg_pool(vx);
      CHECK(y.shape() == Shape{n, c});
      const auto out = compile({vx, vg}, {y, grad(sum(y * vg), vx)})({x, gy});
      Tensor want_y(DType::float64, {n, c}), want_gx(DType::float64, shape);
      for (std::int64_t r = 0; r < n * c; ++r) {
        double sum = 0;
        for (std::int64_t j = 0; j < s; ++j) sum += x.get(r * s + j);
        want_y.set(r, sum / static_cast<double>(s));
        for (std::int64_t j = 0; j < s; ++j) want_gx.set(r * s + j, gy.get(r) / static_cast<double>(s));
      }
      const double tol = dt == DType::float32 ? 1e-6 : 1e-12;
      CHECK(max_abs_diff(out[0].astype(DType::float64), want_y) <= tol);
      CHECK(max_abs_diff(out[1].astype(DType::float64), want_gx) <= tol);
    }
  const Tensor x = random_tensor({2, 3, 2, 3}, 8);
  CHECK_NOTHROW(verify_grad([](const auto& v) { return global_avg_pool(v[0]); }, {x}));
  CHECK_NOTHROW(verify_grad([](const auto& v) { return grad(sum(pow(global_avg_pool(v[0]), 3.0)), v[0]); }, {x}));
}

TEST_CASE("global_avg_pool: bad inputs raise typed errors", "[ops][pool][global][errors]") {
  using Catch::Contains;
  CHECK_THROWS_AS(global_avg_pool(input(DType::float32, {2, 3})), ShapeError);
  CHECK_THROWS_WITH(global_avg_pool(input(DType::float32, {2, 3})),
                    Contains("global_avg_pool") && Contains("rank >= 3") && Contains("(2, 3)"));
  CHECK_THROWS_AS(global_avg_pool(input(DType::int64, {2, 3, 4})), TypeError);
  CHECK_THROWS_WITH(global_avg_pool(input(DType::int64, {2, 3, 4})), Contains("global_avg_pool") && Contains("int64"));
}
