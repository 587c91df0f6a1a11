// Abstract convolutions compiled through compile() (conv lowering picks the usable
// ConvAlgorithm the cost model estimates fastest) and compared with the float64 reference:
//  - the issue-3 sweep (tests/support conv_sweep_cases: 1D/2D/3D x every border form x
//    strides {1,2,3,mixed} x dilation {1,2} x flip x groups {1,2,C} x odd/even/1x1 kernels,
//    kernels larger than the input in full mode, ...), every direction;
//  - Theano's test matrix for the pairs with non-zero dims (SEMANTICS 4.1: BaseTestConv2d/3d
//    in full, grouped, asymmetric padding) plus test_corr / test_dnn picks (4.3, 4.4);
//  - the "no implementation" errors.
// Error measure: max |got - ref| / max(max |ref|, 1). Bounds: float64 1e-11, float32 1e-4
// (Winograd, the loosest fast_run algorithm, is measured below 5e-5 on unit-range data).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "convgraph/core/error.hpp"
#include "ops/conv_numeric_util.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "convgraph/optimizer/conv_lowering.hpp"

using namespace convgraph;
using namespace convgraph::conv_test;
using testing::ConvCase;
using testing::make_conv_case;
using Pairs = std::vector<std::pair<i64, i64>>;

namespace {

constexpr double kTol64 = 1e-11;
constexpr double kTol32 = 1e-4;

ConvCase make_case(const std::string& tag, Shp x, Shp w, BorderMode border, Shp stride, Shp dil, bool flip,
                   i64 groups = 1) {
  ConvCase c = make_conv_case("", std::move(x), std::move(w), std::move(border), std::move(stride), std::move(dil),
                              flip, groups);
  c.name = tag + " x" + shape_to_string(c.x_shape) + " w" + shape_to_string(c.w_shape) + " " +
           c.params.normalized("case").to_string();
  return c;
}

// Runs every direction of every `every`-th case of `cases` from `first` in `dtype`, checks
// the bound, and reports the tally.
Tally run_all(const std::vector<ConvCase>& cases, DType dtype, const std::string& what, int every = 1,
              const Mode& mode = Mode::fast_run(), std::size_t first = 0) {
  const double tol = dtype == DType::float64 ? kTol64 : kTol32;
  Tally t;
  std::uint64_t seed = 1;
  for (std::size_t i = first; i < cases.size(); i += static_cast<std::size_t>(every)) {
    const ConvCase& c = cases[i];
    for (ConvDirection dir : testing::kAllDirections) {
      RunError e;
      try {
        e = run_against_reference(c, dir, dtype, mode, seed++);
      } catch (const Error& ex) {
        FAIL_CHECK(c.name << " " << direction_name(dir) << ": " << ex.what());
        continue;
      }
      t.add(dir, e.rel, c.name);
      if (!(e.rel <= tol)) FAIL_CHECK(c.name << " " << direction_name(dir) << ": rel error " << e.rel << "\n" << e.algo);
    }
  }
  WARN(t.summary(what + " " + std::string(dtype_name(dtype))));
  return t;
}

}  // namespace

TEST_CASE("conv sweep through compile(): float32, every case and direction", "[conv][numeric][sweep]") {
  // Every case; every 4th under the sanitizers (about 30x slower; the backends' sweeps run
  // every algorithm there too); float64 below takes the cases halfway between these.
  const auto cases = testing::conv_sweep_cases();
  const int every = test::sanitized_build() ? 4 : 1;
  const Tally t = run_all(cases, DType::float32, "issue-3 sweep", every);
  CHECK(t.combos[0] == static_cast<long>((cases.size() + every - 1) / every));
}

TEST_CASE("conv sweep through compile(): float64, every case and direction", "[conv][numeric][sweep]") {
  const bool sanitized = test::sanitized_build();
  run_all(testing::conv_sweep_cases(), DType::float64, "issue-3 sweep", sanitized ? 4 : 1, Mode::fast_run(),
          sanitized ? 2 : 0);
}

TEST_CASE("conv sweep through compile() with conv_gemm excluded (other algorithms lower)",
          "[conv][numeric][sweep]") {
  // With im2col+GEMM excluded the lowering falls through to the direct loops (and Winograd
  // for 3x3 stride-1 forward/bwd_data): every fourth case, float32.
  run_all(testing::conv_sweep_cases(), DType::float32, "issue-3 sweep, every 4th case, conv_gemm excluded", 4,
          Mode::fast_run().excluding("conv_gemm"));
}

