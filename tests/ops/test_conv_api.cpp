// The convolution DSL: Theano-style options, shape hints, cuDNN-style attributes, composite
// forms, the older entry points, bilinear kernels and assert_shape (graph building only;
// test_conv_numeric.cpp runs them).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "convgraph/core/error.hpp"
#include "convgraph/core/print.hpp"
#include "convgraph/ops/conv.hpp"

using namespace convgraph;
using i64 = std::int64_t;
using Shp = std::vector<i64>;
using Pairs = std::vector<std::pair<i64, i64>>;
using Catch::Contains;

namespace {
constexpr auto F32 = DType::float32;
constexpr auto U = kUnknown;

const AbstractConvOp& conv_of(const Var& v) {
  const AbstractConvOp* o = as_abstract_conv(v);
  REQUIRE(o != nullptr);
  return *o;
}
}  // namespace

TEST_CASE("conv2d: designated-initializer options read like Theano keywords", "[conv][api]") {
  const Var x = input(F32, {8, 3, 32, 32}, "x");
  const Var w = input(F32, {16, 3, 3, 3}, "w");
  const Var y = conv2d(x, w, {.border_mode = "half", .subsample = {2, 2}, .filter_flip = false});
  CHECK(y.shape() == Shp{8, 16, 16, 16});
  const auto& p = conv_of(y).conv_params();
  CHECK(p.border.kind == BorderKind::half);
  CHECK(p.stride == Shp{2, 2});
  CHECK_FALSE(p.filter_flip);
  CHECK(conv_of(conv2d(x, w)).conv_params().filter_flip);  // Theano's default: convolution
  CHECK(conv2d(x, w).shape() == Shp{8, 16, 30, 30});
  CHECK(conv2d(x, w, {.border_mode = "full"}).shape() == Shp{8, 16, 34, 34});
  CHECK(conv2d(x, w, {.border_mode = 2}).shape() == Shp{8, 16, 34, 34});
  CHECK(conv2d(x, w, {.border_mode = {1, 0}}).shape() == Shp{8, 16, 32, 30});
  CHECK(conv2d(x, w, {.border_mode = Pairs{{2, 0}, {0, 1}}}).shape() == Shp{8, 16, 32, 31});
  CHECK(conv2d(x, w, {.filter_dilation = {2, 3}}).shape() == Shp{8, 16, 28, 26});
  const Var wg = input(F32, {15, 1, 3, 3}, "wg");
  CHECK(conv2d(x, wg, {.num_groups = 3}).shape() == Shp{8, 15, 30, 30});
  CHECK(conv2d(x, w, {.compute_dtype = DType::float64}).dtype() == F32);

  const Var x1 = input(F32, {2, 4, 50}, "x1");
  const Var w1 = input(F32, {6, 4, 5}, "w1");
  CHECK(conv1d(x1, w1, {.subsample = {3}}).shape() == Shp{2, 6, 16});
  const Var x3 = input(F32, {2, 4, 7, 8, 9}, "x3");
  const Var w3 = input(F32, {6, 2, 3, 3, 3}, "w3");
  CHECK(conv3d(x3, w3, {.border_mode = "half", .subsample = {1, 2, 3}, .num_groups = 2}).shape() ==
        Shp{2, 6, 7, 4, 3});
  CHECK_THROWS_AS(conv3d(x, w), ShapeError);
  CHECK_THROWS_WITH(conv1d(x, w), Contains("conv1d") && Contains("'input'") && Contains("rank 3"));
  CHECK_THROWS_AS(conv2d(x, w, {.subsample = {1, 1, 1}}), ValueError);
}

TEST_CASE("shape hints: checked against static types, used where those are unknown", "[conv][api]") {
  const Var x = input(F32, {U, 3, U, U}, "x");
  const Var w = input(F32, {16, 3, 3, 3}, "w");
  CHECK(conv2d(x, w).shape() == Shp{U, 16, U, U});
  const Var y = conv2d(x, w, {.input_shape = {4, 3, 20, U}, .filter_shape = {16, 3, 3, 3}});
  CHECK(y.shape() == Shp{4, 16, 18, U});
  REQUIRE(y.inputs()[0].op());
  CHECK(y.inputs()[0].op()->name() == "AssertShape");
  CHECK(y.inputs()[1].same(w));  // the filter hint adds nothing: no check node
  CHECK_THROWS_AS(conv2d(x, w, {.filter_shape = {16, 3, 5, 3}}), ShapeError);
  CHECK_THROWS_WITH(conv2d(x, w, {.filter_shape = {16, 3, 5, 3}}),
                    Contains("conv2d") && Contains("filter_shape") && Contains("(16, 3, 5, 3)"));
  CHECK_THROWS_WITH(conv2d(x, w, {.input_shape = {4, 3, 20}}), Contains("input_shape") && Contains("4 entries"));
}

