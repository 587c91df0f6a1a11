// Batch normalization: training and inference outputs, the running averages and the
// fused gradients against straightforward per-channel loops in double (the gradient by the
// textbook chain rule through mean and variance), verify_grad in 1-D/2-D/3-D, results
// independent of the thread count, accuracy far from zero, bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>
#include <convgraph/ops/batch_norm.hpp>
#include <map>
#include <random>

using namespace convgraph;
using Catch::Contains;

namespace {

Tensor values(Shape shape, unsigned seed, DType dt, double offset = 0, double scale = 1) {
  Tensor t(dt, std::move(shape));
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(offset, scale);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, nd(gen));
  return t;
}

/// (N, C, S) view of a shape: channel of flat index i is (i / S) % C.
struct Layout {
  std::int64_t n, c, s;
  explicit Layout(const Shape& x) : n(x[0]), c(x[1]), s(1) {
    for (std::size_t i = 2; i < x.size(); ++i) s *= x[i];
  }
  std::int64_t channel(std::int64_t i) const { return (i / s) % c; }
  double m() const { return static_cast<double>(n * s); }
};

struct Reference {
  std::vector<double> y, mean, var_biased, var_unbiased;
};

Reference reference_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const Layout l(x.shape());
  Reference r;
  r.mean.assign(static_cast<std::size_t>(l.c), 0);
  r.var_biased.assign(r.mean.size(), 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) r.mean[static_cast<std::size_t>(l.channel(i))] += x.get(i) / l.m();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>(l.channel(i));
    r.var_biased[c] += (x.get(i) - r.mean[c]) * (x.get(i) - r.mean[c]) / l.m();
  }
  for (double v : r.var_biased) r.var_unbiased.push_back(v * l.m() / (l.m() - 1));
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>(l.channel(i));
    r.y.push_back((x.get(i) - r.mean[c]) / std::sqrt(r.var_biased[c] + eps) * gamma.get(static_cast<std::int64_t>(c)) +
                  beta.get(static_cast<std::int64_t>(c)));
  }
  return r;
}

/// The training gradients by the chain rule written step by step (xhat, then the
/// variance, then the mean), not by the fused formula the kernels use.
struct ReferenceGrad {
  std::vector<double> dx, dgamma, dbeta;
};
ReferenceGrad reference_grad(const Tensor& x, const Tensor& gamma, const Tensor& gy, double eps) {
  const Layout l(x.shape());
  const Reference f = reference_train(x, gamma, Tensor::zeros(x.dtype(), {l.c}), eps);
  const auto C = static_cast<std::size_t>(l.c);
  std::vector<double> dvar(C, 0), dmean(C, 0), sum_dev(C, 0);
  ReferenceGrad g{std::vector<double>(static_cast<std::size_t>(x.numel())), std::vector<double>(C, 0), std::vector<double>(C, 0)};
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>(l.channel(i));
    const double sd = std::sqrt(f.var_biased[c] + eps), dev = x.get(i) - f.mean[c];
    const double dxhat = gy.get(i) * gamma.get(static_cast<std::int64_t>(c));
    g.dbeta[c] += gy.get(i);
    g.dgamma[c] += gy.get(i) * dev / sd;
    dvar[c] += dxhat * dev * -0.5 / (sd * sd * sd);
    dmean[c] += -dxhat / sd;
    sum_dev[c] += -2 * dev;
  }
  for (std::size_t c = 0; c < C; ++c) dmean[c] += dvar[c] * sum_dev[c] / l.m();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>(l.channel(i));
    const double sd = std::sqrt(f.var_biased[c] + eps), dev = x.get(i) - f.mean[c];
    g.dx[static_cast<std::size_t>(i)] = gy.get(i) * gamma.get(static_cast<std::int64_t>(c)) / sd +
                                        dvar[c] * 2 * dev / l.m() + dmean[c] / l.m();
  }
  return g;
}

/// Largest |a - b| / (1 + |b|).
double rel_err(const Tensor& a, const std::vector<double>& b) {
  REQUIRE(static_cast<std::size_t>(a.numel()) == b.size());
  double e = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    e = std::max(e, std::abs(a.get(i) - b[static_cast<std::size_t>(i)]) / (1 + std::abs(b[static_cast<std::size_t>(i)])));
  return e;
}

const std::vector<Shape> kShapes = {{7, 3}, {4, 3, 9}, {3, 2, 5, 7}, {2, 3, 3, 4, 5}, {2, 4, 37, 20}};

}  // namespace

TEST_CASE("batch_norm: training outputs match a per-channel reference", "[ops][batch_norm]") {
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float32 ? 2e-5 : 1e-11;
    for (const Shape& s : kShapes) {
      INFO(dtype_name(dt) << " " << shape_to_string(s));
      const Tensor x = values(s, 1, dt, 0.7, 1.9), gamma = values({s[1]}, 2, dt), beta = values({s[1]}, 3, dt);
      Var xv = input(dt, Shape(s.size(), kUnknown)), gv = input(dt, {s[1]}), bv = input(dt, {kUnknown});
      const BatchNormOutputs o = batch_norm_train(xv, gv, bv, 1e-3);
      const auto out = compile({xv, gv, bv}, {o.y, o.mean, o.var})({x, gamma, beta});
      const Reference r = reference_train(x, gamma, beta, 1e-3);
      CHECK(out[0].shape() == s);
      CHECK(out[1].shape() == Shape{s[1]});
      CHECK(rel_err(out[0], r.y) < tol);
      CHECK(rel_err(out[1], r.mean) < tol);
      CHECK(rel_err(out[2], r.var_unbiased) < tol);
    }
  }
}

