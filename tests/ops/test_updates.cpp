// sgd() and adam(): several compiled steps against a hand-written loop of PyTorch's
// formulas, with gradients fed as inputs (so only the update rules are under test).
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>
#include <random>

using namespace convgraph;

namespace {

using Vec = std::vector<double>;

Vec random_vec(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  Vec v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Problem {
  std::vector<Shape> shapes{{3, 4}, {5}};
  std::size_t size(std::size_t i) const { return static_cast<std::size_t>(numel(shapes[i])); }
};

// Runs `steps` compiled steps of the builder's updates on two parameters and returns the
// final parameters; `reference` steps the same data by hand.
template <class Build, class Reference>
void compare(DType dt, int steps, double tol, Build build, Reference reference) {
  std::mt19937 rng(7);
  Problem pr;
  std::vector<SharedVar> params;
  std::vector<Var> grads;
  std::vector<Vec> ref_params;
  for (std::size_t i = 0; i < pr.shapes.size(); ++i) {
    ref_params.push_back(random_vec(pr.size(i), rng));
    params.push_back(shared(Tensor::from(ref_params.back(), pr.shapes[i], dt), "p" + std::to_string(i)));
    grads.push_back(input(dt, pr.shapes[i], "g" + std::to_string(i)));
  }
  const Updates updates = build(params, grads);
  Function step = compile({grads[0], grads[1]}, {}, Mode::fast_run(), updates);
  for (int s = 1; s <= steps; ++s) {
    std::vector<Vec> g{random_vec(pr.size(0), rng), random_vec(pr.size(1), rng)};
    step({Tensor::from(g[0], pr.shapes[0], dt), Tensor::from(g[1], pr.shapes[1], dt)});
    for (std::size_t i = 0; i < ref_params.size(); ++i) reference(i, s, ref_params[i], g[i]);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Vec got = params[i].get_value().to_vector();
      double err = 0;
      for (std::size_t j = 0; j < got.size(); ++j) err = std::max(err, std::abs(got[j] - ref_params[i][j]));
      INFO("step " << s << " param " << i);
      CHECK(err <= tol);
    }
  }
}

}  // namespace

TEST_CASE("sgd: plain, momentum, Nesterov and weight decay follow torch.optim.SGD", "[ops][updates]") {
  const SgdOptions cases[] = {{0.1, 0, false, 0}, {0.05, 0.9, false, 0}, {0.05, 0.9, true, 0},
                              {0.1, 0, false, 0.01}, {0.02, 0.5, true, 0.1}};
  for (const SgdOptions& o : cases) {
    INFO("lr " << o.lr << " momentum " << o.momentum << " nesterov " << o.nesterov << " wd " << o.weight_decay);
    for (DType dt : {DType::float64, DType::float32}) {
      std::vector<Vec> buf(2);
      compare(dt, 5, dt == DType::float64 ? 1e-12 : 1e-5,
              [&](const std::vector<SharedVar>& p, const std::vector<Var>& g) { return sgd(p, g, o); },
              [&](std::size_t i, int, Vec& p, const Vec& g) {
                if (buf[i].empty()) buf[i].assign(p.size(), 0.0);
                for (std::size_t j = 0; j < p.size(); ++j) {
                  double d = g[j] + o.weight_decay * p[j];
                  if (o.momentum != 0) {
                    buf[i][j] = o.momentum * buf[i][j] + d;
                    d = o.nesterov ? d + o.momentum * buf[i][j] : buf[i][j];
                  }
                  p[j] -= o.lr * d;
                }
              });
    }
  }
}

TEST_CASE("adam: follows torch.optim.Adam (bias corrections, weight decay)", "[ops][updates]") {
  const AdamOptions cases[] = {{}, {0.01, 0.8, 0.99, 1e-6, 0}, {0.003, 0.9, 0.999, 1e-8, 0.05}, {0.01, 0, 0.5, 1e-3, 0}};
  for (const AdamOptions& o : cases) {
    INFO("lr " << o.lr << " betas " << o.beta1 << " " << o.beta2 << " eps " << o.eps << " wd " << o.weight_decay);
    for (DType dt : {DType::float64, DType::float32}) {
      std::vector<Vec> m(2), v(2);
      compare(dt, 6, dt == DType::float64 ? 1e-12 : 2e-6,
              [&](const std::vector<SharedVar>& p, const std::vector<Var>& g) { return adam(p, g, o); },
              [&](std::size_t i, int t, Vec& p, const Vec& g) {
                if (m[i].empty()) {
                  m[i].assign(p.size(), 0.0);
                  v[i].assign(p.size(), 0.0);
                }
                const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
                for (std::size_t j = 0; j < p.size(); ++j) {
                  const double d = g[j] + o.weight_decay * p[j];
                  m[i][j] = o.beta1 * m[i][j] + (1 - o.beta1) * d;
                  v[i][j] = o.beta2 * v[i][j] + (1 - o.beta2) * d * d;
                  p[j] -= o.lr / bc1 * (m[i][j] / (std::sqrt(v[i][j]) / std::sqrt(bc2) + o.eps));
                }
              });
    }
  }
}

