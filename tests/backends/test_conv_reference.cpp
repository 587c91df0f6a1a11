// The oracle itself: hand-computed cases, Theano's worked shape examples (docs/SEMANTICS.md 1.3),
// an independent formulation (explicit zero-padded input, explicitly flipped and dilated
// filter, stride-1 correlation then subsampling; gradients by scattering the same terms),
// and the adjoint identity <conv(x,w), g> = <x, grad_inputs(g,w)> = <w, grad_weights(x,g)>.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>

#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/core/error.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using i64 = std::int64_t;

namespace {

ConvParams params(int ndim, BorderMode border, std::vector<i64> stride = {},
                  std::vector<i64> dil = {}, bool flip = false, i64 groups = 1) {
  ConvParams p;
  p.ndim = ndim;
  p.border = std::move(border);
  p.stride = std::move(stride);
  p.dilation = std::move(dil);
  p.filter_flip = flip;
  p.groups = groups;
  return p;
}

/// Runs the reference in float64 on explicit operand values; returns the written operand.
std::vector<double> run_ref(const ConvProblem& p, ConvOperands ops) {
  reference_conv(p, ConvTensors{ops.x.data(), ops.w.data(), ops.y.data(), {}});
  return output_of(ops, p.direction);
}

// ---- an independent formulation ------------------------------------------------------------

/// Row-major index over a 3-axis box.
struct Box {
  i64 d[3];
  i64 size() const { return d[0] * d[1] * d[2]; }
  i64 at(i64 a, i64 b, i64 c) const { return (a * d[1] + b) * d[2] + c; }
};

/// Theano's perform, restated: pad x explicitly, build the dilated (and, for convolution,
/// reversed) filter explicitly, correlate at stride 1 on the padded input, keep every s-th
/// output. Gradients scatter exactly the same products. Writes the direction's output in ops.
void independent_conv(const ConvProblem& p, ConvOperands& ops) {
  Box in{{1, 1, 1}}, ker{{1, 1, 1}}, out{{1, 1, 1}}, padded{{1, 1, 1}}, dk{{1, 1, 1}};
  i64 s[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pre[3] = {0, 0, 0};
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    in.d[a] = p.in[ua];
    ker.d[a] = p.kernel[ua];
    out.d[a] = p.out[ua];
    s[a] = p.stride[ua];
    dil[a] = p.dilation[ua];
    pre[a] = p.pad_pre[ua];
    padded.d[a] = p.in[ua] + p.pad_pre[ua] + p.pad_post[ua];
    dk.d[a] = (p.kernel[ua] - 1) * p.dilation[ua] + 1;
  }
  const i64 Cg = p.C / p.G, Kg = p.K / p.G;
  // Explicitly padded input and explicitly flipped + dilated filters (zeros in the gaps).
  std::vector<double> xp(static_cast<std::size_t>(p.N * p.C * padded.size()), 0.0);
  for (i64 nc = 0; nc < p.N * p.C; ++nc)
    for (i64 a = 0; a < in.d[0]; ++a)
      for (i64 b = 0; b < in.d[1]; ++b)
        for (i64 c = 0; c < in.d[2]; ++c)
          xp[nc * padded.size() + padded.at(a + pre[0], b + pre[1], c + pre[2])] =
              ops.x[nc * in.size() + in.at(a, b, c)];
  auto dilated_pos = [&](i64 a, i64 b, i64 c) {  // stored tap -> position in the dilated filter
    if (p.flip) {
      a = ker.d[0] - 1 - a;
      b = ker.d[1] - 1 - b;
      c = ker.d[2] - 1 - c;
    }
    return dk.at(a * dil[0], b * dil[1], c * dil[2]);
  };
  std::vector<double> wd(static_cast<std::size_t>(p.K * Cg * dk.size()), 0.0);
  for (i64 kc = 0; kc < p.K * Cg; ++kc)
    for (i64 a = 0; a < ker.d[0]; ++a)
      for (i64 b = 0; b < ker.d[1]; ++b)
        for (i64 c = 0; c < ker.d[2]; ++c)
          wd[kc * dk.size() + dilated_pos(a, b, c)] = ops.w[kc * ker.size() + ker.at(a, b, c)];

  std::vector<double> y(static_cast<std::size_t>(p.N * p.K * out.size()), 0.0);
  std::vector<double> dxp(xp.size(), 0.0), dwd(wd.size(), 0.0);
  for (i64 n = 0; n < p.N; ++n)
    for (i64 k = 0; k < p.K; ++k) {
      const i64 g = k / Kg;
      for (i64 c = 0; c < Cg; ++c)
        for (i64 o0 = 0; o0 < out.d[0]; ++o0)
          for (i64 o1 = 0; o1 < out.d[1]; ++o1)
            for (i64 o2 = 0; o2 < out.d[2]; ++o2)
              for (i64 e0 = 0; e0 < dk.d[0]; ++e0)
                for (i64 e1 = 0; e1 < dk.d[1]; ++e1)
                  for (i64 e2 = 0; e2 < dk.d[2]; ++e2) {
                    const i64 xi = (n * p.C + g * Cg + c) * padded.size() +
                                   padded.at(o0 * s[0] + e0, o1 * s[1] + e1, o2 * s[2] + e2);
                    const i64 wi = (k * Cg + c) * dk.size() + dk.at(e0, e1, e2);
                    const i64 yi = (n * p.K + k) * out.size() + out.at(o0, o1, o2);
                    y[yi] += xp[xi] * wd[wi];
                    dxp[xi] += ops.y[yi] * wd[wi];
                    dwd[wi] += xp[xi] * ops.y[yi];
                  }
    }
  switch (p.direction) {
    case ConvDirection::forward: ops.y = y; break;
    case ConvDirection::grad_inputs:  // crop the padding away
      for (i64 nc = 0; nc < p.N * p.C; ++nc)
        for (i64 a = 0; a < in.d[0]; ++a)
          for (i64 b = 0; b < in.d[1]; ++b)
            for (i64 c = 0; c < in.d[2]; ++c)
              ops.x[nc * in.size() + in.at(a, b, c)] =
                  dxp[nc * padded.size() + padded.at(a + pre[0], b + pre[1], c + pre[2])];
      break;
    case ConvDirection::grad_weights:  // keep the taps, drop the dilation gaps
      for (i64 kc = 0; kc < p.K * Cg; ++kc)
        for (i64 a = 0; a < ker.d[0]; ++a)
          for (i64 b = 0; b < ker.d[1]; ++b)
            for (i64 c = 0; c < ker.d[2]; ++c)
              ops.w[kc * ker.size() + ker.at(a, b, c)] = dwd[kc * dk.size() + dilated_pos(a, b, c)];
      break;
  }
}

}  // namespace

