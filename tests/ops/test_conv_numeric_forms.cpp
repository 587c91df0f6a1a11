// The composite and alternative entry points, run: bilinear upsampling against a direct
// interpolation formula, transpose/causal/separable/conv3D against independent loops or the
// reference, the cuDNN-style API, the run-time assert_shape check and gradients whose
// target shape is only known at run time.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "convgraph/ops/autodiff.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/ops/math.hpp"
#include "ops/conv_numeric_util.hpp"

using namespace convgraph;
using namespace convgraph::conv_test;
using Pairs = std::vector<std::pair<i64, i64>>;

namespace {

constexpr auto F64 = DType::float64;

// Bilinear interpolation written from its definition, not from convolutions: output j of an
// axis upsampled by p/q samples the source at s = (j*q - (p-1)//2) / p (Theano's alignment;
// it is the half-pixel-centre rule for odd p and shifted by 1/(2p) for even p), blending the
// two nearest source pixels linearly, with the border pixel repeated outside.
std::vector<double> interpolate(const Tensor& x, i64 pr, i64 qr, i64 pc, i64 qc) {
  const i64 B = x.dim(0), C = x.dim(1), R = x.dim(2), W = x.dim(3);
  const i64 oR = (R * pr + qr - 1) / qr, oW = (W * pc + qc - 1) / qc;
  auto taps = [](i64 j, i64 p, i64 q, i64 n) {
    const double s = static_cast<double>(j * q - (p - 1) / 2) / static_cast<double>(p);
    const double f = std::floor(s);
    const i64 i0 = static_cast<i64>(f);
    auto clamp = [n](i64 i) { return std::min(std::max<i64>(i, 0), n - 1); };
    return std::tuple{clamp(i0), clamp(i0 + 1), s - f};
  };
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (i64 b = 0; b < B * C; ++b)
    for (i64 i = 0; i < oR; ++i)
      for (i64 j = 0; j < oW; ++j) {
        const auto [r0, r1, fr] = taps(i, pr, qr, R);
        const auto [c0, c1, fc] = taps(j, pc, qc, W);
        auto at = [&](i64 r, i64 c) { return v[static_cast<std::size_t>((b * R + r) * W + c)]; };
        out.push_back((1 - fr) * ((1 - fc) * at(r0, c0) + fc * at(r0, c1)) +
                      fr * ((1 - fc) * at(r1, c0) + fc * at(r1, c1)));
      }
  return out;
}

double run1(const Var& in, const Var& out, const Tensor& value, const std::vector<double>& want) {
  const Function f = compile({in}, {out});
  const Tensor got = f({value})[0];
  REQUIRE(got.shape() == out.shape());
  return testing::max_abs_diff(got.to_vector(), want);
}

std::vector<double> reference(ConvDirection dir, const ConvParams& p, const Shp& xs, const Shp& ws,
                              const std::vector<double>& a, const std::vector<double>& b) {
  const ConvProblem pr = ConvProblem::make(dir, p, xs, ws, F64);
  testing::ConvOperands ops;
  ops.x.assign(static_cast<std::size_t>(pr.x_numel()), 0.0);
  ops.w.assign(static_cast<std::size_t>(pr.w_numel()), 0.0);
  ops.y.assign(static_cast<std::size_t>(pr.y_numel()), 0.0);
  switch (dir) {
    case ConvDirection::forward: ops.x = a, ops.w = b; break;
    case ConvDirection::grad_inputs: ops.w = a, ops.y = b; break;
    case ConvDirection::grad_weights: ops.x = a, ops.y = b; break;
  }
  return testing::reference_output(pr, ops);
}

}  // namespace

