// dot/matmul, softmax, log_softmax and categorical cross-entropy: forward against plain
// loops written here, gradients with verify_grad (first and second order), bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>
#include <random>

using namespace convgraph;

namespace {

Tensor random_tensor(Shape shape, unsigned seed, DType dt = DType::float64, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(dt, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.set(i, dt == DType::int32 || dt == DType::int64 ? std::round(4 * u(rng)) : u(rng));
  return t;
}

Tensor run1(const Var& in, const Var& out, const Tensor& x) { return compile({in}, {out})({x})[0]; }

/// numpy.matmul by definition: promote 1-D operands, broadcast the batch axes, drop the
/// promoted axes again.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const std::size_t nb = std::max(sa.size(), sb.size()) - 2;
  while (sa.size() < nb + 2) sa.insert(sa.begin(), 1);
  while (sb.size() < nb + 2) sb.insert(sb.begin(), 1);
  Shape batch(nb);
  for (std::size_t i = 0; i < nb; ++i) batch[i] = std::max(sa[i], sb[i]);
  const std::int64_t m = sa[nb], k = sa[nb + 1], n = sb[nb + 1];
  Shape out = batch;
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  Tensor c = Tensor::zeros(DType::float64, out);
  const std::int64_t nbatch = numel(batch);
  for (std::int64_t bi = 0; bi < nbatch; ++bi) {
    std::int64_t rem = bi, oa = 0, ob = 0, sa_acc = 1, sb_acc = 1;
    for (std::size_t d = nb; d-- > 0;) {
      const std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += (sa[d] == 1 ? 0 : idx) * sa_acc;
      ob += (sb[d] == 1 ? 0 : idx) * sb_acc;
      sa_acc *= sa[d];
      sb_acc *= sb[d];
    }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += a.get(oa * m * k + i * k + p) * b.get(ob * k * n + p * n + j);
        c.set(bi * m * n + i * n + j, s);
      }
  }
  return c;
}

}  // namespace

TEST_CASE("nnet: matmul/dot follow numpy matmul for 1-D, 2-D and batched operands", "[ops][nnet]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 5}},        {{4}, {4, 5}},       {{3, 4}, {4}},    {{4}, {4}},
      {{2, 3, 4}, {2, 4, 5}},  {{2, 3, 4}, {4, 5}}, {{4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
      {{1, 3, 4}, {2, 4, 2}},  {{2, 3, 4}, {4}},    {{3, 0}, {0, 2}}, {{130, 70}, {70, 90}},
      {{5, 64, 33}, {33, 40}},
  };
  for (DType dt : {DType::float64, DType::float32, DType::int32, DType::int64}) {
    for (const auto& [sa, sb] : shapes) {
      INFO(dtype_name(dt) << " " << shape_to_string(sa) << " @ " << shape_to_string(sb));
      const Tensor a = random_tensor(sa, 1, dt), b = random_tensor(sb, 2, dt);
      Var va = input(dt, sa), vb = input(dt, sb);
      const Var y = matmul(va, vb);
      const Tensor want = reference_matmul(a, b);
      REQUIRE(y.shape() == want.shape());
      const Tensor got = compile({va, vb}, {y})({a, b})[0];
      REQUIRE(got.shape() == want.shape());
      const double tol = dt == DType::float32 ? 1e-4 : 1e-12;
      CHECK(max_abs_diff(got.astype(DType::float64), want) <= tol * (1 + sa.back()));
      CHECK(dot(va, vb).shape() == want.shape());
    }
  }
  // Unknown batch and row dimensions are carried through.
  Var u = input(DType::float32, {kUnknown, 3, 4});
  CHECK(matmul(u, input(DType::float32, {4, 2})).shape() == Shape{kUnknown, 3, 2});
  CHECK(matmul(input(DType::float32, {kUnknown, 4}), input(DType::float32, {kUnknown, 2})).shape() ==
        Shape{kUnknown, 2});
}

TEST_CASE("nnet: matmul gradients pass verify_grad for every operand layout", "[ops][nnet][grad]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}},       {{4}, {4, 2}},       {{3, 4}, {4}},    {{4}, {4}},
      {{2, 3, 4}, {2, 4, 2}}, {{2, 3, 4}, {4, 2}}, {{3}, {2, 3, 2}}, {{2, 1, 2, 3}, {3, 3, 2}},
  };
  for (const auto& [sa, sb] : shapes) {
    INFO(shape_to_string(sa) << " @ " << shape_to_string(sb));
    CHECK_NOTHROW(
        verify_grad([](const auto& v) { return matmul(v[0], v[1]); }, {random_tensor(sa, 3), random_tensor(sb, 4)}));
  }
  // Second order: d/dA of sum((A B)^2) is 2 (A B) B^T, itself built from matmuls.
  CHECK_NOTHROW(verify_grad([](const auto& v) { return grad(sum(pow(matmul(v[0], v[1]), 2.0)), v[0]); },
                            {random_tensor({2, 3}, 5), random_tensor({3, 2}, 6)}));
}