TEST_CASE("conv*_grad_wrt_inputs / _weights: mandatory target shapes", "[conv][api]") {
  const Var gy = input(F32, {8, 16, 15, 15}, "gy");
  const Var w = input(F32, {16, 3, 3, 3}, "w");
  const Var dx = conv2d_grad_wrt_inputs(gy, w, {8, 3, 32, 31}, {.subsample = {2, 2}});
  CHECK(dx.shape() == Shp{8, 3, 32, 31});
  CHECK(conv_of(dx).direction() == ConvDirection::grad_inputs);
  CHECK(conv2d_grad_wrt_inputs(gy, w, {U, U, 32, 32}, {.subsample = {2, 2}}).shape() == Shp{8, 3, 32, 32});
  // Stride 1 does not need the spatial dims.
  CHECK(conv2d_grad_wrt_inputs(gy, w, {U, U, U, U}).shape() == Shp{8, 3, 17, 17});
  CHECK_THROWS_WITH(conv2d_grad_wrt_inputs(gy, w, {U, U, U, U}, {.subsample = {2, 2}}),
                    Contains("ambiguous") && Contains("input_shape"));
  CHECK_THROWS_WITH(conv2d_grad_wrt_inputs(gy, w, {8, 3, 40, 40}, {.subsample = {2, 2}}),
                    Contains("invalid input_shape"));
  CHECK_THROWS_WITH(conv2d_grad_wrt_inputs(gy, w, {8, 3, 32}), Contains("input_shape") && Contains("4 entries"));
  CHECK_THROWS_AS(conv2d_grad_wrt_inputs(gy, w, {8, 3, 32, 31}, {.input_shape = {8, 3, 32, 32}}), ValueError);

  const Var x = input(F32, {8, 3, 32, 31}, "x");
  const Var dw = conv2d_grad_wrt_weights(x, gy, {16, 3, 3, 3}, {.subsample = {2, 2}});
  CHECK(dw.shape() == Shp{16, 3, 3, 3});
  CHECK(conv_of(dw).direction() == ConvDirection::grad_weights);
  CHECK(conv2d_grad_wrt_weights(x, gy, {U, U, 3, 3}, {.subsample = {2, 2}}).shape() == Shp{16, 3, 3, 3});
  CHECK_THROWS_AS(conv2d_grad_wrt_weights(x, gy, {U, U, U, 3}, {.subsample = {2, 2}}), ShapeError);

  const Var gy1 = input(F32, {2, 6, 10}, "gy1");
  CHECK(conv1d_grad_wrt_inputs(gy1, input(F32, {6, 4, 3}, "w1"), {2, 4, 12}).shape() == Shp{2, 4, 12});
  CHECK(conv1d_grad_wrt_weights(input(F32, {2, 4, 12}, "x1"), gy1, {6, 4, 3}).shape() == Shp{6, 4, 3});
  const Var gy3 = input(F32, {1, 4, 3, 3, 3}, "gy3");
  CHECK(conv3d_grad_wrt_inputs(gy3, input(F32, {4, 2, 2, 2, 2}, "w3"), {1, 2, 4, 4, 4}).shape() ==
        Shp{1, 2, 4, 4, 4});
  CHECK(conv3d_grad_wrt_weights(input(F32, {1, 2, 4, 4, 4}, "x3"), gy3, {4, 2, 2, 2, 2}).shape() ==
        Shp{4, 2, 2, 2, 2});
}

