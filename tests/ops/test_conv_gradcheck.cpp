// Finite-difference gradient checks (verify_grad, float64 central differences) of the three
// abstract ops on a sweep of small cases, plus true second order: the gradient of a
// gradient, which differentiates GradInputs and GradWeights themselves. And the adjoint
// identity <conv(x, w), g> = <x, GI(w, g)> = <w, GW(x, g)> on the compiled graph.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "convgraph/ops/autodiff.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/runtime/gradcheck.hpp"
#include "convgraph/ops/math.hpp"
#include "ops/conv_numeric_util.hpp"
#include "support/child_process.hpp"  // sanitized_build

using namespace convgraph;
using namespace convgraph::conv_test;
using Pairs = std::vector<std::pair<i64, i64>>;

namespace {

struct GradCase {
  std::string name;
  Shp x, w;
  ConvParams p;
};

GradCase gcase(std::string name, Shp x, Shp w, BorderMode border, Shp stride, Shp dil, bool flip, i64 groups) {
  GradCase c{std::move(name), std::move(x), std::move(w), {}};
  c.p.ndim = static_cast<int>(c.x.size()) - 2;
  c.p.border = std::move(border);
  c.p.stride = std::move(stride);
  c.p.dilation = std::move(dil);
  c.p.filter_flip = flip;
  c.p.groups = groups;
  return c;
}

// Small geometries covering 1D/2D/3D, every border form, strides, dilation, groups and flip.
std::vector<GradCase> grad_cases() {
  return {
      gcase("1d full s2", {2, 2, 7}, {3, 2, 3}, "full", {2}, {1}, true, 1),
      gcase("1d asym d2 g2", {1, 4, 9}, {4, 2, 2}, Pairs{{2, 1}}, {1}, {2}, false, 2),
      gcase("2d valid s(2,1)", {2, 2, 5, 6}, {3, 2, 3, 2}, "valid", {2, 1}, {1, 1}, true, 1),
      gcase("2d half depthwise d(2,1)", {1, 4, 6, 5}, {4, 1, 3, 3}, "half", {1, 1}, {2, 1}, false, 4),
      gcase("2d per-axis s(3,2)", {1, 2, 5, 4}, {2, 2, 2, 2}, BorderMode({1, 2}), {3, 2}, {1, 1}, true, 1),
      gcase("2d kernel>input full", {1, 1, 3, 3}, {2, 1, 4, 4}, "full", {1, 1}, {1, 1}, false, 1),
      gcase("2d int pad s3 d2", {1, 2, 7, 6}, {2, 2, 2, 3}, 2, {3, 3}, {2, 1}, true, 1),
      gcase("3d half s(2,1,1)", {1, 2, 4, 4, 3}, {2, 2, 2, 3, 2}, "half", {2, 1, 1}, {1, 1, 1}, true, 1),
      gcase("3d asym g2 d(1,1,2)", {1, 2, 3, 4, 5}, {2, 1, 2, 2, 2}, Pairs{{1, 0}, {0, 1}, {2, 1}}, {1, 2, 1},
            {1, 1, 2}, false, 2),
  };
}

// A generated sweep of tiny geometries: 1D/2D/3D x six border forms x strides {1, 2, 3,
// mixed} x dilation {1, 2}; flip and groups {1, 2} rotate with the index, and odd and even
// kernels alternate. Geometries without an output are skipped.
std::vector<GradCase> generated_grad_cases() {
  std::vector<GradCase> out;
  const Shp in[3] = {{7}, {5, 6}, {4, 3, 5}};
  const Shp kodd[3] = {{3}, {3, 3}, {3, 1, 3}}, keven[3] = {{2}, {2, 3}, {2, 2, 2}};
  const Shp strides[3][4] = {{{1}, {2}, {3}, {2}},
                             {{1, 1}, {2, 2}, {3, 3}, {1, 3}},
                             {{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {2, 1, 3}}};
  const Shp dils[3][2] = {{{1}, {2}}, {{1, 1}, {2, 2}}, {{1, 1, 1}, {2, 2, 2}}};
  const std::vector<BorderMode> borders[3] = {
      {"valid", "full", "half", 1, BorderMode({2}), Pairs{{2, 0}}},
      {"valid", "full", "half", 1, BorderMode({0, 2}), Pairs{{2, 0}, {1, 2}}},
      {"valid", "full", "half", 1, BorderMode({1, 0, 2}), Pairs{{1, 0}, {0, 2}, {2, 1}}}};
  int index = 0;
  for (int nd = 1; nd <= 3; ++nd) {
    const auto a = static_cast<std::size_t>(nd - 1);
    for (const BorderMode& border : borders[a])
      for (const Shp& stride : strides[a])
        for (const Shp& dil : dils[a]) {
          const bool flip = index % 2 == 0;
          const i64 groups = (index / 2) % 2 == 0 ? 1 : 2;
          const Shp& k = index % 3 == 0 ? keven[a] : kodd[a];
          ++index;
          Shp x{1 + index % 2, 2}, w{2, 2 / groups};
          x.insert(x.end(), in[a].begin(), in[a].end());
          w.insert(w.end(), k.begin(), k.end());
          GradCase c = gcase("sweep#" + std::to_string(index), x, w, border, stride, dil, flip, groups);
          const Shp o = get_conv_output_shape(x, w, border, stride, dil);
          bool ok = true;
          for (std::size_t i = 2; i < o.size(); ++i) ok = ok && o[i] >= 1;
          if (ok) out.push_back(std::move(c));
        }
  }
  return out;
}

Shp y_shape(const GradCase& c) {
  return ConvProblem::make(ConvDirection::forward, c.p, c.x, c.w, DType::float64).y_shape();
}

VerifyGradOptions grad_options() {
  VerifyGradOptions o;
  o.eps = 1e-5;  // the ops are (bi)linear: central differences are exact up to rounding
  o.abs_tol = 1e-7;
  o.rel_tol = 1e-6;
  return o;
}

}  // namespace

// verify_grad of the three ops on one geometry.
void check_first_order(const GradCase& c, std::uint64_t seed) {
  INFO(c.name << " x" << shape_to_string(c.x) << " w" << shape_to_string(c.w) << " " << c.p.to_string());
  const Shp ys = y_shape(c);
  const Tensor x = random_tensor(c.x, seed), w = random_tensor(c.w, seed + 1), gy = random_tensor(ys, seed + 2);
  CHECK_NOTHROW(verify_grad(
      [&](const std::vector<Var>& in) { return build_conv(ConvDirection::forward, c.p, in[0], in[1], {}); }, {x, w},
      grad_options()));
  CHECK_NOTHROW(verify_grad(
      [&](const std::vector<Var>& in) { return build_conv(ConvDirection::grad_inputs, c.p, in[0], in[1], c.x); },
      {w, gy}, grad_options()));
  CHECK_NOTHROW(verify_grad(
      [&](const std::vector<Var>& in) { return build_conv(ConvDirection::grad_weights, c.p, in[0], in[1], c.w); },
      {x, gy}, grad_options()));
}

TEST_CASE("verify_grad: forward, GradInputs and GradWeights over a parameter sweep", "[conv][numeric][grad]") {
  auto cases = grad_cases();
  const auto more = generated_grad_cases();
  cases.insert(cases.end(), more.begin(), more.end());
  std::uint64_t seed = 100;
  // Every geometry; every 2nd under the sanitizers (about 30x slower).
  const std::size_t step = test::sanitized_build() ? 2 : 1;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < cases.size(); i += step, ++checked) check_first_order(cases[i], seed += 3);
  WARN("verify_grad first order: " << checked << " geometries x 3 ops (fwd, bwd_data, bwd_filter) = "
                                   << 3 * checked << " checks, eps 1e-5, abs tol 1e-7, rel tol 1e-6");
}

