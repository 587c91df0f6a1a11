// Elementwise ops and reductions: forward against plain C++ references, gradients
// with verify_grad, and bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>
#include <functional>
#include <random>

using namespace convgraph;

namespace {
Tensor random_tensor(Shape shape, double lo, double hi, unsigned seed, DType dt = DType::float64) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(dt, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}
Tensor eval1(const Var& in, const Var& out, const Tensor& x) { return compile({in}, {out})({x})[0]; }
}  // namespace

TEST_CASE("math: unary ops match std:: references and pass verify_grad", "[ops][math]") {
  struct Case {
    const char* name;
    std::function<Var(const Var&)> op;
    std::function<double(double)> ref;
    double lo, hi;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Var& v) { return -v; }, [](double v) { return -v; }, -2, 2},
      {"exp", [](const Var& v) { return exp(v); }, [](double v) { return std::exp(v); }, -2, 2},
      {"log", [](const Var& v) { return log(v); }, [](double v) { return std::log(v); }, 0.5, 3},
      {"sqrt", [](const Var& v) { return sqrt(v); }, [](double v) { return std::sqrt(v); }, 0.5, 3},
      {"abs", [](const Var& v) { return abs(v); }, [](double v) { return std::abs(v); }, 0.2, 2},
      {"abs-neg", [](const Var& v) { return abs(v); }, [](double v) { return std::abs(v); }, -2, -0.2},
      {"relu", [](const Var& v) { return relu(v); }, [](double v) { return v > 0 ? v : 0; }, 0.1, 2},
      {"sigmoid", [](const Var& v) { return sigmoid(v); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -4, 4},
      {"tanh", [](const Var& v) { return tanh(v); }, [](double v) { return std::tanh(v); }, -2, 2},
      {"pow2.5", [](const Var& v) { return pow(v, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0.5, 2},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const Tensor x = random_tensor({3, 4}, c.lo, c.hi, 7);
    Var in = input(DType::float64, {3, 4});
    const Tensor y = eval1(in, c.op(in), x);
    for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(y.get(i) == Approx(c.ref(x.get(i))).epsilon(1e-12));
    CHECK_NOTHROW(verify_grad([&](const std::vector<Var>& v) { return c.op(v[0]); }, {x}));
    // float32 forward agrees with the float64 reference to single precision.
    Var in32 = input(DType::float32, {3, 4});
    const Tensor y32 = eval1(in32, c.op(in32), x.astype(DType::float32));
    for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(y32.get(i) == Approx(c.ref(x.get(i))).epsilon(1e-5));
  }
  // relu passes no gradient on its negative side.
  Var x = input(DType::float64, {3});
  const Tensor g = compile({x}, {grad(sum(relu(x) * 3.0), x)})({Tensor::from({-1, 2, -3}, {3}, DType::float64)})[0];
  CHECK(g.to_vector() == std::vector<double>{0, 3, 0});
}

TEST_CASE("math: binary ops with broadcasting match references and gradients", "[ops][math]") {
  struct Case {
    const char* name;
    std::function<Var(const Var&, const Var&)> op;
    std::function<double(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {"add", [](const Var& a, const Var& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"sub", [](const Var& a, const Var& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"mul", [](const Var& a, const Var& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"div", [](const Var& a, const Var& b) { return a / b; }, [](double a, double b) { return a / b; }},
      {"pow", [](const Var& a, const Var& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }},
      {"maximum", [](const Var& a, const Var& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Var& a, const Var& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{4, 1, 3}, {2, 1}}, {{2, 3}, {}}};
  for (const auto& c : cases) {
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_to_string(sa) << " " << shape_to_string(sb));
      const Tensor a = random_tensor(sa, 0.5, 2, 11);
      const Tensor b = random_tensor(sb, 0.6, 2.2, 13);
      Var va = input(DType::float64, sa), vb = input(DType::float64, sb);
      const Tensor y = compile({va, vb}, {c.op(va, vb)})({a, b})[0];
      // Reference through explicit numpy-style index arithmetic.
      const Shape& os = y.shape();
      auto at = [&](const Tensor& t, std::int64_t flat) {
        std::int64_t off = 0, stride = 1;
        const std::size_t lead = os.size() - t.shape().size();
        for (std::size_t k = os.size(); k-- > 0;) {
          const std::int64_t idx = flat % os[k];
          flat /= os[k];
          if (k >= lead) {
            const std::int64_t d = t.shape()[k - lead];
            off += (d == 1 ? 0 : idx) * stride;
            stride *= d;
          }
        }
        return t.get(off);
      };
      for (std::int64_t i = 0; i < y.numel(); ++i) CHECK(y.get(i) == Approx(c.ref(at(a, i), at(b, i))).epsilon(1e-12));
      CHECK_NOTHROW(verify_grad([&](const std::vector<Var>& v) { return c.op(v[0], v[1]); }, {a, b}));
    }
  }
}

TEST_CASE("math: comparisons, where and cast", "[ops][math]") {
  Var a = input(DType::float32, {4});
  Var b = input(DType::float32, {4});
  Function f = compile({a, b}, {a < b, a >= b, eq(a, b), where(a > b, a, b * 10.0), cast(a, DType::int32)});
  auto out = f({Tensor::from({1, 5, 3, -2.7}, {4}), Tensor::from({2, 4, 3, 0}, {4})});
  CHECK(out[0].to_vector() == std::vector<double>{1, 0, 0, 1});
  CHECK(out[1].to_vector() == std::vector<double>{0, 1, 1, 0});
  CHECK(out[2].to_vector() == std::vector<double>{0, 0, 1, 0});
  CHECK(out[3].to_vector() == std::vector<double>{20, 5, 30, 0});
  CHECK(out[4].to_vector() == std::vector<double>{1, 5, 3, -2});
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& v) { return where(v[0] > v[1], v[0] * v[1], v[1]); },
                            {random_tensor({6}, -1, 1, 5), random_tensor({6}, -1, 1, 6)}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& v) { return cast(cast(v[0], DType::float32), DType::float64) * 2.0; },
                            {random_tensor({3}, -1, 1, 5)}, {.eps = 1e-2, .abs_tol = 1e-3, .rel_tol = 1e-3}));
}