TEST_CASE("nnet: softmax and log_softmax match the definition and stay finite", "[ops][nnet]") {
  for (DType dt : {DType::float64, DType::float32}) {
    INFO(dtype_name(dt));
    // Rows with very large and very negative entries: the naive exp would overflow.
    Tensor x = random_tensor({3, 2, 5}, 7, dt, -3, 3);
    x.set(0, 1000);
    x.set(1, 990);
    x.set(7, -1000);
    Var v = input(dt, {3, 2, 5});
    const Tensor sm = run1(v, softmax(v), x), lsm = run1(v, log_softmax(v), x);
    const double tol = dt == DType::float32 ? 1e-6 : 1e-14;
    for (std::int64_t r = 0; r < 6; ++r) {
      double m = -INFINITY, s = 0, total = 0;
      for (int j = 0; j < 5; ++j) m = std::max(m, x.get(r * 5 + j));
      for (int j = 0; j < 5; ++j) s += std::exp(x.get(r * 5 + j) - m);
      for (int j = 0; j < 5; ++j) {
        const double want_log = x.get(r * 5 + j) - m - std::log(s);
        CHECK(sm.get(r * 5 + j) == Approx(std::exp(want_log)).margin(tol));
        CHECK(lsm.get(r * 5 + j) == Approx(want_log).epsilon(tol * 10).margin(tol * 10));
        CHECK(std::isfinite(lsm.get(r * 5 + j)));
        total += sm.get(r * 5 + j);
      }
      CHECK(total == Approx(1.0).epsilon(tol * 10));
    }
  }
  // A large batch (parallel rows) gives the same rows as a 1-D input does.
  const Tensor big = random_tensor({2000, 33}, 8, DType::float32, -5, 5);
  Var b = input(DType::float32, {2000, 33}), r = input(DType::float32, {33});
  const Tensor out = run1(b, softmax(b), big);
  const Function one_row = compile({r}, {softmax(r)});
  for (std::int64_t row : {0, 1000, 1999}) {
    const Tensor want = one_row({big.slice(0, row, row + 1).reshape({33})})[0];
    double s = 0;
    for (int j = 0; j < 33; ++j) {
      CHECK(out.get(row * 33 + j) == want.get(j));
      s += out.get(row * 33 + j);
    }
    CHECK(s == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("nnet: softmax gradients (fused ops) pass verify_grad, also second order", "[ops][nnet][grad]") {
  const Tensor x = random_tensor({3, 4}, 9, DType::float64, -2, 2);
  CHECK_NOTHROW(verify_grad([](const auto& v) { return softmax(v[0]); }, {x}));
  CHECK_NOTHROW(verify_grad([](const auto& v) { return log_softmax(v[0]); }, {x}));
  CHECK_NOTHROW(verify_grad([](const auto& v) { return softmax(v[0]); }, {random_tensor({5}, 10)}));
  CHECK_NOTHROW(verify_grad([](const auto& v) { return log_softmax(v[0]); }, {random_tensor({2, 2, 3}, 11)}));
  // The gradients are differentiable: softmax_grad / log_softmax_grad have gradients too.
  const Tensor w = random_tensor({3, 4}, 12);
  CHECK_NOTHROW(
      verify_grad([&](const auto& v) { return grad(sum(pow(softmax(v[0]), 2.0) * constant(w)), v[0]); }, {x}));
  CHECK_NOTHROW(
      verify_grad([&](const auto& v) { return grad(sum(pow(log_softmax(v[0]), 2.0) * constant(w)), v[0]); }, {x}));
  // ... with respect to the output gradient as well.
  CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(softmax(v[0]) * v[1]), v[0]); },
                            {x, random_tensor({3, 4}, 13)}));
  CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(log_softmax(v[0]) * v[1]), v[0]); },
                            {x, random_tensor({3, 4}, 14)}));
}