TEST_CASE("cuDNN-style attributes build the same nodes as the Theano-style API", "[conv][api][cudnn]") {
  const Var x = input(F32, {2, 6, 11, 12}, "x");
  const Var w = input(F32, {4, 3, 3, 3}, "w");
  const Var a = conv_fprop(x, w, ConvAttributes().set_padding({1, 1}).set_stride({2, 2}).set_dilation({1, 1}));
  const Var b = conv2d(x, w, {.border_mode = 1, .subsample = {2, 2}, .filter_flip = false, .num_groups = 2});
  CHECK(a.shape() == b.shape());
  CHECK(conv_of(a).equals(conv_of(b)));  // default mode is cross-correlation; groups from the filter
  const Var c = conv_fprop(x, w, ConvAttributes()
                                     .set_pre_padding({0, 2})
                                     .set_post_padding({1, 0})
                                     .set_convolution_mode(ConvolutionMode::CONVOLUTION)
                                     .set_compute_data_type(DType::float64)
                                     .set_name("conv1"));
  const auto& p = conv_of(c).conv_params();
  CHECK(p.filter_flip);
  CHECK(p.border.pads == Pairs{{0, 1}, {2, 0}});
  CHECK(p.compute_dtype == DType::float64);
  CHECK(p.groups == 2);
  CHECK(c.name() == "conv1");
  CHECK(c.shape() == Shp{2, 4, 10, 12});
  CHECK(debugprint(c).find("conv1") != std::string::npos);

  const Var dy = input(F32, {2, 4, 6, 6}, "dy");
  const Var dx = conv_dgrad(dy, w, ConvAttributes().set_padding({1, 1}).set_stride({2, 2}).set_input_dims({2, 6, 11, 12}));
  CHECK(dx.shape() == Shp{2, 6, 11, 12});
  CHECK(conv_of(dx).direction() == ConvDirection::grad_inputs);
  CHECK(conv_dgrad(dy, w, {2, 6, 12, 11}, ConvAttributes().set_padding({1, 1}).set_stride({2, 2})).shape() ==
        Shp{2, 6, 12, 11});
  CHECK_THROWS_WITH(conv_dgrad(dy, w, ConvAttributes().set_stride({2, 2})),
                    Contains("conv_dgrad") && Contains("set_input_dims"));
  const Var dw = conv_wgrad(x, dy, ConvAttributes().set_padding({1, 1}).set_stride({2, 2}).set_filter_dims({4, 3, 3, 3}));
  CHECK(dw.shape() == Shp{4, 3, 3, 3});
  CHECK(conv_of(dw).conv_params().groups == 2);
  CHECK_THROWS_AS(conv_wgrad(x, dy, ConvAttributes()), ValueError);

  CHECK_THROWS_WITH(conv_fprop(x, w, ConvAttributes().set_stride({1, 1, 1})),
                    Contains("conv_fprop") && Contains("stride") && Contains("3 entries"));
  CHECK_THROWS_WITH(conv_fprop(x, input(F32, {4, 4, 3, 3}, "w4")), Contains("6 channels") && Contains("4 channels per group"));
  CHECK_THROWS_AS(conv_fprop(x, w, ConvAttributes().set_padding({-1, 0})), ValueError);
  CHECK_THROWS_AS(ConvAttributes().set_group_count(0), ValueError);
  // Unknown channels: the group count comes from set_group_count (default 1).
  const Var xu = input(F32, {2, U, 11, 12}, "xu");
  CHECK(conv_of(conv_fprop(xu, w, ConvAttributes().set_group_count(2))).conv_params().groups == 2);
  const Var x1 = input(F32, {1, 2, 9}, "x1");
  CHECK(conv_fprop(x1, input(F32, {3, 2, 3}, "w1"), ConvAttributes().set_padding({1})).shape() == Shp{1, 3, 9});
}