TEST_CASE("batch_norm: statistics stay accurate far from zero and do not depend on the thread count",
          "[ops][batch_norm]") {
  const Tensor x = values({16, 6, 31, 33}, 4, DType::float32, 1000, 0.5);
  const Tensor gamma = values({6}, 5, DType::float32), beta = values({6}, 6, DType::float32);
  Var xv = input(DType::float32, {16, 6, 31, 33}), gv = input(DType::float32, {6}), bv = input(DType::float32, {6});
  const BatchNormOutputs o = batch_norm_train(xv, gv, bv);
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2}) {
    Mode m = Mode::fast_run();
    m.threads = threads;
    runs.push_back(compile({xv, gv, bv}, {o.y, o.mean, o.var}, m)({x, gamma, beta}));
  }
  for (std::size_t k = 0; k < 3; ++k) CHECK(max_abs_diff(runs[0][k], runs[1][k]) == 0);
  const Reference r = reference_train(x, gamma, beta, 1e-5);
  for (std::size_t c = 0; c < 6; ++c) {
    CHECK(std::abs(runs[0][2].get(static_cast<std::int64_t>(c)) - r.var_unbiased[c]) < 1e-3 * r.var_unbiased[c]);
    CHECK(std::abs(runs[0][1].get(static_cast<std::int64_t>(c)) - r.mean[c]) < 1e-4);
  }
  CHECK(rel_err(runs[0][0], r.y) < 1e-3);
}

TEST_CASE("batch_norm: inference and running averages match the formulas", "[ops][batch_norm]") {
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float32 ? 1e-5 : 1e-12;
    const Shape s{3, 4, 5, 6};
    const Tensor x = values(s, 7, dt), gamma = values({4}, 8, dt), beta = values({4}, 9, dt);
    const Tensor rm = values({4}, 10, dt), rv = values({4}, 11, dt, 2, 0.3);
    Var xv = input(dt, s), gv = input(dt, {4}), bv = input(dt, {4}), mv = input(dt, {4}), vv = input(dt, {4});
    const BatchNormOutputs o = batch_norm_train(xv, gv, bv);
    const RunningStats up = batch_norm_running_update(o, mv, vv, 0.25);
    const auto out = compile({xv, gv, bv, mv, vv}, {batch_norm_infer(xv, gv, bv, mv, vv, 0.01), up.mean, up.var})(
        {x, gamma, beta, rm, rv});
    const Layout l(s);
    std::vector<double> y;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t c = l.channel(i);
      y.push_back((x.get(i) - rm.get(c)) / std::sqrt(rv.get(c) + 0.01) * gamma.get(c) + beta.get(c));
    }
    CHECK(rel_err(out[0], y) < tol);
    const Reference r = reference_train(x, gamma, beta, 1e-5);
    std::vector<double> mean_new, var_new;
    for (std::int64_t c = 0; c < 4; ++c) {
      mean_new.push_back(0.75 * rm.get(c) + 0.25 * r.mean[static_cast<std::size_t>(c)]);
      var_new.push_back(0.75 * rv.get(c) + 0.25 * r.var_unbiased[static_cast<std::size_t>(c)]);
    }
    CHECK(rel_err(out[1], mean_new) < tol);
    CHECK(rel_err(out[2], var_new) < tol);
  }
}

TEST_CASE("batch_norm: fused training gradients match the chain-rule reference", "[ops][batch_norm][grad]") {
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float32 ? 1e-4 : 1e-10;
    for (const Shape& s : kShapes) {
      INFO(dtype_name(dt) << " " << shape_to_string(s));
      const Tensor x = values(s, 12, dt, -0.4, 1.3), gamma = values({s[1]}, 13, dt), beta = values({s[1]}, 14, dt);
      const Tensor gy = values(s, 15, dt);
      Var xv = input(dt, s), gv = input(dt, {s[1]}), bv = input(dt, {s[1]}), gyv = input(dt, s);
      const Var cost = sum(batch_norm_train(xv, gv, bv, 1e-4).y * gyv);
      const auto g = grad(cost, {xv, gv, bv});
      const Function f = compile({xv, gv, bv, gyv}, g);
      const auto out = f({x, gamma, beta, gy});
      const ReferenceGrad r = reference_grad(x, gamma, gy, 1e-4);
      CHECK(rel_err(out[0], r.dx) < tol);
      CHECK(rel_err(out[1], r.dgamma) < tol);
      CHECK(rel_err(out[2], r.dbeta) < tol);
      // Fused: one reduction op and one dx op, no generic reductions.
      std::map<std::string, int> ops;
      for (const Var& v : topological_order(f.graph().outputs()))
        if (v.op()) ops[v.op()->name()]++;
      CHECK(ops["batch_norm_train_grad_sums"] == 1);
      CHECK(ops["batch_norm_train_grad_x"] == 1);
      CHECK(ops["sum"] == 1);  // the cost itself (autodiff seeds with ones_like(cost))
      CHECK(ops["mean"] + ops["sum_to"] + ops["broadcast_mean_grad"] == 0);
    }
  }
}

