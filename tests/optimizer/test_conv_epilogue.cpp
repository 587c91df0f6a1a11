// Convolution epilogue fusion (optimizer/conv_epilogue_fusion.cpp): a host forward
// convolution absorbs the per-channel bias, residual add and relu after it. Every CPU
// algorithm gives the same bits fused as the unfused ops (the epilogue adds in the same
// order), whether it applies the epilogue itself or the caller does after run(); chains
// that would need an intermediate elsewhere, or another order, are left alone.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>
#include <convgraph/ops/batch_norm.hpp>
#include <convgraph/optimizer/conv_impl_op.hpp>

#include "support/graph_fixtures.hpp"

#include <cmath>
#include <cstring>

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

// Bit for bit, a NaN matching any NaN (a NaN's sign made by arithmetic is unspecified).
void check_identical(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector(), vb = b.to_vector();
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const bool same = std::isnan(va[i]) ? std::isnan(vb[i]) : std::memcmp(&va[i], &vb[i], sizeof(double)) == 0;
    if (!same && mismatches++ == 0) FAIL_CHECK("element " << i << ": fused " << va[i] << " vs unfused " << vb[i]);
  }
  CHECK(mismatches == 0);
}

struct Case {
  const char* what;
  Shape x, w;
  ConvOptions options;
  std::vector<const char*> algorithms;
};

}  // namespace