TEST_CASE("verify_grad can fail: a wrong gradient is caught", "[conv][numeric][grad]") {
  // Guard against a vacuous check: with zero tolerance, rounding alone must trip it.
  const GradCase c = grad_cases()[2];
  VerifyGradOptions strict = grad_options();
  strict.abs_tol = 0;
  strict.rel_tol = 0;
  strict.eps = 1e-1;
  const auto fn = [&](const std::vector<Var>& in) {
    const Var y = build_conv(ConvDirection::forward, c.p, in[0], in[1], {});
    return y * y * y;  // cubic: central differences with a large step are visibly off
  };
  CHECK_THROWS_AS(verify_grad(fn, {random_tensor(c.x, 1), random_tensor(c.w, 2)}, strict), MismatchError);
}

TEST_CASE("verify_grad: second order (gradients of gradients)", "[conv][numeric][grad]") {
  auto cases = grad_cases();
  const auto more = generated_grad_cases();
  for (std::size_t i = 0; i < more.size(); i += 4) cases.push_back(more[i]);
  int checks = 0;
  for (const GradCase& c : cases) {
    INFO(c.name << " x" << shape_to_string(c.x) << " w" << shape_to_string(c.w) << " " << c.p.to_string());
    const Shp ys = y_shape(c);
    const std::uint64_t seed = 300 + static_cast<std::uint64_t>(checks);
    const Tensor x = random_tensor(c.x, seed), w = random_tensor(c.w, seed + 1);
    const Tensor r = random_tensor(ys, seed + 2);
    // cost(x, w) = sum(r * conv(x, w)^2): its gradients are GI/GW nodes whose inputs
    // depend on x and w, so differentiating them again runs every grad() rule.
    for (int which = 0; which < 2; ++which) {
      CHECK_NOTHROW(verify_grad(
          [&](const std::vector<Var>& in) {
            const Var y = build_conv(ConvDirection::forward, c.p, in[0], in[1], {});
            const auto g = grad(sum(constant(r) * y * y), {in[0], in[1]});
            return g[static_cast<std::size_t>(which)];
          },
          {x, w}, grad_options()));
      ++checks;
    }
  }
  WARN("verify_grad second order: " << cases.size() << " geometries x d/dx, d/dw of the gradient = " << checks
                                    << " checks");
}

TEST_CASE("adjoint identity <conv(x,w), g> = <x, GI(w,g)> = <w, GW(x,g)>", "[conv][numeric][grad]") {
  double worst = 0;
  for (const GradCase& c : grad_cases()) {
    const Shp ys = y_shape(c);
    const Var x = input(DType::float64, c.x, "x"), w = input(DType::float64, c.w, "w");
    const Var g = input(DType::float64, ys, "g");
    const Var y = build_conv(ConvDirection::forward, c.p, x, w, {});
    const Var dx = build_conv(ConvDirection::grad_inputs, c.p, w, g, c.x);
    const Var dw = build_conv(ConvDirection::grad_weights, c.p, x, g, c.w);
    const Function f = compile({x, w, g}, {sum(y * g), sum(x * dx), sum(w * dw)});
    const auto out = f({random_tensor(c.x, 7), random_tensor(c.w, 8), random_tensor(ys, 9)});
    const double a = out[0].get(0), b = out[1].get(0), d = out[2].get(0);
    const double scale = std::max({std::abs(a), 1.0});
    CHECK(std::abs(a - b) / scale < 1e-12);
    CHECK(std::abs(a - d) / scale < 1e-12);
    worst = std::max({worst, std::abs(a - b) / scale, std::abs(a - d) / scale});
  }
  WARN("adjoint identity: " << grad_cases().size() << " geometries, max rel error " << worst);
}
