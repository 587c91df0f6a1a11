// The unary ops added as rows of ops/elementwise_table.hpp (softplus, gelu, leaky_relu,
// elu, log1p, expm1, square, clip): forward values against plain double references,
// finite-difference gradients, fusion (fused results bit-equal to unfused ones, special
// values included), parameters (carried in the op, compared by CSE, printed) and bad
// inputs. A new row gets one entry in `rows()`.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

using namespace convgraph;
using Catch::Contains;

namespace {

struct Row {
  const char* name;
  std::function<Var(const Var&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // a range with no kink inside a finite-difference step, mostly
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      {"softplus", [](const Var& v) { return softplus(v); },
       [](double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))); }, -6, 6},
      {"gelu", [](const Var& v) { return gelu(v); },
       [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }, -4, 4},
      {"leaky_relu+", [](const Var& v) { return leaky_relu(v, 0.2); }, [](double v) { return v > 0 ? v : 0.2 * v; }, 0.1, 3},
      {"leaky_relu-", [](const Var& v) { return leaky_relu(v, 0.2); }, [](double v) { return v > 0 ? v : 0.2 * v; }, -3, -0.1},
      {"leaky_relu default", [](const Var& v) { return leaky_relu(v); }, [](double v) { return v > 0 ? v : 0.01 * v; }, -3, -0.1},
      {"elu+", [](const Var& v) { return elu(v, 1.5); }, [](double v) { return v > 0 ? v : 1.5 * std::expm1(v); }, 0.1, 3},
      {"elu-", [](const Var& v) { return elu(v, 1.5); }, [](double v) { return v > 0 ? v : 1.5 * std::expm1(v); }, -3, -0.1},
      {"log1p", [](const Var& v) { return log1p(v); }, [](double v) { return std::log1p(v); }, -0.9, 3},
      {"expm1", [](const Var& v) { return expm1(v); }, [](double v) { return std::expm1(v); }, -3, 3},
      {"square", [](const Var& v) { return square(v); }, [](double v) { return v * v; }, -3, 3},
      {"clip inside", [](const Var& v) { return clip(v, -1, 2); }, [](double v) { return std::clamp(v, -1.0, 2.0); }, -0.9, 1.9},
      {"clip below", [](const Var& v) { return clip(v, -1, 2) * v; }, [](double v) { return -v; }, -3, -1.1},
      {"clip above", [](const Var& v) { return clip(v, -1, 2) * v; }, [](double v) { return 2 * v; }, 2.1, 4},
  };
  return r;
}

Tensor uniform(DType t, Shape s, double lo, double hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor x(t, std::move(s));
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, u(rng));
  return x;
}

int count_ops(const Function& f, const std::string& name = {}) {
  int n = 0;
  for (const auto& v : f.graph().toposort()) n += v.op() && (name.empty() || v.op()->name() == name) ? 1 : 0;
  return n;
}

// Bit-equal, NaN matching any NaN (see tests/optimizer/test_fusion.cpp).
void check_identical(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector(), vb = b.to_vector();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const bool same = std::isnan(va[i]) ? std::isnan(vb[i]) : std::memcmp(&va[i], &vb[i], sizeof(double)) == 0;
    if (!same && bad++ == 0) FAIL_CHECK("element " << i << ": fused " << va[i] << " vs unfused " << vb[i]);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("unary rows: forward values match double references in float64 and float32", "[ops][math][unary]") {
  for (const auto& r : rows()) {
    INFO(r.name);
    const Tensor x = uniform(DType::float64, {5, 7}, r.lo, r.hi, 3);
    Var in = input(DType::float64, {5, 7});
    const Tensor y = compile({in}, {r.op(in)})({x})[0];
    for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(y.get(i) == Approx(r.ref(x.get(i))).epsilon(1e-12).margin(1e-300));
    Var in32 = input(DType::float32, {5, 7});
    const Tensor y32 = compile({in32}, {r.op(in32)})({x.astype(DType::float32)})[0];
    for (std::int64_t i = 0; i < x.numel(); ++i)
      CHECK(y32.get(i) == Approx(r.ref(static_cast<float>(x.get(i)))).epsilon(1e-5).margin(1e-6));
  }
  // Accuracy where the naive formulas lose it.
  Var x = input(DType::float64, {4});
  const Tensor big = Tensor::from({800, -800, 1e-20, -1e-20}, {4}, DType::float64);
  const Tensor sp = compile({x}, {softplus(x)})({big})[0];
  CHECK(sp.get(0) == 800);
  CHECK(sp.get(1) == 0);
  const Tensor l1p = compile({x}, {log1p(x)})({big.astype(DType::float64)})[0];
  CHECK(l1p.get(2) == 1e-20);
  const Tensor em1 = compile({x}, {expm1(x)})({big})[0];
  CHECK(em1.get(3) == -1e-20);
}

TEST_CASE("unary rows: gradients pass verify_grad", "[ops][math][unary][grad]") {
  for (const auto& r : rows()) {
    INFO(r.name);
    const Tensor x = uniform(DType::float64, {3, 4}, r.lo, r.hi, 11);
    CHECK_NOTHROW(verify_grad([&](const std::vector<Var>& v) { return r.op(v[0]); }, {x}));
  }
  // Second order through the new rows' gradients.
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& v) { return grad(sum(gelu(v[0]) * softplus(v[0])), v[0]); },
                            {uniform(DType::float64, {6}, -2, 2, 12)}));
  // clip passes no gradient outside [lo, hi]; leaky_relu scales it by alpha below 0.
  Var x = input(DType::float64, {4});
  const Tensor pts = Tensor::from({-3, -0.5, 0.5, 3}, {4}, DType::float64);
  CHECK(compile({x}, {grad(sum(clip(x, -1, 1) * 2.0), x)})({pts})[0].to_vector() == std::vector<double>{0, 2, 2, 0});
  CHECK(compile({x}, {grad(sum(leaky_relu(x, 0.25)), x)})({pts})[0].to_vector() ==
        std::vector<double>{0.25, 0.25, 1, 1});
}