TEST_CASE("nnet: categorical_crossentropy with dense targets and class indices", "[ops][nnet]") {
  const Tensor logits = random_tensor({4, 5}, 15, DType::float64, -2, 2);
  Var x = input(DType::float64, {4, 5});
  const Tensor p = run1(x, softmax(x), logits);
  const std::vector<std::int64_t> cls = {2, 0, 4, 4};
  Tensor onehot = Tensor::zeros(DType::float64, {4, 5});
  Tensor soft = random_tensor({4, 5}, 16, DType::float64, 0, 1);
  for (int r = 0; r < 4; ++r) onehot.set(r * 5 + cls[static_cast<std::size_t>(r)], 1);
  Var pv = input(DType::float64, {4, 5}), tv = input(DType::float64, {4, 5});
  const Function dense = compile({pv, tv}, {categorical_crossentropy(pv, tv)});
  const Tensor ce_onehot = dense({p, onehot})[0], ce_soft = dense({p, soft})[0];
  REQUIRE(ce_onehot.shape() == Shape{4});
  for (DType it : {DType::int32, DType::int64}) {
    INFO(dtype_name(it));
    Var iv = input(it, {4});
    const Tensor idx = Tensor::from({2, 0, 4, 4}, {4}, it);
    const Tensor ce_idx = compile({pv, iv}, {categorical_crossentropy(pv, iv)})({p, idx})[0];
    for (int r = 0; r < 4; ++r) {
      const double want = -std::log(p.get(r * 5 + cls[static_cast<std::size_t>(r)]));
      CHECK(ce_idx.get(r) == Approx(want).epsilon(1e-13));
      CHECK(ce_onehot.get(r) == Approx(want).epsilon(1e-13));
      double s = 0;
      for (int j = 0; j < 5; ++j) s -= soft.get(r * 5 + j) * std::log(p.get(r * 5 + j));
      CHECK(ce_soft.get(r) == Approx(s).epsilon(1e-13));
    }
  }
  // float32 probabilities with int64 classes.
  Var p32 = input(DType::float32, {4, 5});
  const Tensor ce32 =
      compile({p32}, {categorical_crossentropy(p32, constant(Tensor::from({2, 0, 4, 4}, {4}, DType::int64)))})(
          {p.astype(DType::float32)})[0];
  CHECK(ce32.dtype() == DType::float32);
  CHECK(ce32.get(1) == Approx(-std::log(p.get(5))).epsilon(1e-5));
}

TEST_CASE("nnet: categorical_crossentropy gradients pass verify_grad", "[ops][nnet][grad]") {
  const Tensor logits = random_tensor({3, 4}, 17, DType::float64, -1, 1);
  const Tensor idx = Tensor::from({3, 0, 1}, {3}, DType::int64);
  // Through softmax, as a classifier uses it.
  CHECK_NOTHROW(
      verify_grad([&](const auto& v) { return categorical_crossentropy(softmax(v[0]), constant(idx)); }, {logits}));
  // Directly in the probabilities (points kept away from 0), and in the dense targets.
  const Tensor probs = random_tensor({3, 4}, 18, DType::float64, 0.2, 1);
  CHECK_NOTHROW(verify_grad([&](const auto& v) { return categorical_crossentropy(v[0], constant(idx)); }, {probs}));
  CHECK_NOTHROW(verify_grad([](const auto& v) { return categorical_crossentropy(v[0], v[1]); },
                            {probs, random_tensor({3, 4}, 19, DType::float64, 0, 1)}));
  // Second order through the class-index gather/scatter pair.
  CHECK_NOTHROW(verify_grad(
      [&](const auto& v) { return grad(sum(pow(categorical_crossentropy(v[0], constant(idx)), 2.0)), v[0]); },
      {probs}));
}