TEST_CASE("math: reductions over axes with keepdims, and their gradients", "[ops][math]") {
  const Tensor x = random_tensor({2, 3, 4}, -1, 1, 21);
  Var v = input(DType::float64, {2, 3, 4});
  Function f = compile({v}, {sum(v, {1}), mean(v, {0, 2}, true), max(v, {-1}), min(v), sum(v)});
  auto out = f({x});
  CHECK(out[0].shape() == Shape{2, 4});
  CHECK(out[1].shape() == Shape{1, 3, 1});
  CHECK(out[2].shape() == Shape{2, 3});
  CHECK(out[3].rank() == 0);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += x.get((i * 3 + j) * 4 + k);
      CHECK(out[0].get(i * 4 + k) == Approx(s));
    }
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += x.get((i * 3 + j) * 4 + k);
    CHECK(out[1].get(j) == Approx(s / 8));
  }
  double mn = 1e9, total = 0;
  for (auto e : x.to_vector()) {
    mn = std::min(mn, e);
    total += e;
  }
  CHECK(out[3].get(0) == mn);
  CHECK(out[4].get(0) == Approx(total));
  for (int r = 0; r < 6; ++r) {
    double m = -1e9;
    for (int k = 0; k < 4; ++k) m = std::max(m, x.get(r * 4 + k));
    CHECK(out[2].get(r) == m);
  }
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& a) { return sum(a[0], {1}); }, {x}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& a) { return mean(a[0], {0, 2}, true); }, {x}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& a) { return max(a[0], {-1}); }, {x}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& a) { return min(a[0]); }, {x}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& a) { return mean(a[0] * a[0]); }, {x}));
}

TEST_CASE("math: unknown dimensions resolve at call time", "[ops][math]") {
  Var x = input(DType::float32, {kUnknown, 3});
  Var b = input(DType::float32, {3});
  Function f = compile({x, b}, {sum(x + b, {0})});
  CHECK(f({Tensor::full(DType::float32, {5, 3}, 1), Tensor::from({1, 2, 3}, {3})})[0].to_vector() ==
        std::vector<double>{10, 15, 20});
  CHECK(f({Tensor::full(DType::float32, {2, 3}, 1), Tensor::from({1, 2, 3}, {3})})[0].to_vector() ==
        std::vector<double>{4, 6, 8});
}

TEST_CASE("math: bad inputs raise typed errors naming the op", "[ops][math][errors]") {
  Var f = input(DType::float32, {2, 3});
  Var i = input(DType::int32, {2, 3});
  Var bl = f < f;
  CHECK_THROWS_AS(exp(i), TypeError);
  CHECK_THROWS_WITH(log(i), Catch::Contains("log") && Catch::Contains("int32"));
  CHECK_THROWS_AS(bl + bl, TypeError);
  CHECK_THROWS_AS(where(f, f, f), TypeError);
  CHECK_THROWS_AS(sum(f, {2}), ValueError);
  CHECK_THROWS_WITH(sum(f, {0, -2}), Catch::Contains("repeated"));
  CHECK_THROWS_AS(mean(i), TypeError);
  CHECK_THROWS_AS(f * input(DType::float32, {3, 2}), ShapeError);
  CHECK_THROWS_AS(exp(Var()), ValueError);
}