TEST_CASE("reference: hand-computed 1D cases", "[backends][conv][reference]") {
  SECTION("cross-correlation and convolution, valid") {
    const auto p = ConvProblem::make(ConvDirection::forward, params(1, "valid"), {1, 1, 4}, {1, 1, 3},
                                     DType::float64);
    CHECK(run_ref(p, {{1, 2, 3, 4}, {1, 0, -1}, {0, 0}}) == std::vector<double>{-2, -2});
    auto pf = p;
    pf.flip = true;  // w reversed: (-1, 0, 1)
    CHECK(run_ref(pf, {{1, 2, 3, 4}, {1, 0, -1}, {0, 0}}) == std::vector<double>{2, 2});
  }
  SECTION("padding 1 and stride 2") {
    // padded (0 1 2 3 4 5 0), windows at 0, 2, 4
    const auto p = ConvProblem::make(ConvDirection::forward, params(1, 1, {2}), {1, 1, 5}, {1, 1, 3},
                                     DType::float64);
    CHECK(p.out[0] == 3);
    CHECK(run_ref(p, {{1, 2, 3, 4, 5}, {1, 1, 1}, {0, 0, 0}}) == std::vector<double>{3, 9, 9});
  }
  SECTION("dilation 2") {
    // y[o] = x[o] * 1 + x[o + 2] * 10
    const auto p = ConvProblem::make(ConvDirection::forward, params(1, "valid", {}, {2}), {1, 1, 5},
                                     {1, 1, 2}, DType::float64);
    CHECK(run_ref(p, {{1, 2, 3, 4, 5}, {1, 10}, {0, 0, 0}}) == std::vector<double>{31, 42, 53});
  }
  SECTION("asymmetric padding (2, 0)") {
    // padded (0 0 1 2 3), kernel (1 1)
    const auto p = ConvProblem::make(ConvDirection::forward,
                                     params(1, std::vector<std::pair<i64, i64>>{{2, 0}}), {1, 1, 3},
                                     {1, 1, 2}, DType::float64);
    CHECK(run_ref(p, {{1, 2, 3}, {1, 1}, {0, 0, 0, 0}}) == std::vector<double>{0, 1, 3, 5});
  }
  SECTION("gradients of y = (x0 + 2 x1, x1 + 2 x2)") {
    auto p = ConvProblem::make(ConvDirection::grad_inputs, params(1, "valid"), {1, 1, 3}, {1, 1, 2},
                               DType::float64);
    // dx = (a, 2a + b, 2b) for dy = (a, b) = (1, 10)
    CHECK(run_ref(p, {{9, 9, 9}, {1, 2}, {1, 10}}) == std::vector<double>{1, 12, 20});
    p.direction = ConvDirection::grad_weights;
    // dw0 = x0 * 1 + x1 * 10, dw1 = x1 * 1 + x2 * 10
    CHECK(run_ref(p, {{1, 2, 3}, {9, 9}, {1, 10}}) == std::vector<double>{21, 32});
    p.flip = true;  // the filter is stored reversed, so is its gradient
    CHECK(run_ref(p, {{1, 2, 3}, {9, 9}, {1, 10}}) == std::vector<double>{32, 21});
  }
  SECTION("stride 2 grad inputs leaves unread inputs at zero") {
    // x of 5, kernel 1, stride 2: y = (x0, x2, x4)
    const auto p = ConvProblem::make(ConvDirection::grad_inputs, params(1, "valid", {2}), {1, 1, 5},
                                     {1, 1, 1}, DType::float64);
    CHECK(run_ref(p, {{7, 7, 7, 7, 7}, {3}, {1, 2, 3}}) == std::vector<double>{3, 0, 6, 0, 9});
  }
}