TEST_CASE("Theano BaseTestConv2d / BaseTestConv3d matrix and picks", "[conv][numeric][theano]") {
  // Every input/filter pair with non-zero dims x subsample x dilation x border x flip, as
  // Theano's test_all (provide_shape is moot: static shapes are always known here).
  const std::vector<std::pair<Shp, Shp>> pairs2{{{8, 1, 6, 6}, {5, 1, 2, 2}}, {{8, 1, 8, 8}, {4, 1, 3, 3}},
                                                {{2, 1, 7, 7}, {2, 1, 3, 3}}, {{6, 1, 10, 11}, {1, 1, 2, 3}},
                                                {{2, 1, 6, 5}, {4, 1, 1, 3}}, {{1, 5, 9, 9}, {4, 5, 3, 2}}};
  const std::vector<Shp> subsamples2{{1, 1}, {2, 2}, {2, 4}}, dilations2{{1, 1}, {1, 2}, {2, 1}};
  const std::vector<BorderMode> borders2{"valid", "half", "full", BorderMode({0, 0}), BorderMode({1, 1}),
                                         BorderMode({5, 5}), BorderMode({5, 2})};
  std::vector<ConvCase> cases;
  for (const auto& [x, w] : pairs2)
    for (const auto& s : subsamples2)
      for (const auto& d : dilations2)
        for (const auto& border : borders2)
          for (bool flip : {true, false}) {
        const Shp out = get_conv_output_shape(x, w, border, s, d);
        if (out[2] < 1 || out[3] < 1) continue;
        cases.push_back(make_case("theano2d", x, w, border, s, d, flip));
          }
  const std::vector<std::pair<Shp, Shp>> pairs3{{{2, 1, 5, 5, 5}, {2, 1, 2, 2, 2}}, {{1, 2, 7, 5, 6}, {1, 2, 2, 1, 3}}};
  const std::vector<Shp> subsamples3{{1, 1, 1}, {2, 2, 2}, {1, 2, 3}}, dilations3{{1, 1, 1}, {1, 2, 1}, {2, 1, 2}};
  const std::vector<BorderMode> borders3{"valid", "half", "full", BorderMode({0, 0, 0}), BorderMode({2, 2, 3})};
  for (const auto& [x, w] : pairs3)
    for (const auto& border : borders3)
      for (const auto& s : subsamples3)
        for (const auto& d : dilations3)
          for (bool flip : {true, false}) {
          const Shp out = get_conv_output_shape(x, w, border, s, d);
          if (out[2] < 1 || out[3] < 1 || out[4] < 1) continue;
          cases.push_back(make_case("theano3d", x, w, border, s, d, flip));
          }
  // Grouped_conv_noOptim (2-D and 3-D), TestAsymmetricPadding, test_corr subsample/dilation.
  const std::vector<std::tuple<i64, Shp, Shp>> grouped{
      {3, {5, 6, 5, 5}, {6, 2, 3, 3}}, {2, {4, 4, 7, 5}, {6, 2, 5, 3}}, {4, {3, 8, 5, 3}, {4, 2, 3, 3}},
      {4, {2, 4, 7, 7}, {4, 1, 3, 5}}, {3, {2, 6, 5, 5, 5}, {3, 2, 3, 3, 3}}, {2, {1, 4, 7, 5, 7}, {6, 2, 5, 3, 5}},
      {4, {1, 8, 5, 3, 5}, {4, 2, 3, 3, 3}}, {4, {2, 4, 7, 7, 7}, {4, 1, 3, 5, 3}}};
  for (const auto& [g, x, w] : grouped) cases.push_back(make_case("grouped", x, w, "valid", {}, {}, true, g));
  cases.push_back(make_case("asym", {2, 2, 4, 4}, {4, 2, 2, 2}, Pairs{{1, 2}, {2, 1}}, {}, {}, true));
  cases.push_back(make_case("asym", {3, 2, 4, 2}, {2, 2, 4, 2}, Pairs{{1, 1}, {0, 3}}, {}, {}, true));
  cases.push_back(make_case("asym", {3, 3, 5, 3}, {2, 3, 3, 3}, Pairs{{2, 1}, {0, 0}}, {}, {}, false));
  cases.push_back(make_case("corr", {3, 2, 7, 5}, {5, 2, 2, 3}, "half", {2, 1}, {2, 2}, false));
  cases.push_back(make_case("corr", {3, 2, 14, 10}, {5, 2, 2, 3}, "valid", {1, 1}, {3, 1}, true));
  cases.push_back(make_case("corr", {1, 1, 6, 6}, {1, 1, 3, 3}, 1, {3, 3}, {2, 2}, false));
  cases.push_back(make_case("corr", {1, 2, 15, 8}, {3, 2, 12, 1}, "valid", {}, {}, true));
  // 3-D "full" with the kernel larger than the image (test_dnn's bwd cases).
  cases.push_back(make_case("big3d", {6, 2, 2, 2, 2}, {4, 2, 3, 1, 1}, "full", {}, {}, true));
  cases.push_back(make_case("big3d", {6, 2, 2, 2, 2}, {4, 2, 5, 5, 5}, "full", {}, {}, false));
  cases.push_back(make_case("big3d", {6, 2, 2, 2, 2}, {4, 2, 1, 3, 1}, "full", {}, {3, 2, 1}, true));
  const std::string what = "Theano matrix (" + std::to_string(cases.size()) + " cases)";
  const Tally t = run_all(cases, DType::float32, what);
  CHECK(t.combos[1] == static_cast<long>(cases.size()));
  // float64: every case; every 2nd under the sanitizers (about 30x slower).
  run_all(cases, DType::float64, what, test::sanitized_build() ? 2 : 1);
}

