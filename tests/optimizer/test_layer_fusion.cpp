// Layer fusion: relu's gradient fused into max pooling's and batch norm's gradients
// (optimizer/grad_fusion.cpp), relu fused into batch norm's output pass
// (optimizer/conv_epilogue_fusion.cpp), and zeros_like read as a scalar
// (optimizer/canonicalize.cpp, fill_as_scalar). Fused graphs give the unfused ones' bits,
// over 1-D, 2-D and 3-D pooling, disjoint and overlapping windows, short and long rows,
// ties, zeros and NaN; an independent reference checks one case by hand; verify_grad checks
// the fused gradients and the fused ops' own gradients.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>
#include <convgraph/core/shared.hpp>
#include <convgraph/ops/batch_norm.hpp>
#include <convgraph/runtime/gradcheck.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "ops/batch_norm_info.hpp"
#include "ops/pool_internal.hpp"
#include "support/pool_reference.hpp"

using namespace convgraph;

namespace {

const Mode kNoGradFusion = Mode::fast_run().excluding("grad_fusion");

int count_named(const Function& f, const std::string& name) {
  int n = 0;
  for (const auto& v : f.graph().toposort()) n += v.op() && v.op()->name() == name ? 1 : 0;
  return n;
}

PoolOptions pool_options(std::vector<std::int64_t> w, std::vector<std::int64_t> s = {}, std::vector<std::int64_t> p = {}) {
  PoolOptions o;
  o.window = std::move(w);
  o.stride = std::move(s);
  o.padding = std::move(p);
  return o;
}

/// Few distinct values around 0 (ties, zeros, negative windows), some NaN.
Tensor tied_values(DType dt, const Shape& shape, unsigned seed, bool nans) {
  std::mt19937 rng(seed);
  Tensor x(DType::float64, shape);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.set(i, nans && rng() % 31 == 0 ? NAN : static_cast<double>(static_cast<int>(rng() % 5) - 2));
  return x.astype(dt);
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector(), vb = b.to_vector();
  if (va.size() != vb.size()) return false;
  for (std::size_t i = 0; i < va.size(); ++i)
    if (std::isnan(va[i]) ? !std::isnan(vb[i]) : std::memcmp(&va[i], &vb[i], sizeof(double)) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("layer fusion: relu's gradient fuses into max pooling's, same bits as unfused", "[optimizer][fusion][pool]") {
  struct Case {
    Shape shape;
    PoolOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 3, 12, 20}, pool_options({2, 2})},                  // disjoint, rows of 10 windows
      {{2, 3, 6, 6}, pool_options({2, 2})},                    // disjoint, short rows
      {{2, 2, 9, 19}, pool_options({3, 3}, {2, 2}, {1, 1})},   // overlapping windows, padding
      {{3, 40}, pool_options({3}, {3})},                       // 1-D
      {{1, 2, 4, 6, 18}, pool_options({2, 2, 2})},             // 3-D
  };
  for (const Case& c : cases)
    for (DType dt : {DType::float32, DType::float64})
      for (bool nans : {false, true}) {
        INFO(shape_to_string(c.shape) << " " << dtype_name(dt) << (nans ? " with NaN" : ""));
        Var x = input(dt, c.shape, "x");
        Var y = max_pool(relu(x), c.o);
        Var r = input(dt, y.shape(), "r");
        Var g = grad(sum(y * r), x);
        Function fused = compile({x, r}, {g});
        Function plain = compile({x, r}, {g}, kNoGradFusion);
        Function raw = compile({x, r}, {g}, kNoGradFusion.excluding("fill_as_scalar"));  // zeros_like filled
        const std::string name = detail::PoolParams::from("max_pool", c.o, detail::PoolMode::max, 0).op_name();
        CHECK(count_named(fused, name + "_grad+relu_grad") == 1);
        CHECK(count_named(plain, name + "_grad+relu_grad") == 0);
        CHECK(count_named(fused, "zeros_like") == 0);
        CHECK(count_named(plain, "zeros_like") == 0);
        CHECK(count_named(raw, "zeros_like") == 1);
        Function filled = compile({x, r}, {g}, Mode::fast_run().excluding("fill_as_scalar"));
        CHECK(count_named(filled, name + "_grad+relu_grad") == 1);
        CHECK(count_named(filled, name + "_grad") == 0);  // no unmasked gradient left for zeros_like
        const Tensor xv = tied_values(dt, c.shape, 7, nans), rv = tied_values(dt, y.shape(), 8, false);
        const Tensor want = raw({xv, rv})[0];
        CHECK(bits_equal(fused({xv, rv})[0], want));
        CHECK(bits_equal(plain({xv, rv})[0], want));
      }
}

TEST_CASE("layer fusion: the fused gradient against a hand-written reference", "[optimizer][fusion][pool]") {
  // relu then 2x2 max pooling: each window's first maximum of relu(x) gets r when it is
  // > 0 (relu's gradient there is 1), nothing else does.
  const Shape shape{2, 2, 6, 20};
  Var x = input(DType::float64, shape, "x");
  Var y = max_pool2d(relu(x));
  Var r = input(DType::float64, y.shape(), "r");
  Function f = compile({x, r}, {grad(sum(y * r), x)});
  REQUIRE(count_named(f, "max_pool2d_grad+relu_grad") == 1);
  const Tensor xv = tied_values(DType::float64, shape, 11, false), rv = test::distinct_tensor(y.shape(), 12);
  Tensor want = Tensor::zeros(DType::float64, shape);
  for (std::int64_t p = 0; p < 4; ++p)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 10; ++j) {
        std::int64_t best = -1;
        double m = 0;
        for (std::int64_t a = 0; a < 2; ++a)
          for (std::int64_t b = 0; b < 2; ++b) {
            const std::int64_t at = (p * 6 + 2 * i + a) * 20 + 2 * j + b;
            const double v = std::max(0.0, xv.get(at));
            if (best < 0 || v > m) best = at, m = v;
          }
        if (m > 0) want.set(best, rv.get((p * 3 + i) * 10 + j));
      }
  CHECK(f({xv, rv})[0].to_vector() == want.to_vector());
}