TEST_CASE("conv epilogue: every CPU algorithm gives the unfused bits for every part combination",
          "[optimizer][conv_epilogue]") {
  const std::vector<Case> cases = {
      {"2D 3x3 half", {2, 3, 9, 10}, {8, 3, 3, 3}, {.border_mode = "half"},
       {"cpu.corrmm", "cpu.direct", "cpu.winograd", "cpu.fft", "cpu.reference"}},
      {"2D 3x3 stride 2, 1x1-padded", {2, 4, 11, 9}, {5, 4, 3, 3}, {.border_mode = "half", .subsample = {2, 2}},
       {"cpu.corrmm", "cpu.direct"}},
      {"2D depthwise x2", {2, 4, 8, 7}, {8, 1, 3, 3}, {.border_mode = "half", .num_groups = 4},
       {"cpu.depthwise", "cpu.corrmm"}},
      {"1D", {3, 3, 17}, {5, 3, 4}, {}, {"cpu.corrmm", "cpu.direct"}},
      {"3D", {1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, {.border_mode = "half"}, {"cpu.corrmm", "cpu.direct", "cpu.conv3d2d"}},
  };
  struct Parts {
    bool bias, residual, relu;
  };
  const Parts parts[] = {{true, false, false}, {true, false, true}, {false, true, true},
                         {true, true, true},   {false, false, true}, {false, true, false}};
  for (const Case& c : cases)
    for (DType t : {DType::float32, DType::float64})
      for (const char* algo : c.algorithms) {
        if (std::string(algo) == "cpu.winograd" && t != DType::float32) continue;
        for (const Parts& p : parts) {
          INFO(c.what << ", " << dtype_name(t) << ", " << algo << ", bias " << p.bias << " residual " << p.residual
                      << " relu " << p.relu);
          Var x = input(t, c.x, "x"), w = input(t, c.w, "w");
          Var y = conv_nd(x, w, c.options);
          const Shape ys = y.shape();
          Shape bs(ys.size(), 1);
          bs[1] = ys[1];  // (1, K, 1, ...): one value per channel
          Var b = input(t, bs, "b"), r = input(t, ys, "r");
          if (p.bias) y = y + b;
          if (p.residual) y = y + r;
          if (p.relu) y = relu(y);
          const std::vector<Var> ins{x, w, b, r};
          Function fused = compile(ins, {y}, only_algorithm(algo));
          Function unfused = compile(ins, {y}, only_algorithm(algo).excluding("conv_epilogue_fusion"));
          const ConvImplOp* conv = fused_conv(fused);
          REQUIRE(conv != nullptr);
          CHECK(conv->epilogue().bias == p.bias);
          CHECK(conv->epilogue().residual == p.residual);
          CHECK((conv->epilogue().activation == ConvActivation::relu) == p.relu);
          CHECK_THAT(fused.describe(), Contains("Conv" + conv->epilogue().text()) && Contains(algo));
          CHECK(fused_conv(unfused) == nullptr);
          Tensor xv = noise(t, c.x, 1);
          xv.set(3, NAN);  // a NaN stays a NaN (or a relu's 0) where the unfused ops put it
          const std::vector<Tensor> args{xv, noise(t, c.w, 2), noise(t, bs, 3), noise(t, ys, 4)};
          check_identical(fused(args)[0], unfused(args)[0]);
        }
      }
}

TEST_CASE("conv epilogue: bias as (K, 1, 1) and on a 1-D convolution as (K, 1)", "[optimizer][conv_epilogue]") {
  Var x = input(DType::float32, {2, 3, 8, 8}, "x"), w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var b = input(DType::float32, {4, 1, 1}, "b");
  Var y = relu(conv2d(x, w) + b);
  Function f = compile({x, w, b}, {y}, only_algorithm("cpu.corrmm"));
  REQUIRE(fused_conv(f) != nullptr);
  CHECK(fused_conv(f)->epilogue().text() == "+bias+relu");
  Function u = compile({x, w, b}, {y}, only_algorithm("cpu.corrmm").excluding("conv_epilogue_fusion"));
  const std::vector<Tensor> args{noise(DType::float32, {2, 3, 8, 8}, 5), noise(DType::float32, {4, 3, 3, 3}, 6),
                                 noise(DType::float32, {4, 1, 1}, 7)};
  check_identical(f(args)[0], u(args)[0]);

  Var x1 = input(DType::float64, {2, 3, 9}, "x"), w1 = input(DType::float64, {4, 3, 2}, "w");
  Var b1 = input(DType::float64, {4, 1}, "b");
  Function f1 = compile({x1, w1, b1}, {conv1d(x1, w1) + b1}, only_algorithm("cpu.direct"));
  REQUIRE(fused_conv(f1) != nullptr);
  CHECK(fused_conv(f1)->epilogue().text() == "+bias");
}

TEST_CASE("conv epilogue: nothing that another node needs is fused away", "[optimizer][conv_epilogue]") {
  const DType t = DType::float32;
  Var x = input(t, {2, 3, 8, 8}, "x"), w = input(t, {4, 3, 3, 3}, "w");
  Var b = input(t, {1, 4, 1, 1}, "b"), r = input(t, {2, 4, 6, 6}, "r");
  Var c = conv2d(x, w);
  SECTION("the convolution is also an output: nothing fuses") {
    Function f = compile({x, w, b}, {relu(c + b), c}, only_algorithm("cpu.corrmm"));
    CHECK(fused_conv(f) == nullptr);
  }
  SECTION("the pre-activation is also an output: bias fuses, relu does not") {
    Var pre = c + b;
    Function f = compile({x, w, b}, {relu(pre), pre}, only_algorithm("cpu.corrmm"));
    REQUIRE(fused_conv(f) != nullptr);
    CHECK(fused_conv(f)->epilogue().text() == "+bias");
  }
  SECTION("a residual before the bias: the residual fuses, the bias stays a node") {
    Function f = compile({x, w, b, r}, {relu((c + r) + b)}, only_algorithm("cpu.corrmm"));
    REQUIRE(fused_conv(f) != nullptr);
    CHECK(fused_conv(f)->epilogue().text() == "+residual");
  }
  SECTION("an add that broadcasts the convolution is not an epilogue") {
    Var big = input(t, {3, 2, 4, 6, 6}, "big");
    Function f = compile({x, w, big}, {c + big}, only_algorithm("cpu.corrmm"));
    CHECK(fused_conv(f) == nullptr);
  }
}

TEST_CASE("conv epilogue: a training step fuses the forward convolutions and keeps the gradients",
          "[optimizer][conv_epilogue][grad]") {
  const DType t = DType::float64;
  Var x = input(t, {2, 3, 7, 7}, "x"), w1 = input(t, {4, 3, 3, 3}, "w1"), w2 = input(t, {4, 4, 3, 3}, "w2");
  Var b1 = input(t, {1, 4, 1, 1}, "b1"), b2 = input(t, {1, 4, 1, 1}, "b2");
  Var h = relu(conv2d(x, w1, {.border_mode = "half"}) + b1);
  Var o = relu(conv2d(h, w2, {.border_mode = "half"}) + b2 + h);  // residual block
  Var loss = sum(o * o);
  const std::vector<Var> params{w1, b1, w2, b2};
  std::vector<Var> outs{loss};
  for (const Var& g : grad(loss, params)) outs.push_back(g);
  const std::vector<Var> ins{x, w1, w2, b1, b2};
  Function fused = compile(ins, outs, only_algorithm("cpu.corrmm"));
  Function unfused = compile(ins, outs, only_algorithm("cpu.corrmm").excluding("conv_epilogue_fusion"));
  int n_fused = 0;
  for (const auto& v : fused.graph().toposort())
    if (const ConvImplOp* c = as_conv_impl(v); c && !c->epilogue().empty()) ++n_fused;
  CHECK(n_fused == 2);
  CHECK_THAT(fused.describe(), Contains("Conv+bias+relu") && Contains("Conv+bias+residual+relu"));
  const std::vector<Tensor> args{noise(t, {2, 3, 7, 7}, 1), noise(t, {4, 3, 3, 3}, 2), noise(t, {4, 4, 3, 3}, 3),
                                 noise(t, {1, 4, 1, 1}, 4), noise(t, {1, 4, 1, 1}, 5)};
  const auto a = fused(args), b = unfused(args);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("output " << i);
    check_identical(a[i], b[i]);
  }
}