TEST_CASE("batch_norm: gradients pass verify_grad in 1-D, 2-D and 3-D", "[ops][batch_norm][grad]") {
  for (const Shape& s : std::vector<Shape>{{6, 2}, {3, 2, 5}, {2, 3, 3, 4}, {2, 2, 3, 2, 3}}) {
    INFO(shape_to_string(s));
    const Tensor x = values(s, 16, DType::float64), gamma = values({s[1]}, 17, DType::float64, 1, 0.5);
    const Tensor beta = values({s[1]}, 18, DType::float64);
    CHECK_NOTHROW(verify_grad([](const auto& v) { return batch_norm_train(v[0], v[1], v[2], 1e-3).y; }, {x, gamma, beta}));
    const Tensor rm = values({s[1]}, 19, DType::float64), rv = values({s[1]}, 20, DType::float64, 1.5, 0.2);
    CHECK_NOTHROW(verify_grad([](const auto& v) { return batch_norm_infer(v[0], v[1], v[2], v[3], v[4], 1e-3); },
                              {x, gamma, beta, rm, rv}));
  }
}

TEST_CASE("batch_norm: bad inputs raise typed errors naming op and values", "[ops][batch_norm][errors]") {
  Var x = input(DType::float32, {4, 3, 5, 5}), g = input(DType::float32, {3}), b = input(DType::float32, {3});
  CHECK_THROWS_AS(batch_norm_train(input(DType::float32, {5}), g, b), ShapeError);
  CHECK_THROWS_WITH(batch_norm_train(input(DType::float32, {5}), g, b),
                    Contains("batch_norm_train") && Contains("(5,)") && Contains("rank 2 to 5"));
  CHECK_THROWS_AS(batch_norm_train(input(DType::float32, {2, 3, 1, 1, 1, 1}), g, b), ShapeError);
  CHECK_THROWS_AS(batch_norm_train(input(DType::int32, {4, 3}), g, b), TypeError);
  CHECK_THROWS_WITH(batch_norm_train(x, input(DType::float32, {4}), b),
                    Contains("batch_norm_train") && Contains("gamma") && Contains("(4,)") && Contains("C = 3"));
  CHECK_THROWS_AS(batch_norm_train(x, g, input(DType::float32, {3, 1})), ShapeError);
  CHECK_THROWS_AS(batch_norm_train(x, g, input(DType::float64, {3})), TypeError);
  CHECK_THROWS_WITH(batch_norm_train(x, g, input(DType::float64, {3})),
                    Contains("beta") && Contains("float64") && Contains("float32"));
  CHECK_THROWS_AS(batch_norm_train(x, g, b, 0), ValueError);
  CHECK_THROWS_WITH(batch_norm_train(x, g, b, -1e-5), Contains("batch_norm_train") && Contains("eps -1e-05"));
  CHECK_THROWS_AS(batch_norm_infer(x, g, b, g, b, NAN), ValueError);
  CHECK_THROWS_AS(batch_norm_train(input(DType::float32, {1, 3}), g, b), ShapeError);
  CHECK_THROWS_WITH(batch_norm_train(input(DType::float32, {1, 3}), g, b), Contains("at least 2"));
  CHECK_THROWS_AS(batch_norm_infer(x, g, b, input(DType::float32, {2}), b), ShapeError);
  CHECK_THROWS_WITH(batch_norm_infer(x, g, b, g, input(DType::float32, {5})),
                    Contains("batch_norm_infer") && Contains("running_var") && Contains("(5,)"));
  CHECK_THROWS_AS(batch_norm_infer(x, g, Var(), g, b), ValueError);
  const BatchNormOutputs o = batch_norm_train(x, g, b);
  CHECK_THROWS_AS(batch_norm_running_update(o, g, b, 1.5), ValueError);
  CHECK_THROWS_WITH(batch_norm_running_update(o, g, b, -0.1), Contains("momentum -0.1"));
  CHECK_THROWS_AS(batch_norm_running_update(o, input(DType::float32, {4}), b), ShapeError);
  // One value per channel, known only at run time: the call fails, the function stays usable.
  Var u = input(DType::float32, {kUnknown, 3});
  const Function f = compile({u, g, b}, {batch_norm_train(u, g, b).y});
  const Tensor gamma = Tensor::full(DType::float32, {3}, 1);
  CHECK_THROWS_AS(f({Tensor::zeros(DType::float32, {1, 3}), gamma, gamma}), ShapeError);
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {1, 3}), gamma, gamma}), Contains("(1, 3)"));
  CHECK(f({Tensor::zeros(DType::float32, {2, 3}), gamma, gamma})[0].shape() == Shape{2, 3});
}