TEST_CASE("layer fusion: verify_grad through the fused gradient and of the fused op", "[optimizer][fusion][pool][grad]") {
  const Shape shape{1, 2, 4, 18};
  const Tensor xv = test::distinct_tensor(shape, 21);
  CHECK_NOTHROW(verify_grad([](const auto& v) { return max_pool2d(relu(v[0])); }, {xv}));
  // The fused op differentiated in gy: the same as the unfused where(x > 0, grad, 0).
  detail::PoolParams p = detail::PoolParams::from("max_pool2d", pool_options({2, 2}), detail::PoolMode::max, 2);
  p.relu_grad = true;
  const Var xc = constant(xv);
  const Tensor gy = test::distinct_tensor({1, 2, 2, 9}, 22);
  CHECK_NOTHROW(verify_grad([&](const auto& v) { return detail::pool_grad(p, xc, v[0]); }, {gy}));
  Var g = input(DType::float64, gy.shape(), "gy"), r = input(DType::float64, shape, "r");
  const Var fused = grad(sum(detail::pool_grad(p, xc, g) * r), g);
  const Var pg = max_pool2d_grad(xc, g);
  const Var plain = grad(sum(where(xc > 0.0, pg, zeros_like(pg)) * r), g);
  const Tensor rv = test::distinct_tensor(shape, 23);
  CHECK(compile({g, r}, {fused})({gy, rv})[0].to_vector() ==
        compile({g, r}, {plain}, kNoGradFusion)({gy, rv})[0].to_vector());
}

TEST_CASE("layer fusion: relu after batch norm runs in its output pass, same bits", "[optimizer][fusion][batch_norm]") {
  // Training (statistics, running averages, gradients) and inference, 1-D to 3-D.
  for (const Shape& shape : {Shape{4, 3, 10}, Shape{2, 4, 5, 6}, Shape{2, 3, 2, 3, 4}})
    for (DType dt : {DType::float32, DType::float64}) {
      INFO(shape_to_string(shape) << " " << dtype_name(dt));
      const std::int64_t C = shape[1];
      Var x = input(dt, shape, "x"), gamma = input(dt, {C}, "gamma"), beta = input(dt, {C}, "beta");
      Var r = input(dt, shape, "r");
      const BatchNormOutputs bn = batch_norm_train(x, gamma, beta);
      Var y = relu(bn.y);
      const std::vector<Var> gs = grad(sum(y * r), {x, gamma, beta});
      std::vector<Var> outs{y, bn.mean, bn.var};
      outs.insert(outs.end(), gs.begin(), gs.end());
      Var yi = relu(batch_norm_infer(x, gamma, beta, abs(beta), gamma * gamma));
      outs.push_back(yi);
      Function fused = compile({x, gamma, beta, r}, outs);
      Function plain = compile({x, gamma, beta, r}, outs, Mode::fast_run().excluding("batch_norm_relu_fusion"));
      CHECK(count_named(fused, "batch_norm_train+relu") == 1);
      CHECK(count_named(fused, "batch_norm_infer+relu") == 1);
      CHECK(count_named(plain, "batch_norm_train+relu") == 0);
      CHECK_THAT(fused.describe(), Catch::Contains("batch_norm_train+relu"));
      Tensor xv = tied_values(dt, shape, 31, false);
      for (std::int64_t i = 0; i < xv.numel(); ++i) xv.set(i, xv.get(i) + 0.25 * static_cast<double>(i % 7));
      xv.set(3, NAN);  // NaN through the fused relu is 0, as through relu
      const Tensor gv = test::distinct_tensor({C}, 32, dt), bv = test::distinct_tensor({C}, 33, dt);
      const Tensor rv = tied_values(dt, shape, 34, false);
      const auto a = fused({xv, gv, bv, rv}), b = plain({xv, gv, bv, rv});
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("output " << i);
        CHECK(bits_equal(a[i], b[i]));
      }
    }
}