TEST_CASE("conv epilogue: DebugMode checks a fused convolution against the reference plus the epilogue",
          "[optimizer][conv_epilogue]") {
  const DType t = DType::float32;
  Var x = input(t, {2, 3, 8, 8}, "x"), w = input(t, {4, 3, 3, 3}, "w");
  Var b = input(t, {1, 4, 1, 1}, "b"), r = input(t, {2, 4, 8, 8}, "r");
  Var y = relu(conv2d(x, w, {.border_mode = "half"}) + b + r);
  Function f = compile({x, w, b, r}, {y}, Mode::debug_mode());
  REQUIRE(fused_conv(f) != nullptr);
  const std::vector<Tensor> args{noise(t, {2, 3, 8, 8}, 1), noise(t, {4, 3, 3, 3}, 2), noise(t, {1, 4, 1, 1}, 3),
                                 noise(t, {2, 4, 8, 8}, 4)};
  Function ref = compile({x, w, b, r}, {y}, only_algorithm("cpu.reference").excluding("conv_epilogue_fusion"));
  const Tensor got = f(args)[0], want = ref(args)[0];
  const auto g = got.to_vector(), e = want.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - e[i]));
  CHECK(worst < 1e-4);
}

TEST_CASE("conv epilogue: a fused op with wrong epilogue inputs is a clear error", "[optimizer][conv_epilogue]") {
  const DType t = DType::float32;
  Var x = input(t, {2, 3, 8, 8}, "x"), w = input(t, {4, 3, 3, 3}, "w"), b = input(t, {1, 4, 1, 1}, "b");
  Function f = compile({x, w, b}, {relu(conv2d(x, w) + b)}, only_algorithm("cpu.corrmm"));
  const ConvImplOp* conv = fused_conv(f);
  REQUIRE(conv != nullptr);
  const TensorType xt{t, {2, 3, 8, 8}}, wt{t, {4, 3, 3, 3}};
  CHECK_THROWS_WITH(conv->infer({xt, wt, TensorType{t, {5}}}), Contains("bias") && Contains("(5,)"));
  CHECK_THROWS_WITH(conv->infer({xt, wt, TensorType{t, {4, 4}}}), Contains("bias") && Contains("(4, 4)"));
  CHECK_THROWS_WITH(conv->infer({xt, wt, TensorType{DType::float64, {4}}}), Contains("float64"));
  CHECK(conv->infer({xt, wt, TensorType{t, {4}}}).shape == Shape{2, 4, 6, 6});
  CHECK_THROWS_AS(conv->infer({xt, wt}), TypeError);
  // Only a forward convolution takes an epilogue.
  Function g = compile({x, w}, grad(sum(conv2d(x, w)), std::vector<Var>{w}), only_algorithm("cpu.corrmm"));
  int checked = 0;
  for (const auto& v : g.graph().toposort())
    if (const ConvImplOp* c = as_conv_impl(v); c && c->direction() != ConvDirection::forward) {
      CHECK_THROWS_AS(c->with_epilogue({.activation = ConvActivation::relu}), ValueError);
      ++checked;
    }
  CHECK(checked > 0);
}

