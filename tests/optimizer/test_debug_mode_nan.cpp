// DebugMode on data holding NaN and infinities: NaN must be where the reference has NaN,
// +inf where +inf, -inf where -inf; values elsewhere within the tolerance. Algorithms that
// confine a NaN to the outputs whose window holds it (corrmm, direct) pass; FFT (whole
// image) and Winograd (whole tile) spread it, and the mismatch names node, algorithm and
// element.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "fakes.hpp"

using namespace convgraph;
using Catch::Contains;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Smooth values with a NaN at x[0, 0, 2, 3] and +inf at x[0, 1, 6, 6] (windows apart).
Tensor special_input(DType dtype) {
  Tensor t(dtype, {1, 2, 9, 9});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.01 * static_cast<double>((i * 7) % 23) - 0.1);
  t.set(0 * 81 + 2 * 9 + 3, std::nan(""));
  t.set(1 * 81 + 6 * 9 + 6, kInf);
  return t;
}

/// Strictly positive filter values, so the infinity stays +inf (no inf * 0 = NaN).
Tensor positive_filter(DType dtype) {
  Tensor t(dtype, {3, 2, 3, 3});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.05 + 0.01 * static_cast<double>(i % 5));
  return t;
}

}  // namespace

TEST_CASE("debug mode: compare_conv_results matches NaN and inf by position and sign", "[optimizer][debugmode]") {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> want{1.0f, nan, inf, -inf, -2.0f};
  std::vector<float> got = want;
  ConvCheck c = compare_conv_results(got.data(), want.data(), 5, DType::float32);
  CHECK(c.ok);
  CHECK_FALSE(c.special);
  CHECK(c.scale == 2.0);  // infinities do not make the tolerance infinite
  got[4] += 0.01f;        // 5e-3 relative to 2: too much, inf elsewhere or not
  c = compare_conv_results(got.data(), want.data(), 5, DType::float32);
  CHECK_FALSE(c.ok);
  CHECK(c.index == 4);
  got = want;
  got[0] = nan;  // NaN where the reference has a number
  c = compare_conv_results(got.data(), want.data(), 5, DType::float32);
  CHECK_FALSE(c.ok);
  CHECK(c.special);
  CHECK(c.index == 0);
  CHECK_THAT(c.to_string(), Contains("NaN/inf mismatch at element 0") && Contains("reference 1"));
  got = want;
  got[1] = 3.0f;  // a number where the reference has NaN
  c = compare_conv_results(got.data(), want.data(), 5, DType::float32);
  CHECK_FALSE(c.ok);
  CHECK(c.index == 1);
  got = want;
  got[2] = -inf;  // wrong sign
  CHECK(compare_conv_results(got.data(), want.data(), 5, DType::float32).index == 2);
  CHECK_FALSE(compare_conv_results(got.data(), want.data(), 5, DType::float32).ok);
  got = want;
  got[3] = nan;  // NaN where the reference has -inf
  CHECK_FALSE(compare_conv_results(got.data(), want.data(), 5, DType::float32).ok);
  got = want;
  got[4] = inf;  // inf where the reference has a number
  CHECK(compare_conv_results(got.data(), want.data(), 5, DType::float32).index == 4);
  const std::vector<double> wd{kInf, std::nan(""), 1.0};
  std::vector<double> gd = wd;
  gd[2] += 1e-10;
  CHECK(compare_conv_results(gd.data(), wd.data(), 3, DType::float64).ok);
  gd[2] += 1e-8;
  CHECK_FALSE(compare_conv_results(gd.data(), wd.data(), 3, DType::float64).ok);
}

TEST_CASE("debug mode: NaN and inf inputs pass with algorithms that confine them", "[optimizer][debugmode]") {
  for (DType dtype : {DType::float32, DType::float64}) {
    Var x = input(dtype, {1, 2, 9, 9}, "x");
    Var w = input(dtype, {3, 2, 3, 3}, "w");
    Var y = conv2d(x, w, {.name = "nanconv"});
    // The algorithms are named: with every algorithm allowed the cost model picks by the
    // measured machine, and on some hosts it picks Winograd for this small layer.
    for (const auto& [flags, algo] :
         {std::pair<std::string, std::string>{"optimizer_including=conv_gemm", "cpu.corrmm"},
          {"optimizer_excluding=conv_gemm:conv_fft:conv_winograd", "cpu.direct"}}) {
      INFO(dtype_name(dtype) << " " << flags);
      Function f = compile({x, w}, {y}, Mode::debug_mode().with_flags(flags));
      REQUIRE_THAT(f.describe(), Contains(algo));
      std::vector<Tensor> out;
      REQUIRE_NOTHROW(out = f({special_input(dtype), positive_filter(dtype)}));
      // NaN exactly in the 3x3 outputs whose window holds x[.., 2, 3], +inf in those
      // holding x[.., 6, 6], for each of the 3 filters; finite elsewhere.
      int nans = 0, infs = 0, finite = 0;
      for (std::int64_t k = 0; k < 3; ++k)
        for (std::int64_t i = 0; i < 7; ++i)
          for (std::int64_t j = 0; j < 7; ++j) {
            const double v = out[0].get((k * 7 + i) * 7 + j);
            const bool in_nan = i <= 2 && j >= 1 && j <= 3, in_inf = i >= 4 && j >= 4;
            if (in_nan) nans += std::isnan(v) ? 1 : 0;
            else if (in_inf) infs += v == kInf ? 1 : 0;
            else finite += std::isfinite(v) ? 1 : 0;
          }
      CHECK(nans == 27);
      CHECK(infs == 27);
      CHECK(finite == 3 * 49 - 54);
    }
  }
}

TEST_CASE("debug mode: FFT and Winograd spread a NaN, and the mismatch names node, algorithm and element",
          "[optimizer][debugmode]") {
  Var x = input(DType::float32, {1, 2, 9, 9}, "x");
  Var w = input(DType::float32, {3, 2, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "spread"});
  Tensor xv = special_input(DType::float32);
  xv.set(1 * 81 + 6 * 9 + 6, 0.5);  // the NaN alone
  for (const auto& [flags, algo] : {std::pair<std::string, std::string>{"optimizer_including=conv_fft", "cpu.fft"},
                                    {"optimizer_excluding=conv_gemm:conv_direct", "cpu.winograd"}}) {
    INFO(flags);
    Function f = compile({x, w}, {y}, Mode::debug_mode().with_flags(flags));
    REQUIRE_THAT(f.describe(), Contains(algo));
    // Output element 0 (row 0, columns 0-2) does not see x[0, 0, 2, 3]; both spread the
    // NaN there (FFT over the image, Winograd over its 4x4 output tile).
    CHECK_THROWS_AS(f({xv, positive_filter(DType::float32)}), MismatchError);
    CHECK_THROWS_WITH(f({xv, positive_filter(DType::float32)}),
                      Contains("DebugMode") && Contains("'spread'") && Contains(algo) &&
                          Contains("NaN/inf mismatch at element 0 (got nan, reference"));
    // Without NaN the same algorithm passes the check.
    Tensor clean = xv.clone();
    clean.set(0 * 81 + 2 * 9 + 3, 0.3);
    CHECK_NOTHROW(f({clean, positive_filter(DType::float32)}));
  }
}