TEST_CASE("reference: hand-computed 2D cases", "[backends][conv][reference]") {
  const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9};  // 3x3
  const std::vector<double> w{1, 2, 3, 4};                 // 2x2
  auto p = ConvProblem::make(ConvDirection::forward, params(2, "valid"), {1, 1, 3, 3}, {1, 1, 2, 2},
                             DType::float64);
  CHECK(run_ref(p, {x, w, std::vector<double>(4)}) == std::vector<double>{37, 47, 67, 77});
  p.flip = true;  // kernel (4 3; 2 1)
  CHECK(run_ref(p, {x, w, std::vector<double>(4)}) == std::vector<double>{23, 33, 53, 63});

  SECTION("groups: each output channel sees only its group's input channels") {
    // C = 2, K = 2, G = 2, 1x1 filters: y[k] = w[k] * x[k]
    const auto q = ConvProblem::make(ConvDirection::forward, params(2, "valid", {}, {}, false, 2),
                                     {1, 2, 1, 2}, {2, 1, 1, 1}, DType::float64);
    CHECK(run_ref(q, {{1, 2, 3, 4}, {10, 100}, std::vector<double>(4)}) ==
          std::vector<double>{10, 20, 300, 400});
  }
  SECTION("full mode with a kernel larger than the input") {
    // x = (1 2) as 1x2, kernel 1x3 (1 10 100), full: padded (0 0 1 2 0 0), 4 outputs
    const auto q = ConvProblem::make(ConvDirection::forward, params(2, "full"), {1, 1, 1, 2},
                                     {1, 1, 1, 3}, DType::float64);
    REQUIRE(q.out[1] == 4);
    CHECK(run_ref(q, {{1, 2}, {1, 10, 100}, std::vector<double>(4)}) ==
          std::vector<double>{100, 210, 21, 2});
  }
}