TEST_CASE("nnet: bad inputs raise typed errors naming op and values", "[ops][nnet][errors]") {
  using Catch::Contains;
  Var a = input(DType::float32, {3, 4});
  // dot / matmul
  CHECK_THROWS_AS(matmul(a, input(DType::float32, {5, 2})), ShapeError);
  CHECK_THROWS_WITH(matmul(a, input(DType::float32, {5, 2})),
                    Contains("matmul") && Contains("(3, 4)") && Contains("(5, 2)"));
  CHECK_THROWS_AS(dot(input(DType::float32, {4}), input(DType::float32, {3})), ShapeError);
  CHECK_THROWS_AS(matmul(a, input(DType::float32, {})), ShapeError);
  CHECK_THROWS_WITH(matmul(a, input(DType::float32, {})), Contains("matmul") && Contains("rank >= 1"));
  CHECK_THROWS_AS(matmul(input(DType::float32, {2, 3, 4}), input(DType::float32, {3, 4, 2})), ShapeError);
  CHECK_THROWS_WITH(matmul(input(DType::float32, {2, 3, 4}), input(DType::float32, {3, 4, 2})),
                    Contains("matmul") && Contains("batch dimensions 2 and 3"));
  CHECK_THROWS_AS(matmul(a, input(DType::float64, {4, 2})), TypeError);
  CHECK_THROWS_WITH(matmul(a, input(DType::float64, {4, 2})), Contains("matmul") && Contains("float64"));
  CHECK_THROWS_AS(matmul(input(DType::boolean, {2, 2}), input(DType::boolean, {2, 2})), TypeError);
  CHECK_THROWS_WITH(matmul(input(DType::boolean, {2, 2}), input(DType::boolean, {2, 2})),
                    Contains("matmul") && Contains("bool"));
  // softmax / log_softmax
  CHECK_THROWS_AS(softmax(input(DType::int32, {2, 3})), TypeError);
  CHECK_THROWS_WITH(softmax(input(DType::int32, {2, 3})), Contains("softmax") && Contains("int32"));
  CHECK_THROWS_AS(log_softmax(input(DType::float32, {})), ShapeError);
  CHECK_THROWS_WITH(log_softmax(input(DType::float32, {})), Contains("log_softmax") && Contains("0-d"));
  // categorical_crossentropy
  CHECK_THROWS_AS(categorical_crossentropy(a, input(DType::float32, {3, 5})), ShapeError);
  CHECK_THROWS_WITH(categorical_crossentropy(a, input(DType::float32, {3, 5})),
                    Contains("categorical_crossentropy") && Contains("(3, 5)") && Contains("(3, 4)"));
  CHECK_THROWS_AS(categorical_crossentropy(a, input(DType::int64, {4})), ShapeError);
  CHECK_THROWS_WITH(categorical_crossentropy(a, input(DType::int64, {4})),
                    Contains("categorical_crossentropy") && Contains("(4,)") && Contains("(3,)"));
  CHECK_THROWS_AS(categorical_crossentropy(a, input(DType::boolean, {3, 4})), TypeError);
  CHECK_THROWS_AS(categorical_crossentropy(a, input(DType::float64, {3, 4})), TypeError);
  CHECK_THROWS_WITH(categorical_crossentropy(a, input(DType::float64, {3, 4})),
                    Contains("categorical_crossentropy") && Contains("float64"));
  CHECK_THROWS_AS(categorical_crossentropy(input(DType::int32, {3, 4}), input(DType::int32, {3})), TypeError);
  // A class index out of range is found when the function runs; the function stays usable.
  Var idx = input(DType::int32, {3});
  const Function f = compile({a, idx}, {categorical_crossentropy(a, idx)});
  const Tensor probs = Tensor::full(DType::float32, {3, 4}, 0.25);
  CHECK_THROWS_AS(f({probs, Tensor::from({0, 4, 1}, {3}, DType::int32)}), ValueError);
  CHECK_THROWS_WITH(f({probs, Tensor::from({0, 4, 1}, {3}, DType::int32)}),
                    Contains("class index 4") && Contains("4 classes"));
  CHECK_THROWS_AS(f({probs, Tensor::from({0, -1, 1}, {3}, DType::int32)}), ValueError);
  CHECK(f({probs, Tensor::from({0, 3, 1}, {3}, DType::int32)})[0].get(1) == Approx(std::log(4.0)));
}