TEST_CASE("composite forms: transpose, causal, separable, conv3D, fft", "[conv][api]") {
  const Var x = input(F32, {2, 4, 5, 5}, "x");
  const Var w = input(F32, {4, 3, 3, 3}, "w");
  const Var t = conv2d_transpose(x, w, {2, 3, 11, 11}, {.input_dilation = {2, 2}});
  CHECK(t.shape() == Shp{2, 3, 11, 11});
  CHECK(conv_of(t).direction() == ConvDirection::grad_inputs);
  CHECK(conv_of(t).conv_params().stride == Shp{2, 2});
  CHECK(conv2d_transpose(x, w, {2, 3, 12, 12}, {.input_dilation = {2, 2}}).shape() == Shp{2, 3, 12, 12});
  CHECK_THROWS_AS(conv2d_transpose(x, w, {2, 3, 13, 13}, {.input_dilation = {2, 2}}), ShapeError);
  CHECK(conv3d_transpose(input(F32, {1, 4, 2, 2, 2}, "x3"), input(F32, {4, 2, 2, 2, 2}, "w3"), {1, 2, 3, 3, 3})
            .shape() == Shp{1, 2, 3, 3, 3});

  const Var seq = input(F32, {3, 4, 20}, "seq");
  const Var cf = input(F32, {6, 4, 3}, "cf");
  const Var causal = causal_conv1d(seq, cf, {}, {.filter_dilation = 2});
  CHECK(causal.shape() == Shp{3, 6, 20});
  CHECK(conv_of(causal).conv_params().border.pads == Pairs{{4, 0}});
  CHECK(causal_conv1d(seq, cf, {6, 4, 3}, {.subsample = 2}).shape() == Shp{3, 6, 10});
  CHECK_THROWS_WITH(causal_conv1d(seq, input(F32, {6, 4, U}, "cu")), Contains("causal_conv1d") && Contains("filter_shape"));
  CHECK(causal_conv1d(seq, input(F32, {6, 4, U}, "cu"), {6, 4, 5}).shape() == Shp{3, 6, 20});

  const Var img = input(F32, {2, 3, 10, 10}, "img");
  const Var dwf = input(F32, {6, 1, 3, 3}, "depthwise");
  const Var pwf = input(F32, {8, 6, 1, 1}, "pointwise");
  const Var sep = separable_conv2d(img, dwf, pwf, 3, {.border_mode = "half", .subsample = {2, 2}});
  CHECK(sep.shape() == Shp{2, 8, 5, 5});
  const auto& depthwise = conv_of(sep.inputs()[0]);
  CHECK(depthwise.conv_params().groups == 3);
  CHECK(depthwise.conv_params().stride == Shp{2, 2});
  CHECK(conv_of(sep).conv_params().stride == Shp{1, 1});
  CHECK(conv_of(sep).conv_params().border.kind == BorderKind::valid);
  CHECK_THROWS_AS(separable_conv2d(img, dwf, pwf, 4), ShapeError);
  CHECK(separable_conv3d(input(F32, {1, 2, 4, 4, 4}, "v"), input(F32, {4, 1, 3, 3, 3}, "dw3"),
                         input(F32, {5, 4, 1, 1, 1}, "pw3"), 2)
            .shape() == Shp{1, 5, 2, 2, 2});

  const Var V = input(F32, {2, 9, 8, 7, 3}, "V");
  const Var W = input(F32, {5, 3, 2, 2, 3}, "W");
  const Var bias = input(F32, {5}, "b");
  CHECK(conv3D(V, W, bias, {2, 1, 3}).shape() == Shp{2, 4, 7, 2, 5});
  CHECK_THROWS_AS(conv3D(V, W, input(F32, {4}, "b4"), {1, 1, 1}), ShapeError);
  CHECK_THROWS_AS(conv3D(V, W, bias, {1, 1}), ValueError);

  const Var f = conv2d_fft(img, input(F32, {4, 3, 3, 3}, "wf"));
  CHECK(conv_of(f).conv_params().request_fft);
  CHECK(conv_of(f).params().find("fft") != std::string::npos);
  CHECK(conv_of(conv3d_fft(input(F32, {1, 1, 4, 4, 4}, "v3"), input(F32, {1, 1, 2, 2, 2}, "k3"))).conv_params().request_fft);
  const Var nofft = conv2d(img, input(F32, {4, 3, 3, 3}, "wn"), {.allow_fft = false});
  CHECK_FALSE(conv_of(nofft).conv_params().allow_fft);
  CHECK_FALSE(conv_of(nofft).equals(conv_of(conv2d(img, input(F32, {4, 3, 3, 3}, "wn2")))));
  CHECK_THROWS_AS(conv2d_fft(img, input(F32, {4, 3, 3, 3}, "wx"), {.allow_fft = false}), ValueError);
}

TEST_CASE("bilinear kernels: closed forms for ratios 1..9", "[conv][bilinear]") {
  for (i64 r = 1; r <= 9; ++r) {
    const Tensor k = bilinear_kernel_1d(r, true, DType::float64);
    REQUIRE(k.shape() == Shp{2 * r - 1});
    const Tensor ku = bilinear_kernel_1d(r, false, DType::float64);
    for (i64 i = 0; i < 2 * r - 1; ++i) {
      const double want = static_cast<double>(r - std::abs(i - (r - 1)));
      CHECK(ku.get(i) == want);
      CHECK(k.get(i) == Approx(want / static_cast<double>(r)));
    }
    const Tensor k2 = bilinear_kernel_2d(r, true, DType::float64);
    const Tensor k2u = bilinear_kernel_2d(r, false, DType::float64);
    REQUIRE(k2.shape() == Shp{2 * r - 1, 2 * r - 1});
    for (i64 i = 0; i < 2 * r - 1; ++i)
      for (i64 j = 0; j < 2 * r - 1; ++j) {
        CHECK(k2u.get(i * (2 * r - 1) + j) == ku.get(i) * ku.get(j));
        CHECK(k2.get(i * (2 * r - 1) + j) == Approx(ku.get(i) * ku.get(j) / static_cast<double>(r * r)));
      }
  }
  const Tensor k2 = bilinear_kernel_1d(2);
  CHECK(k2.dtype() == F32);
  CHECK(k2.to_vector() == std::vector<double>{0.5, 1.0, 0.5});
  const Tensor rect = bilinear_kernel_2d({2, 3}, false, DType::float64);
  CHECK(rect.shape() == Shp{3, 5});
  CHECK(rect.get(1 * 5 + 2) == 6.0);
  CHECK_THROWS_AS(bilinear_kernel_1d(0), ValueError);
}