TEST_CASE("Theano zero-size pairs: empty batch, zero channels, zero filters", "[conv][numeric][theano]") {
  // Theano's policy: an empty batch or zero filters give an empty output, zero input
  // channels give zeros.
  const std::vector<std::pair<Shp, Shp>> pairs{{{0, 1, 6, 6}, {1, 1, 2, 2}}, {{1, 0, 6, 6}, {1, 0, 2, 2}},
                                               {{1, 1, 6, 6}, {0, 1, 2, 2}}};
  for (const auto& [xs, ws] : pairs) {
    const Var x = input(DType::float32, xs, "x");
    const Var w = input(DType::float32, ws, "w");
    const Var y = conv2d(x, w);
    CHECK(y.shape() == Shp{xs[0], ws[0], 5, 5});
    const Function f = compile({x, w}, {y});
    const Tensor out = f({Tensor::zeros(DType::float32, xs), Tensor::full(DType::float32, ws, 1.0)})[0];
    CHECK(out.shape() == y.shape());
    for (double v : out.to_vector()) CHECK(v == 0.0);
  }
}

TEST_CASE("an abstract node that nothing lowers fails to compile, naming node and tags",
          "[conv][numeric][errors]") {
  const Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  const Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  const Var y = conv2d(x, w, {.border_mode = "half", .name = "stem"});
  try {
    (void)compile({x, w}, {y}, Mode::none());
    FAIL("compile with optimizer=None succeeded");
  } catch (const CompileError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("AbstractConv") && Catch::Contains("stem") && Catch::Contains("conv_gemm"));
  }
  std::string all;
  for (const auto& t : conv_lowering_tags(*as_abstract_conv(y), mode_registry(Mode::fast_run())))
    all += (all.empty() ? "" : ":") + t;
  try {
    (void)compile({x, w}, {y}, Mode::fast_run().excluding(all));
    FAIL("compile with every implementation excluded succeeded");
  } catch (const CompileError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("stem") && Catch::Contains("conv_gemm") && Catch::Contains("conv_direct"));
  }
  // The grad ops name themselves the same way.
  const Var dw = conv2d_grad_wrt_weights(x, input(DType::float32, {2, 4, 8, 8}, "gy"), {4, 3, 3, 3},
                                         {.border_mode = "half", .name = "stem"});
  CHECK_THROWS_WITH(compile({x}, {dw}, Mode::none()), Catch::Contains("gy"));
  try {
    (void)compile({x, dw.inputs()[1]}, {dw}, Mode::none());
    FAIL("compile of a grad node with optimizer=None succeeded");
  } catch (const CompileError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("AbstractConvGradWeights") && Catch::Contains("stem"));
  }
}