TEST_CASE("layer fusion: verify_grad through batch norm + relu and of the fused op", "[optimizer][fusion][batch_norm][grad]") {
  const Tensor xv = test::distinct_tensor({3, 2, 5}, 41), gv = test::distinct_tensor({2}, 42),
               bv = test::distinct_tensor({2}, 43);
  CHECK_NOTHROW(verify_grad([](const auto& v) { return relu(batch_norm_train(v[0], v[1], v[2]).y); }, {xv, gv, bv}));
  // The fused op built directly (as the pass does) and differentiated.
  CHECK_NOTHROW(verify_grad(
      [](const auto& v) {
        const Var plain = batch_norm_train(v[0], v[1], v[2]).y;
        detail::BnInfo info = detail::bn_info(*plain.op());
        info.relu = true;
        return detail::batch_norm_forward(info, plain.inputs());
      },
      {xv, gv, bv}));
}

TEST_CASE("layer fusion: relu's gradient fuses into batch norm's gradients, same bits", "[optimizer][fusion][batch_norm]") {
  // bn -> relu: the where(h > 0, g, 0) pass goes into grad_sums and grad_x (mask h as their
  // last input); with g a sum of gradients (h used twice) elementwise fusion keeps it.
  for (const Shape& shape : {Shape{4, 3, 10}, Shape{2, 4, 5, 7}, Shape{2, 3, 2, 3, 5}})
    for (DType dt : {DType::float32, DType::float64})
      for (int variant : {0, 1, 2}) {
        // 1: h used twice (g a sum, fused into the where); 2: relu of the sum of two batch
        // norms (the where feeds both gradients; kept).
        const bool twice = variant != 0;
        INFO(shape_to_string(shape) << " " << dtype_name(dt) << " variant " << variant);
        const std::int64_t C = shape[1];
        Var x = input(dt, shape, "x"), gamma = input(dt, {C}, "gamma"), beta = input(dt, {C}, "beta");
        Var r = input(dt, {shape[0], C}, "r");
        Var y = batch_norm_train(x, gamma, beta).y;
        Var h = relu(variant == 2 ? y + batch_norm_train(x * 2.0, gamma, beta).y : y);
        // g from a non-elementwise op (as from a convolution's input gradient).
        Var loss = sum(global_avg_pool(h) * r);
        if (variant == 1) loss = loss + sum(h * h);
        const std::vector<Var> gs = grad(loss, {x, gamma, beta});
        Function fused = compile({x, gamma, beta, r}, gs);
        Function plain = compile({x, gamma, beta, r}, gs, Mode::fast_run().excluding("bn_grad_relu_fusion"));
        CHECK(count_named(fused, "batch_norm_train_grad_sums+relu_grad") == (twice ? 0 : 1));
        CHECK(count_named(fused, "batch_norm_train_grad_x+relu_grad") == (twice ? 0 : 1));
        CHECK(count_named(plain, "batch_norm_train_grad_x+relu_grad") == 0);
        Tensor xv = tied_values(dt, shape, 51, false);  // many h exactly 0
        for (std::int64_t i = 0; i < xv.numel(); ++i) xv.set(i, xv.get(i) + 0.125 * static_cast<double>(i % 5));
        const Tensor gv = test::distinct_tensor({C}, 52, dt), bv = test::distinct_tensor({C}, 53, dt);
        const Tensor rv = test::distinct_tensor({shape[0], C}, 54, dt);
        const auto a = fused({xv, gv, bv, rv}), b = plain({xv, gv, bv, rv});
        for (std::size_t i = 0; i < a.size(); ++i) {
          INFO("gradient " << i);
          CHECK(bits_equal(a[i], b[i]));
        }
      }
  // The fused gradient checked numerically (global_avg_pool: g is not elementwise, so the
  // pass fuses), and a mask of the wrong shape named.
  const Tensor xv = test::distinct_tensor({3, 2, 5}, 55), gv = test::distinct_tensor({2}, 56),
               bv = test::distinct_tensor({2}, 57);
  CHECK_NOTHROW(verify_grad([](const auto& v) { return global_avg_pool(relu(batch_norm_train(v[0], v[1], v[2]).y)); },
                            {xv, gv, bv}));
  Var x = input(DType::float64, {3, 2, 5}), gy = input(DType::float64, {3, 2, 5});
  const Var sums = grad(sum(batch_norm_train(x, input(DType::float64, {2}), input(DType::float64, {2})).y * gy),
                        std::vector<Var>{x})[0].inputs()[4];
  detail::BnInfo info = detail::bn_info(*sums.op());
  info.relu = true;
  std::vector<Var> in = sums.inputs();
  in.push_back(input(DType::float64, {3, 2, 4}));
  CHECK_THROWS_WITH(detail::batch_norm_node(info, in), Catch::Contains("relu output"));
}