TEST_CASE("reference: Theano's worked shape examples", "[backends][conv][reference]") {
  // docs/SEMANTICS.md 1.3: image (3,2,12,9), kernel (4,2,5,6), subsample (1,2), dilation (2,1).
  struct Example {
    BorderMode border;
    std::vector<i64> y2d, y3d;
  };
  const std::vector<Example> examples{
      {"valid", {3, 4, 4, 2}, {3, 4, 4, 2, 4}},
      {"half", {3, 4, 12, 5}, {3, 4, 12, 5, 8}},
      {"full", {3, 4, 20, 7}, {3, 4, 20, 7, 10}},
  };
  for (const auto& e : examples) {
    const auto p2 = ConvProblem::make(ConvDirection::forward, params(2, e.border, {1, 2}, {2, 1}),
                                      {3, 2, 12, 9}, {4, 2, 5, 6}, DType::float64);
    CHECK(p2.y_shape() == e.y2d);
    const auto p3 = ConvProblem::make(ConvDirection::forward, params(3, e.border, {1, 2, 1}, {2, 1, 1}),
                                      {3, 2, 12, 9, 7}, {4, 2, 5, 6, 4}, DType::float64);
    CHECK(p3.y_shape() == e.y3d);
  }
  const auto p2 = ConvProblem::make(ConvDirection::forward, params(2, BorderMode({1, 2}), {1, 2}, {2, 1}),
                                    {3, 2, 12, 9}, {4, 2, 5, 6}, DType::float64);
  CHECK(p2.y_shape() == std::vector<i64>{3, 4, 6, 4});
  const auto p3 = ConvProblem::make(ConvDirection::forward,
                                    params(3, BorderMode({1, 2, 3}), {1, 2, 1}, {2, 1, 1}),
                                    {3, 2, 12, 9, 7}, {4, 2, 5, 6, 4}, DType::float64);
  CHECK(p3.y_shape() == std::vector<i64>{3, 4, 6, 4, 10});

  // On those geometries the reference agrees with the independent formulation, every
  // direction and both flip modes.
  std::uint64_t seed = 300;
  for (const auto& border : {BorderMode("valid"), BorderMode("half"), BorderMode("full"), BorderMode({1, 2})})
    for (bool flip : {false, true})
      for (ConvDirection dir : kAllDirections) {
        const auto p = ConvProblem::make(dir, params(2, border, {1, 2}, {2, 1}, flip), {3, 2, 12, 9},
                                         {4, 2, 5, 6}, DType::float64);
        const ConvOperands ops = make_operands(p, seed++);
        ConvOperands ind = ops;
        independent_conv(p, ind);
        const auto ref = run_ref(p, ops);
        INFO(p.key());
        CHECK(max_abs_diff(ref, output_of(ind, dir)) <= 1e-12 * std::max(1.0, max_abs(ref)));
      }
}