TEST_CASE("bilinear_upsampling matches direct interpolation (1-D and 2-D kernel paths)", "[conv][numeric][bilinear]") {
  double worst = 0;
  int runs = 0;
  for (i64 ratio = 1; ratio <= 5; ++ratio)
    for (bool one_d : {true, false}) {
      const Var x = input(F64, {2, 3, 4, 5}, "x");
      const Tensor v = random_tensor({2, 3, 4, 5}, 40 + static_cast<std::uint64_t>(ratio));
      const double err = run1(x, bilinear_upsampling(x, ratio, kUnknown, kUnknown, one_d), v,
                              interpolate(v, ratio, 1, ratio, 1));
      INFO("ratio " << ratio << (one_d ? " 1-D kernel" : " 2-D kernel"));
      CHECK(err < 1e-12);
      worst = std::max(worst, err);
      ++runs;
    }
  // Unknown batch: batch_size stands in for it.
  const Var xu = input(F64, {kUnknown, 3, 4, 5}, "xu");
  const Tensor v = random_tensor({2, 3, 4, 5}, 77);
  CHECK(run1(xu, bilinear_upsampling(xu, 3, 2), v, interpolate(v, 3, 1, 3, 1)) < 1e-12);
  // float32 input stays float32.
  const Var x32 = input(DType::float32, {1, 2, 3, 3}, "x32");
  const Tensor v32 = random_tensor({1, 2, 3, 3}, 78, DType::float32);
  CHECK(run1(x32, bilinear_upsampling(x32, 2), v32, interpolate(v32, 2, 1, 2, 1)) < 1e-5);
  WARN("bilinear_upsampling: " << runs << " ratio/path runs, max abs error " << worst);
}

TEST_CASE("frac_bilinear_upsampling matches direct interpolation", "[conv][numeric][bilinear]") {
  double worst = 0;
  const std::vector<std::pair<std::pair<i64, i64>, std::pair<i64, i64>>> ratios{
      {{3, 2}, {3, 2}}, {{5, 3}, {2, 1}}, {{4, 2}, {7, 4}}, {{1, 2}, {3, 1}}, {{6, 4}, {5, 5}}};
  for (const auto& [rr, rc] : ratios) {
    const Var x = input(F64, {1, 2, 5, 4}, "x");
    const Tensor v = random_tensor({1, 2, 5, 4}, 90);
    const i64 gr = std::gcd(rr.first, rr.second), gc = std::gcd(rc.first, rc.second);
    const double err = run1(x, frac_bilinear_upsampling(x, rr, rc), v,
                            interpolate(v, rr.first / gr, rr.second / gr, rc.first / gc, rc.second / gc));
    INFO(rr.first << "/" << rr.second << " x " << rc.first << "/" << rc.second);
    CHECK(err < 1e-12);
    worst = std::max(worst, err);
  }
  // An integer ratio written as a fraction gives bilinear_upsampling's result.
  const Var x = input(F64, {2, 1, 3, 4}, "x");
  const Tensor v = random_tensor({2, 1, 3, 4}, 91);
  CHECK(run1(x, frac_bilinear_upsampling(x, {3, 1}), v, interpolate(v, 3, 1, 3, 1)) < 1e-12);
  WARN("frac_bilinear_upsampling: " << ratios.size() + 1 << " ratios, max abs error " << worst);
}