TEST_CASE("conv epilogue: bias_add fuses like a broadcast add", "[optimizer][conv_epilogue]") {
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    Var x = input(t, {2, 3, 8, 8}, "x"), w = input(t, {4, 3, 3, 3}, "w"), b = input(t, {4}, "b");
    Var y = relu(bias_add(conv2d(x, w, {.border_mode = "half"}), b));
    Function f = compile({x, w, b}, {y}, only_algorithm("cpu.direct"));
    Function u = compile({x, w, b}, {y}, only_algorithm("cpu.direct").excluding("conv_epilogue_fusion"));
    REQUIRE(fused_conv(f) != nullptr);
    CHECK(fused_conv(f)->epilogue().text() == "+bias+relu");
    const std::vector<Tensor> args{noise(t, {2, 3, 8, 8}, 1), noise(t, {4, 3, 3, 3}, 2), noise(t, {4}, 3)};
    check_identical(f(args)[0], u(args)[0]);
  }
}

TEST_CASE("conv epilogue: inference batch norm folds into the convolution", "[optimizer][conv_epilogue][batch_norm]") {
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    Var x = input(t, {2, 3, 9, 9}, "x"), w = input(t, {6, 3, 3, 3}, "w");
    Var gamma = input(t, {6}, "gamma"), beta = input(t, {6}, "beta"), mu = input(t, {6}, "mean"),
        var = input(t, {6}, "var");
    Var y = relu(batch_norm_infer(conv2d(x, w, {.border_mode = "half"}), gamma, beta, mu, var, 1e-3));
    const std::vector<Var> ins{x, w, gamma, beta, mu, var};
    Function folded = compile(ins, {y}, only_algorithm("cpu.corrmm"));
    Function plain = compile(ins, {y}, only_algorithm("cpu.corrmm").excluding("conv_fusion"));
    REQUIRE(fused_conv(folded) != nullptr);
    CHECK(fused_conv(folded)->epilogue().text() == "+bias+relu");
    CHECK_THAT(folded.describe(), !Contains("batch_norm"));
    CHECK_THAT(plain.describe(), Contains("batch_norm"));
    Tensor v = noise(t, {6}, 6);
    for (std::int64_t i = 0; i < 6; ++i) v.set(i, 0.5 + std::abs(v.get(i)));  // variances > 0
    const std::vector<Tensor> args{noise(t, {2, 3, 9, 9}, 1), noise(t, {6, 3, 3, 3}, 2), noise(t, {6}, 3),
                                   noise(t, {6}, 4), noise(t, {6}, 5), v};
    const auto a = folded(args)[0].to_vector(), b = plain(args)[0].to_vector();
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    CHECK(worst <= (t == DType::float32 ? 1e-5 : 1e-12) * scale);
  }
  SECTION("the raw convolution is also needed: no folding") {
    const DType t = DType::float32;
    Var x = input(t, {2, 3, 9, 9}, "x"), w = input(t, {6, 3, 3, 3}, "w");
    Var g = input(t, {6}, "g"), b = input(t, {6}, "b"), m = input(t, {6}, "m"), v = input(t, {6}, "v");
    Var c = conv2d(x, w);
    Function f = compile({x, w, g, b, m, v}, {batch_norm_infer(c, g, b, m, v), c}, only_algorithm("cpu.corrmm"));
    CHECK_THAT(f.describe(), Contains("batch_norm"));
  }
}