TEST_CASE("reference: agrees with the independent formulation over the sweep", "[backends][conv][reference]") {
  const auto cases = conv_sweep_cases();
  long checked = 0;
  double worst = 0.0;
  std::uint64_t seed = 1000;
  // Every 2nd case; every 4th under the sanitizers (about 30x slower).
  const std::size_t step = convgraph::test::sanitized_build() ? 4 : 2;
  for (std::size_t i = 0; i < cases.size(); i += step)
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p = cases[i].problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p, seed++);
      ConvOperands ind = ops;
      independent_conv(p, ind);
      const auto ref = run_ref(p, ops);
      const double err = max_abs_diff(ref, output_of(ind, dir)) / std::max(1.0, max_abs(ref));
      worst = std::max(worst, err);
      ++checked;
      if (err > 1e-12) FAIL(cases[i].name << " " << p.key() << ": relative difference " << err);
    }
  std::printf("reference vs independent formulation: %ld (case, direction) pairs, max rel diff %.3g\n",
              checked, worst);
}

TEST_CASE("reference: adjoint identity over the sweep", "[backends][conv][reference]") {
  // <conv(x, w), g> = <x, grad_inputs(g, w)> = <w, grad_weights(x, g)>, float64.
  const auto cases = conv_sweep_cases();
  double worst = 0.0;
  std::uint64_t seed = 5000;
  long checked = 0;
  // Every case; every 2nd under the sanitizers (about 30x slower).
  const std::size_t step = convgraph::test::sanitized_build() ? 2 : 1;
  for (std::size_t i = 0; i < cases.size(); i += step, ++checked) {
    const ConvCase& c = cases[i];
    const ConvProblem fwd = c.problem(ConvDirection::forward, DType::float64);
    const ConvOperands ops = make_operands(fwd, seed++);  // ops.y plays g
    ConvProblem gi = fwd, gw = fwd;
    gi.direction = ConvDirection::grad_inputs;
    gw.direction = ConvDirection::grad_weights;
    const double a = dot(run_ref(fwd, ops), ops.y);
    const double b = dot(ops.x, run_ref(gi, ops));
    const double d = dot(ops.w, run_ref(gw, ops));
    // Every operand lies in [-1, 1], so the number of products is a bound on sum |terms|.
    const double scale = static_cast<double>(fwd.y_numel() * fwd.Cg() * fwd.kernel_numel());
    worst = std::max({worst, std::abs(a - b) / scale, std::abs(a - d) / scale});
    INFO(c.name);
    CHECK(std::abs(a - b) <= 1e-12 * scale);
    CHECK(std::abs(a - d) <= 1e-12 * scale);
  }
  std::printf("reference adjoint identity: %ld cases, max rel diff %.3g\n", checked, worst);
}

TEST_CASE("reference: float32 storage rounds the float64 result once", "[backends][conv][reference]") {
  const auto cases = conv_chunking_cases();
  for (const ConvCase& c : cases)
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, 77);
      const auto ref64 = run_ref(p64, ops);
      const ConvProblem p32 = c.problem(dir, DType::float32);
      std::vector<float> x = to_float(ops.x), w = to_float(ops.w), y = to_float(ops.y);
      reference_conv(p32, ConvTensors{x.data(), w.data(), y.data(), {}});
      const std::vector<float>& out = dir == ConvDirection::forward       ? y
                                      : dir == ConvDirection::grad_inputs ? x
                                                                          : w;
      for (std::size_t i = 0; i < out.size(); ++i)
        REQUIRE(out[i] == static_cast<float>(ref64[i]));
    }
}

TEST_CASE("reference: bad input throws", "[backends][conv][reference]") {
  auto p = ConvProblem::make(ConvDirection::forward, params(1, "valid"), {1, 1, 4}, {1, 1, 3}, DType::float64);
  std::vector<double> buf(8);
  p.dtype = DType::int32;
  CHECK_THROWS_AS(reference_conv(p, ConvTensors{buf.data(), buf.data(), buf.data(), {}}), TypeError);
  p.dtype = DType::float64;
  CHECK_THROWS_AS(reference_conv(p, ConvTensors{nullptr, buf.data(), buf.data(), {}}), ValueError);
  const auto algo = make_cpu_reference_algorithm();
  CHECK(algo->name() == "cpu.reference");
  p.dtype = DType::float16;
  CHECK_FALSE(algo->applicable(p));
}