TEST_CASE("unary rows: fused chains equal the unfused ops bit for bit", "[ops][math][unary][fusion]") {
  const Mode unfused = Mode::fast_run().excluding("fusion");
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> special{0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 20, -20, 90, -90, 800, -800, inf, -inf, nan, -1, 1};
  for (DType t : {DType::float32, DType::float64}) {
    for (const auto& r : rows()) {
      INFO(r.name << " " << dtype_name(t));
      Var x = input(t, {kUnknown}, "x");
      Var b = input(t, {kUnknown}, "b");
      // Two elementwise ops around the row, so each one lands inside a fused program.
      Var y = r.op(x * 1.5 + b) - b;
      Function f = compile({x, b}, {y});
      Function g = compile({x, b}, {y}, unfused);
      CHECK(count_ops(f, "fused") == 1);
      CHECK(count_ops(f) == 1);
      const std::int64_t n = 2049;  // several blocks, an odd tail
      const std::vector<Tensor> args{uniform(t, {n}, r.lo, r.hi, 21), uniform(t, {n}, -0.1, 0.1, 22)};
      check_identical(f(args)[0], g(args)[0]);
      const auto s = static_cast<std::int64_t>(special.size());
      const std::vector<Tensor> sargs{Tensor::from(special, {s}, t), Tensor::full(t, {s}, 0)};
      check_identical(f(sargs)[0], g(sargs)[0]);
    }
  }
}

TEST_CASE("unary rows: parameters are part of the op and of the fused program", "[ops][math][unary]") {
  Var x = input(DType::float32, {8}, "x");
  Var a = leaky_relu(x, 0.1);
  CHECK(a.op()->name() == "leaky_relu");
  CHECK(a.op()->params() == "alpha=0.1");
  CHECK(clip(x, 0, 6).op()->params() == "lo=0,hi=6");
  CHECK(elu(x).op()->params() == "alpha=1");
  CHECK(softplus(x).op()->params().empty());
  // Equal parameters merge, different ones do not.
  Function f = compile({x}, {leaky_relu(x, 0.1) + leaky_relu(x, 0.1), leaky_relu(x, 0.2)},
                       Mode::fast_run().excluding("fusion"));
  CHECK(count_ops(f, "leaky_relu") == 2);
  Function g = compile({x}, {clip(square(x), 0, 6) * 2.0});
  REQUIRE(count_ops(g, "fused") == 1);
  CHECK_THAT(g.describe() + debugprint(g.graph()), Contains("clip(square(i0),0,6)*2"));
}

TEST_CASE("unary rows: dtypes and bad parameters raise errors naming op, argument and values", "[ops][math][unary][errors]") {
  Var f = input(DType::float32, {3}, "f");
  Var i = input(DType::int32, {3}, "i");
  Var bl = f < f;
  // Float-only rows reject integers; numeric rows take them.
  for (auto fn : {+[](const Var& v) { return softplus(v); }, +[](const Var& v) { return gelu(v); },
                  +[](const Var& v) { return leaky_relu(v); }, +[](const Var& v) { return elu(v); },
                  +[](const Var& v) { return log1p(v); }, +[](const Var& v) { return expm1(v); }}) {
    CHECK_THROWS_AS(fn(i), TypeError);
    CHECK_THROWS_WITH(fn(i), Contains("int32") && Contains("float"));
  }
  CHECK_THROWS_WITH(leaky_relu(i, 0.1), Contains("leaky_relu"));
  CHECK_THROWS_AS(square(bl), TypeError);
  CHECK_THROWS_AS(clip(bl, 0, 1), TypeError);
  // Bounds: lo <= hi, finite, whole numbers for integer tensors.
  CHECK_THROWS_AS(clip(f, 3, 1), ValueError);
  CHECK_THROWS_WITH(clip(f, 3, 1), Contains("clip") && Contains("lo=3") && Contains("hi=1"));
  CHECK_THROWS_WITH(clip(f, std::nan(""), 1), Contains("clip") && Contains("lo") && Contains("nan"));
  CHECK_THROWS_WITH(leaky_relu(f, std::numeric_limits<double>::infinity()), Contains("alpha") && Contains("inf"));
  CHECK_THROWS_AS(elu(f, std::nan("")), ValueError);
  CHECK_THROWS_WITH(clip(i, 0.5, 2), Contains("clip") && Contains("lo=0.5") && Contains("int32"));
  CHECK_THROWS_AS(softplus(Var()), ValueError);
  // Integer kernels of the numeric rows.
  Function g = compile({i}, {square(i), clip(i, -1, 2)});
  const auto out = g({Tensor::from({-3, 1, 5}, {3}, DType::int32)});
  CHECK(out[0].to_vector() == std::vector<double>{9, 1, 25});
  CHECK(out[1].to_vector() == std::vector<double>{-1, 1, 2});
  CHECK(out[0].dtype() == DType::int32);
}