TEST_CASE("conv2d_transpose, causal_conv1d, separable_conv2d, conv3D: values", "[conv][numeric][forms]") {
  {  // transpose = grad wrt inputs at stride input_dilation
    const Var x = input(F64, {2, 4, 5, 4}, "x"), w = input(F64, {4, 3, 3, 2}, "w");
    const Var t = conv2d_transpose(x, w, {2, 3, 10, 9}, {.border_mode = BorderMode({1, 0}), .input_dilation = {2, 2}});
    const Tensor xv = random_tensor({2, 4, 5, 4}, 1), wv = random_tensor({4, 3, 3, 2}, 2);
    ConvParams p;
    p.border = BorderMode({1, 0});
    p.stride = {2, 2};
    const auto want = reference(ConvDirection::grad_inputs, p, {2, 3, 10, 9}, {4, 3, 3, 2}, wv.to_vector(), xv.to_vector());
    const Tensor got = compile({x, w}, {t})({xv, wv})[0];
    CHECK(testing::max_abs_diff(got.to_vector(), want) < 1e-12);
  }
  {  // causal: out[b,k,t] = sum_{c,i} x[b,c, t*s - d*(K-1) + i*d] * w[k,c,K-1-i] (flip), zero before 0
    const i64 B = 2, C = 3, L = 11, Ko = 4, K = 3, d = 2, s = 2;
    const Var x = input(F64, {B, C, L}, "x"), w = input(F64, {Ko, C, K}, "w");
    const Var y = causal_conv1d(x, w, {}, {.subsample = s, .filter_dilation = d});
    const Tensor xv = random_tensor({B, C, L}, 3), wv = random_tensor({Ko, C, K}, 4);
    const Tensor got = compile({x, w}, {y})({xv, wv})[0];
    REQUIRE(got.shape() == Shp{B, Ko, (L - 1) / s + 1});
    double err = 0;
    for (i64 b = 0; b < B; ++b)
      for (i64 k = 0; k < Ko; ++k)
        for (i64 t = 0; t < got.dim(2); ++t) {
          double acc = 0;
          for (i64 c = 0; c < C; ++c)
            for (i64 i = 0; i < K; ++i) {
              const i64 src = t * s - d * (K - 1) + i * d;
              if (src >= 0) acc += xv.get((b * C + c) * L + src) * wv.get((k * C + c) * K + (K - 1 - i));
            }
          err = std::max(err, std::abs(acc - got.get((b * Ko + k) * got.dim(2) + t)));
        }
    CHECK(err < 1e-12);
  }
  {  // separable = depthwise (groups = C) then pointwise, each checked with the reference
    const Var x = input(F64, {2, 3, 7, 6}, "x"), dw = input(F64, {6, 1, 3, 3}, "dw"), pw = input(F64, {5, 6, 1, 1}, "pw");
    const Var y = separable_conv2d(x, dw, pw, 3, {.border_mode = "half", .subsample = {2, 1}, .filter_flip = false});
    const Tensor xv = random_tensor({2, 3, 7, 6}, 5), dv = random_tensor({6, 1, 3, 3}, 6), pv = random_tensor({5, 6, 1, 1}, 7);
    ConvParams p1;
    p1.border = "half";
    p1.stride = {2, 1};
    p1.groups = 3;
    p1.filter_flip = false;
    const auto mid = reference(ConvDirection::forward, p1, {2, 3, 7, 6}, {6, 1, 3, 3}, xv.to_vector(), dv.to_vector());
    ConvParams p2;
    p2.filter_flip = false;
    const auto want = reference(ConvDirection::forward, p2, {2, 6, 4, 6}, {5, 6, 1, 1}, mid, pv.to_vector());
    const Tensor got = compile({x, dw, pw}, {y})({xv, dv, pv})[0];
    CHECK(testing::max_abs_diff(got.to_vector(), want) < 1e-12);
  }
  {  // conv3D: H[b,r,c,t,j] = bias[j] + sum V[b, dr*r+k, dc*c+l, dt*t+m, z] * W[j,k,l,m,z]
    const Shp vs{2, 5, 4, 6, 3}, ws{4, 2, 3, 2, 3};
    const Shp d{2, 1, 3};
    const Var V = input(F64, vs, "V"), W = input(F64, ws, "W"), b = input(F64, {4}, "b");
    const Var H = conv3D(V, W, b, d);
    const Tensor vv = random_tensor(vs, 8), wv = random_tensor(ws, 9), bv = random_tensor({4}, 10);
    const Tensor got = compile({V, W, b}, {H})({vv, wv, bv})[0];
    REQUIRE(got.shape() == Shp{2, 2, 2, 2, 4});
    double err = 0;
    for (i64 n = 0; n < 2; ++n)
      for (i64 r = 0; r < 2; ++r)
        for (i64 c = 0; c < 2; ++c)
          for (i64 t = 0; t < 2; ++t)
            for (i64 j = 0; j < 4; ++j) {
              double acc = bv.get(j);
              for (i64 k = 0; k < 2; ++k)
                for (i64 l = 0; l < 3; ++l)
                  for (i64 m = 0; m < 2; ++m)
                    for (i64 z = 0; z < 3; ++z)
                      acc += vv.at<double>({n, d[0] * r + k, d[1] * c + l, d[2] * t + m, z}) *
                             wv.at<double>({j, k, l, m, z});
              err = std::max(err, std::abs(acc - got.at<double>({n, r, c, t, j})));
            }
    CHECK(err < 1e-12);
  }
}

