// categorical_crossentropy(softmax(z), y) takes the log as log_softmax(z): finite and exact
// where a probability underflows to 0, for class-index and one-hot targets, with gradients.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>

#include <cmath>

using namespace convgraph;

TEST_CASE("crossentropy of a softmax stays finite where a probability underflows", "[ops][softmax]") {
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    Var z = input(t, {2, 3}, "z");
    Var idx = input(DType::int64, {2}, "idx");
    Var onehot = input(t, {2, 3}, "onehot");
    Var by_index = mean(categorical_crossentropy(softmax(z), idx));
    Var by_onehot = mean(categorical_crossentropy(softmax(z), onehot));
    const std::vector<Var> g = grad(by_index, std::vector<Var>{z});
    Function f = compile({z, idx, onehot}, {by_index, by_onehot, g[0]});
    // Row 0: class 2 is e^-200 less likely than class 0 (exp underflows in float32 and
    // float64 alike); row 1: an ordinary row.
    Tensor zv(t, {2, 3}), iv(DType::int64, {2}), ov = Tensor::zeros(t, {2, 3});
    const double rows[2][3] = {{100, 0, -100}, {0.5, -0.25, 1.0}};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) zv.set(r * 3 + c, rows[r][c]);
    iv.set(0, 2);
    iv.set(1, 1);
    ov.set(2, 1);
    ov.set(4, 1);
    const auto out = f({zv, iv, ov});
    // Exact: -log_softmax = logsumexp(row) - z[target].
    auto nll = [&](int r, int c) {
      const double m = std::max({rows[r][0], rows[r][1], rows[r][2]});
      double s = 0;
      for (double v : rows[r]) s += std::exp(v - m);
      return m + std::log(s) - rows[r][c];
    };
    const double want = 0.5 * (nll(0, 2) + nll(1, 1));
    CHECK(std::isfinite(out[0].get(0)));
    CHECK(out[0].get(0) == Approx(want).epsilon(1e-6));
    CHECK(out[1].get(0) == Approx(want).epsilon(1e-6));
    // d/dz of the mean: (softmax(z) - onehot) / 2, finite everywhere.
    CHECK(out[2].get(0) == Approx(0.5).epsilon(1e-6));
    CHECK(out[2].get(2) == Approx(-0.5).epsilon(1e-6));
    for (std::int64_t i = 0; i < 6; ++i) CHECK(std::isfinite(out[2].get(i)));
  }
}