TEST_CASE("bilinear_upsampling and frac_bilinear_upsampling: shapes and arguments", "[conv][bilinear]") {
  const Var x = input(F32, {2, 3, 5, 7}, "x");
  for (i64 r = 1; r <= 4; ++r) {
    CHECK(bilinear_upsampling(x, r).shape() == Shp{2, 3, 5 * r, 7 * r});
    CHECK(bilinear_upsampling(x, r, U, U, false).shape() == Shp{2, 3, 5 * r, 7 * r});
  }
  const Var xu = input(F32, {U, 3, 5, 7}, "xu");
  CHECK(bilinear_upsampling(xu, 2).shape()[1] == 3);
  CHECK(bilinear_upsampling(xu, 2, 4).shape() == Shp{4, 3, 10, 14});
  CHECK_THROWS_AS(bilinear_upsampling(input(F32, {U, U, 5, 7}, "xuu"), 2), ValueError);
  CHECK_THROWS_WITH(bilinear_upsampling(input(F32, {2, 3, U, 7}, "xr"), 2),
                    Contains("bilinear_upsampling") && Contains("rows and cols"));
  CHECK_THROWS_AS(bilinear_upsampling(x, 2, 3), ShapeError);
  CHECK_THROWS_AS(bilinear_upsampling(x, 0), ValueError);
  CHECK_THROWS_AS(bilinear_upsampling(input(F32, {2, 5, 7}, "x3"), 2), ShapeError);

  CHECK(frac_bilinear_upsampling(x, {3, 2}).shape() == Shp{2, 3, 8, 11});  // ceil(5*1.5), ceil(7*1.5)
  CHECK(frac_bilinear_upsampling(x, {4, 2}).shape() == Shp{2, 3, 10, 14});  // reduced to 2/1
  CHECK(frac_bilinear_upsampling(x, {5, 3}, {1, 2}).shape() == Shp{2, 3, 9, 4});
  CHECK_THROWS_AS(frac_bilinear_upsampling(x, {0, 2}), ValueError);
}

TEST_CASE("assert_shape: build-time conflicts, type refinement, run-time RuntimeError", "[conv][assert_shape]") {
  const Var x = input(F32, {U, 3, U}, "x");
  const Var a = assert_shape(x, {4, 3, U}, "batch must be 4");
  CHECK(a.shape() == Shp{4, 3, U});
  REQUIRE(a.op());
  CHECK(a.op()->name() == "AssertShape");
  CHECK_FALSE(a.op()->foldable());
  CHECK(a.op()->params().find("batch must be 4") != std::string::npos);
  CHECK(assert_shape(x, {U, 3, U}).same(x));  // nothing to add
  CHECK_THROWS_AS(assert_shape(x, {4, 2, U}, "channels"), ShapeError);
  CHECK_THROWS_WITH(assert_shape(x, {4, 2, U}, "channels"), Contains("channels") && Contains("(4, 2, ?)"));
  CHECK_THROWS_WITH(assert_shape(x, {4, 3}, "rank"), Contains("rank 3") && Contains("rank 2"));
  CHECK(assert_shape(x, {4, 3, U}, "m").op()->equals(*assert_shape(x, {4, 3, U}, "m").op()));

  const auto& op = *a.op();
  Tensor in = Tensor::from({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24},
                           {4, 3, 2}, F32);
  Tensor out(F32, {4, 3, 2});
  op.perform({in}, out, {});
  CHECK(out.to_vector() == in.to_vector());
  Tensor bad(F32, {2, 3, 2});
  bad.fill(0);
  Tensor out2(F32, {4, 3, 2});
  CHECK_THROWS_AS(op.perform({bad}, out2, {}), RuntimeError);
  CHECK_THROWS_WITH(op.perform({bad}, out2, {}), Contains("batch must be 4") && Contains("(2, 3, 2)"));
}