TEST_CASE("cuDNN-style fprop/dgrad/wgrad run the same convolutions", "[conv][numeric][cudnn]") {
  const Shp xs{2, 4, 7, 6}, ws{6, 2, 3, 2};
  const auto attrs = ConvAttributes()
                         .set_pre_padding({1, 0})
                         .set_post_padding({0, 2})
                         .set_stride({2, 1})
                         .set_dilation({1, 2})
                         .set_convolution_mode(ConvolutionMode::CONVOLUTION)
                         .set_name("c");
  ConvParams p;
  p.border = BorderMode(Pairs{{1, 0}, {0, 2}});
  p.stride = {2, 1};
  p.dilation = {1, 2};
  p.groups = 2;
  p.filter_flip = true;
  const Shp ys = ConvProblem::make(ConvDirection::forward, p, xs, ws, F64).y_shape();
  const Var x = input(F64, xs, "x"), w = input(F64, ws, "w"), dy = input(F64, ys, "dy");
  const Tensor xv = random_tensor(xs, 11), wv = random_tensor(ws, 12), yv = random_tensor(ys, 13);
  const Var y = conv_fprop(x, w, attrs);
  const Var dx = conv_dgrad(dy, w, xs, attrs);
  const Var dw = conv_wgrad(x, dy, ws, attrs);
  const auto out = compile({x, w, dy}, {y, dx, dw})({xv, wv, yv});
  CHECK(testing::max_abs_diff(out[0].to_vector(),
                              reference(ConvDirection::forward, p, xs, ws, xv.to_vector(), wv.to_vector())) < 1e-12);
  CHECK(testing::max_abs_diff(out[1].to_vector(),
                              reference(ConvDirection::grad_inputs, p, xs, ws, wv.to_vector(), yv.to_vector())) < 1e-12);
  CHECK(testing::max_abs_diff(out[2].to_vector(),
                              reference(ConvDirection::grad_weights, p, xs, ws, xv.to_vector(), yv.to_vector())) < 1e-12);
}

TEST_CASE("assert_shape checks at run time and leaves the function usable", "[conv][numeric][assert_shape]") {
  const Var x = input(DType::float32, {kUnknown, 3}, "x");
  const Var y = assert_shape(x, {4, 3}, "need four rows") * 2.0;
  const Function f = compile({x}, {y});
  CHECK_THROWS_AS(f({Tensor::zeros(DType::float32, {2, 3})}), RuntimeError);
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {2, 3})}), Catch::Contains("need four rows"));
  const Tensor ok = f({Tensor::full(DType::float32, {4, 3}, 1.5)})[0];
  CHECK(ok.to_vector() == std::vector<double>(12, 3.0));
}

TEST_CASE("gradients with run-time target shapes (unknown static dims, stride 2)", "[conv][numeric][grad]") {
  const Var x = input(F64, {kUnknown, 2, kUnknown, kUnknown}, "x");
  const Var w = input(F64, {3, 2, 3, 3}, "w");
  const Var y = conv2d(x, w, {.border_mode = 1, .subsample = {2, 2}});
  const Var r = input(F64, {kUnknown, 3, kUnknown, kUnknown}, "r");
  const auto g = grad(sum(y * r), {x, w});
  const Function f = compile({x, w, r}, {g[0], g[1]});
  ConvParams p;
  p.border = 1;
  p.stride = {2, 2};
  for (const Shp& xs : {Shp{2, 2, 9, 8}, Shp{1, 2, 10, 11}}) {
    const Shp ys = ConvProblem::make(ConvDirection::forward, p, xs, {3, 2, 3, 3}, F64).y_shape();
    const Tensor xv = random_tensor(xs, 21), wv = random_tensor({3, 2, 3, 3}, 22), rv = random_tensor(ys, 23);
    const auto out = f({xv, wv, rv});
    REQUIRE(out[0].shape() == xs);
    CHECK(testing::max_abs_diff(out[0].to_vector(), reference(ConvDirection::grad_inputs, p, xs, {3, 2, 3, 3},
                                                              wv.to_vector(), rv.to_vector())) < 1e-12);
    CHECK(testing::max_abs_diff(out[1].to_vector(), reference(ConvDirection::grad_weights, p, xs, {3, 2, 3, 3},
                                                              xv.to_vector(), rv.to_vector())) < 1e-12);
  }
}