TEST_CASE("sgd/adam: the optimizer state is shared, named and zero-initialised", "[ops][updates]") {
  SharedVar w = shared(Tensor::from({1, 2}, {2}), "w");
  Var g = input(DType::float32, {2}, "g");
  const Updates s = sgd({w}, {g}, {.lr = 0.5, .momentum = 0.5});
  REQUIRE(s.size() == 2);
  CHECK(s[0].first.name() == "w.momentum_buffer");
  CHECK(s[0].first.get_value().to_vector() == Vec{0, 0});
  CHECK(s[1].first.same(w));
  Function f = compile({g}, {}, Mode::fast_run(), s);
  f({Tensor::from({1, 1}, {2})});
  f({Tensor::from({1, 1}, {2})});
  CHECK(s[0].first.get_value().to_vector() == Vec{1.5, 1.5});  // 0.5 * 1 + 1
  CHECK(w.get_value().to_vector() == Vec{1 - 0.5 - 0.75, 2 - 0.5 - 0.75});

  const Updates a = adam({w}, {g});
  REQUIRE(a.size() == 4);
  CHECK(a[0].first.name() == "adam.step");
  CHECK(a[0].first.dtype() == DType::float64);
  CHECK(a[1].first.name() == "w.exp_avg");
  CHECK(a[2].first.name() == "w.exp_avg_sq");
  Function fa = compile({g}, {}, Mode::fast_run(), a);
  fa({Tensor::from({1, 1}, {2})});
  fa({Tensor::from({1, 1}, {2})});
  CHECK(a[0].first.get_value().get(0) == 2);
  CHECK(sgd({}, {}, {.lr = 1}).empty());
  CHECK(adam({}, {}).empty());
}

TEST_CASE("sgd/adam: bad options and arguments name the builder, the argument and the value", "[ops][updates]") {
  SharedVar w = shared(Tensor::from({1, 2}, {2}), "w");
  SharedVar i = shared(Tensor::from({1, 2}, {2}, DType::int32), "i");
  Var g = input(DType::float32, {2}, "g");
  CHECK_THROWS_AS(sgd({w}, {g}, {}), ValueError);  // lr is required
  CHECK_THROWS_WITH(sgd({w}, {g}, {.lr = -1}), Catch::Contains("sgd") && Catch::Contains("lr = -1"));
  CHECK_THROWS_AS(sgd({w}, {g}, {.lr = NAN}), ValueError);
  CHECK_THROWS_WITH(sgd({w}, {g}, {.lr = 1, .momentum = 1}), Catch::Contains("momentum = 1"));
  CHECK_THROWS_AS(sgd({w}, {g}, {.lr = 1, .momentum = -0.1}), ValueError);
  CHECK_THROWS_WITH(sgd({w}, {g}, {.lr = 1, .nesterov = true}), Catch::Contains("nesterov"));
  CHECK_THROWS_WITH(sgd({w}, {g}, {.lr = 1, .weight_decay = -1}), Catch::Contains("weight_decay = -1"));
  CHECK_THROWS_WITH(sgd({w, w}, {g}, {.lr = 1}), Catch::Contains("2 parameter(s) but 1 gradient(s)"));
  CHECK_THROWS_WITH(sgd({w, w}, {g, g}, {.lr = 1}), Catch::Contains("params[1]") && Catch::Contains("params[0]"));
  CHECK_THROWS_AS(sgd({w}, {cast(g, DType::float64)}, {.lr = 1}), TypeError);
  CHECK_THROWS_WITH(sgd({w}, {cast(g, DType::float64)}, {.lr = 1}),
                    Catch::Contains("'w'") && Catch::Contains("float64(2,)") && Catch::Contains("float32(2,)"));
  CHECK_THROWS_AS(sgd({w}, {reshape(g, {1, 2})}, {.lr = 1}), ShapeError);
  CHECK_THROWS_AS(sgd({w}, {Var()}, {.lr = 1}), ValueError);
  CHECK_THROWS_AS(sgd({SharedVar()}, {g}, {.lr = 1}), ValueError);
  CHECK_THROWS_AS(sgd({i}, {cast(g, DType::int32)}, {.lr = 1}), TypeError);
  CHECK_THROWS_WITH(adam({w}, {g}, {.lr = 0}), Catch::Contains("adam") && Catch::Contains("lr = 0"));
  CHECK_THROWS_WITH(adam({w}, {g}, {.beta1 = 1}), Catch::Contains("beta1 = 1"));
  CHECK_THROWS_WITH(adam({w}, {g}, {.beta2 = -0.5}), Catch::Contains("beta2 = -0.5"));
  CHECK_THROWS_WITH(adam({w}, {g}, {.eps = 0}), Catch::Contains("eps = 0"));
  CHECK_THROWS_WITH(adam({w}, {g}, {.weight_decay = INFINITY}), Catch::Contains("weight_decay = inf"));
  CHECK_THROWS_WITH(adam({w}, {g, g}), Catch::Contains("1 parameter(s) but 2 gradient(s)"));
}
