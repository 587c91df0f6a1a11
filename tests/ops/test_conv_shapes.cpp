// Convolution shape helpers (Theano's get_conv_* family) and ConvParams normalisation:
// Theano's worked examples, the grad-shape sweep of TestConvGradInputsShape, unknown
// dimensions, and every bad parameter.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "convgraph/core/error.hpp"
#include "convgraph/conv/conv_params.hpp"

using namespace convgraph;
using i64 = std::int64_t;
using Shp = std::vector<i64>;
using Pairs = std::vector<std::pair<i64, i64>>;

TEST_CASE("get_conv_output_shape: Theano's worked examples (2-D and 3-D)", "[conv][shape]") {
  const Shp img{3, 2, 12, 9}, ker{4, 2, 5, 6};
  const Shp s{1, 2}, d{2, 1};
  CHECK(get_conv_output_shape(img, ker, "valid", s, d) == Shp{3, 4, 4, 2});
  CHECK(get_conv_output_shape(img, ker, "half", s, d) == Shp{3, 4, 12, 5});
  CHECK(get_conv_output_shape(img, ker, "full", s, d) == Shp{3, 4, 20, 7});
  CHECK(get_conv_output_shape(img, ker, BorderMode({1, 2}), s, d) == Shp{3, 4, 6, 4});

  const Shp img3{3, 2, 12, 9, 7}, ker3{4, 2, 5, 6, 4};
  const Shp s3{1, 2, 1}, d3{2, 1, 1};
  CHECK(get_conv_output_shape(img3, ker3, "valid", s3, d3) == Shp{3, 4, 4, 2, 4});
  CHECK(get_conv_output_shape(img3, ker3, "half", s3, d3) == Shp{3, 4, 12, 5, 8});
  CHECK(get_conv_output_shape(img3, ker3, "full", s3, d3) == Shp{3, 4, 20, 7, 10});
  CHECK(get_conv_output_shape(img3, ker3, BorderMode({1, 2, 3}), s3, d3) == Shp{3, 4, 6, 4, 10});
  // 'same' is Theano's 'half'; an even kernel at stride 1 grows the output by one.
  CHECK(get_conv_output_shape({1, 1, 8, 8}, {1, 1, 4, 4}, "same", {}, {}) == Shp{1, 1, 9, 9});
  // Asymmetric (pre, post) padding works in 1-D, 2-D and 3-D alike.
  CHECK(get_conv_output_shape({1, 1, 10}, {1, 1, 3}, BorderMode(Pairs{{2, 0}}), {}, {}) == Shp{1, 1, 10});
  CHECK(get_conv_output_shape({1, 1, 4, 4, 4}, {1, 1, 2, 2, 2}, BorderMode(Pairs{{1, 0}, {0, 2}, {3, 3}}), {}, {}) ==
        Shp{1, 1, 4, 5, 9});
}

TEST_CASE("get_conv_shape_1axis: formula, floor division and unknown dims", "[conv][shape]") {
  CHECK(get_conv_shape_1axis(7, 3, "valid", 0, 2) == 3);
  CHECK(get_conv_shape_1axis(8, 3, "valid", 0, 2) == 3);
  CHECK(get_conv_shape_1axis(8, 3, "full", 0, 3) == 4);   // (8 + 4 - 3) // 3 + 1
  CHECK(get_conv_shape_1axis(5, 3, "half", 0, 1, 2) == 5);  // dilated 5, pad 2
  CHECK(get_conv_shape_1axis(2, 5, "valid", 0, 1) == -2);   // floor((2 - 5) / 1) + 1: no check here
  CHECK(get_conv_shape_1axis(2, 5, "valid", 0, 2) == -1);   // Python floor division of -3 by 2
  CHECK(get_conv_shape_1axis(kUnknown, 3, "valid", 0, 1) == kUnknown);
  CHECK(get_conv_shape_1axis(7, kUnknown, "half", 0, 1) == kUnknown);
  CHECK(get_conv_shape_1axis(7, kUnknown, 2, 0, 1) == kUnknown);
  CHECK(get_conv_output_shape({kUnknown, 3, kUnknown, 10}, {5, 3, 3, 3}, "valid", {}, {}) ==
        Shp{kUnknown, 5, kUnknown, 8});
  CHECK(conv_output_size(10, 3, 2, 1, 1, 1) == 5);
  CHECK(conv_output_size(10, 3, 2, 1, kUnknown, 1) == kUnknown);
}

TEST_CASE("shape helpers reject bad parameters with named values", "[conv][shape][errors]") {
  CHECK_THROWS_AS(get_conv_shape_1axis(7, 3, BorderMode({-1}), 0, 1), ValueError);
  CHECK_THROWS_WITH(get_conv_shape_1axis(7, 3, BorderMode(Pairs{{1, -2}}), 0, 1),
                    Catch::Contains("border_mode must be >= 0") && Catch::Contains("(1, -2)"));
  CHECK_THROWS_WITH(get_conv_shape_1axis(7, 3, "valid", 0, 0), Catch::Contains("subsample") && Catch::Contains("0"));
  CHECK_THROWS_WITH(get_conv_shape_1axis(7, 3, "valid", 0, 1, 0), Catch::Contains("filter_dilation"));
  CHECK_THROWS_AS(get_conv_gradinputs_shape_1axis(3, 5, BorderMode({-1}), 0, 1), ValueError);
  CHECK_THROWS_AS(get_conv_gradweights_shape_1axis(7, 5, BorderMode({-3}), 0, 1), ValueError);
  CHECK_THROWS_AS(get_conv_gradinputs_shape_1axis(3, 5, "valid", 0, 0), ValueError);
  CHECK_THROWS_AS(conv_output_size(10, 3, 0, 1, 0, 0), ValueError);
  CHECK_THROWS_WITH(get_conv_output_shape({1, 2, 5, 5}, {1, 2, 3}, "valid", {}, {}),
                    Catch::Contains("(1, 2, 5, 5)") && Catch::Contains("(1, 2, 3)"));
  CHECK_THROWS_AS(get_conv_output_shape({1, 2, 5, 5}, {1, 2, 3}, "valid", {}, {}), ShapeError);
  CHECK_THROWS_WITH(get_conv_output_shape({1, 2, 5, 5}, {1, 2, 3, 3}, "valid", {1}, {}),
                    Catch::Contains("subsample") && Catch::Contains("(1)"));
  CHECK_THROWS_AS(get_conv_output_shape({1, 2, 5, 5}, {1, 2, 3, 3}, BorderMode({1, 2, 3}), {}, {}), ValueError);
  CHECK_THROWS_AS(get_conv_gradweights_shape({1, 2, 5, 5}, {1, 2, 3, 3}, "valid", {}, {}, 0), ValueError);
  CHECK_THROWS_AS(BorderMode("samee"), ValueError);
  CHECK_THROWS_WITH(BorderMode("samee"), Catch::Contains("samee") && Catch::Contains("'half'"));
  // Theano answers False, not an exception, for shapes of different ranks.
  CHECK_FALSE(check_conv_gradinputs_shape({1, 1, 5, 5}, {1, 1, 3, 3}, {1, 1, 3}, "valid", {}, {}));
}

TEST_CASE("assert_conv_shape: batch/channels >= 0, spatial > 0, unknown accepted", "[conv][shape][errors]") {
  CHECK_NOTHROW(assert_conv_shape({0, 0, 1, 1}));
  CHECK_NOTHROW(assert_conv_shape({kUnknown, 3, kUnknown, 4}));
  CHECK_THROWS_AS(assert_conv_shape({-2, 3, 4, 4}), ShapeError);
  CHECK_THROWS_WITH(assert_conv_shape({2, 3, 0, 4}, "GpuDnnConv"),
                    Catch::Contains("GpuDnnConv") && Catch::Contains("dim[2]: 0 <= 0"));
  CHECK_THROWS_WITH(assert_conv_shape({2, -5, 1, 4}), Catch::Contains("dim[1]: -5 < 0"));
}

TEST_CASE("get_conv_grad*_shape: the TestConvGradInputsShape sweep", "[conv][shape]") {
  const std::vector<BorderMode> borders{"valid", "half", "full", BorderMode({0, 2})};
  int checked = 0;
  for (i64 i = 1; i <= 19; ++i)
    for (i64 k = 1; k <= 9; ++k)
      for (const auto& border : borders)
        for (const Shp& s : {Shp{1, 1}, Shp{2, 2}, Shp{3, 3}, Shp{2, 3}})
          for (i64 d = 1; d <= 3; ++d) {
            const Shp img{59, 61, i, i}, ker{67, 61, k, k}, dil{d, d};
            const Shp out = get_conv_output_shape(img, ker, border, s, dil);
            if (out[2] < 1 || out[3] < 1) continue;
            ++checked;
            INFO("i=" << i << " k=" << k << " border=" << border.to_string() << " s=" << s[0] << "," << s[1]
                      << " d=" << d);
            CHECK(check_conv_gradinputs_shape(img, ker, out, border, s, dil));
            CHECK(check_conv_gradinputs_shape(img, ker, {kUnknown, kUnknown, out[2], kUnknown}, border, s, dil));
            if (out[2] != 1 || out[3] != 1) CHECK_FALSE(check_conv_gradinputs_shape(img, ker, {59, 67, 1, 1}, border, s, dil));
            for (i64 off : {-3, -2, -1, 1, 2, 3})
              if (out[2] + off >= 0)  // a negative entry would read as "unknown"
                CHECK_FALSE(check_conv_gradinputs_shape(img, ker, {59, 67, out[2] + off, out[3]}, border, s, dil));

            const Shp gi = get_conv_gradinputs_shape(ker, out, border, s, dil);
            CHECK(gi[0] == 59);
            CHECK(gi[1] == 61);
            CHECK(gi[2] == (s[0] == 1 ? i : kUnknown));
            CHECK(gi[3] == (s[1] == 1 ? i : kUnknown));

            const Shp gw = get_conv_gradweights_shape(img, out, border, s, dil);
            CHECK(gw[0] == 67);
            CHECK(gw[1] == 61);
            const bool ambiguous = border.kind == BorderKind::half;
            CHECK(gw[2] == (s[0] == 1 && !ambiguous ? k : kUnknown));
            CHECK(gw[3] == (s[1] == 1 && !ambiguous ? k : kUnknown));
          }
  WARN("TestConvGradInputsShape sweep: " << checked << " geometries");
  CHECK(checked > 2000);
}

TEST_CASE("get_conv_grad*_shape: groups, unknown dims and ambiguity", "[conv][shape]") {
  // groups scale the channels: gradinputs multiplies, gradweights divides.
  CHECK(get_conv_gradinputs_shape({6, 2, 3, 3}, {4, 6, 5, 5}, "valid", {}, {}, 3) == Shp{4, 6, 7, 7});
  CHECK(get_conv_gradweights_shape({4, 6, 7, 7}, {4, 6, 5, 5}, "valid", {}, {}, 3) == Shp{6, 2, 3, 3});
  CHECK(get_conv_gradinputs_shape({6, kUnknown, 3, 3}, {kUnknown, 6, kUnknown, 5}, "full", {}, {}) ==
        Shp{kUnknown, kUnknown, kUnknown, 3});
  // A dilation that does not divide the extent has no integer kernel: unknown (Theano: a float).
  CHECK(get_conv_gradweights_shape_1axis(10, 6, "valid", 0, 1, 2) == 3);
  CHECK(get_conv_gradweights_shape_1axis(10, 7, "valid", 0, 1, 2) == kUnknown);
  CHECK(get_conv_gradweights_shape_1axis(6, 10, "full", 0, 1, 2) == 3);
  CHECK(get_conv_gradweights_shape_1axis(10, 9, BorderMode(Pairs{{1, 0}}), 0, 1) == 3);
  CHECK(get_conv_gradweights_shape_1axis(10, 10, "half", 0, 1) == kUnknown);
  CHECK(get_conv_gradweights_shape_1axis(10, 4, "valid", 0, 2) == kUnknown);
  CHECK(get_conv_gradinputs_shape_1axis(3, 8, "half", 0, 1) == 8);
  CHECK(get_conv_gradinputs_shape_1axis(kUnknown, 8, "half", 0, 1) == kUnknown);
  CHECK(get_conv_gradinputs_shape_1axis(3, 8, "valid", 0, 2) == kUnknown);
}

TEST_CASE("ConvParams::normalized fills defaults and names every bad value", "[conv][params][errors]") {
  ConvParams p;
  p.ndim = 3;
  p.border = 2;
  const ConvParams n = p.normalized("conv3d");
  CHECK(n.stride == Shp{1, 1, 1});
  CHECK(n.dilation == Shp{1, 1, 1});
  CHECK(n.border.pads == Pairs{{2, 2}, {2, 2}, {2, 2}});

  ConvParams zero;
  zero.border = BorderMode(Pairs{{0, 0}, {0, 0}});
  CHECK(zero.normalized("x").border.kind == BorderKind::valid);  // Theano: (0, 0) is 'valid'
  ConvParams sym;
  sym.border = 1;
  ConvParams per_axis;
  per_axis.border = BorderMode({1, 1});
  CHECK(sym.normalized("x") == per_axis.normalized("x"));
  CHECK(sym.normalized("x").to_string() == per_axis.normalized("x").to_string());

  auto bad = [](auto mutate) {
    ConvParams q;
    mutate(q);
    return q;
  };
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.stride = {1, 1, 1}; }).normalized("conv2d"),
                    Catch::Contains("conv2d") && Catch::Contains("subsample") && Catch::Contains("(1, 1, 1)"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.stride = {1, 0}; }).normalized("conv2d"),
                    Catch::Contains("subsample") && Catch::Contains("(1, 0)"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.dilation = {0, 1}; }).normalized("conv2d"),
                    Catch::Contains("filter_dilation") && Catch::Contains("(0, 1)"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.border = -1; }).normalized("conv2d"),
                    Catch::Contains("border_mode must be >= 0"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.border = BorderMode({1, 2, 3}); }).normalized("conv2d"),
                    Catch::Contains("border_mode") && Catch::Contains("2 entries"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.groups = 0; }).normalized("conv2d"), Catch::Contains("num_groups"));
  CHECK_THROWS_WITH(bad([](ConvParams& q) { q.ndim = 4; }).normalized("convNd"), Catch::Contains("1, 2 or 3"));
  for (auto f : {+[](ConvParams& q) { q.stride = {1}; }, +[](ConvParams& q) { q.dilation = {-1, 1}; },
                 +[](ConvParams& q) { q.border = BorderMode(Pairs{{-1, 0}, {0, 0}}); }})
    CHECK_THROWS_AS(bad(f).normalized("conv2d"), ValueError);
}

TEST_CASE("BorderMode: designated-initializer-friendly forms and canonical text", "[conv][params]") {
  BorderMode valid = "valid", full = "full", half = "same";
  CHECK(valid.kind == BorderKind::valid);
  CHECK(full.kind == BorderKind::full);
  CHECK(half.kind == BorderKind::half);
  BorderMode i = 3;
  CHECK(i.pads == Pairs{{3, 3}});
  BorderMode per = {1, 2};
  CHECK(per.pads == Pairs{{1, 1}, {2, 2}});
  BorderMode pairs = Pairs{{1, 2}, {3, 3}};
  CHECK(pairs.to_string() == "((1, 2), 3)");
  CHECK(per.axis_pads(1, 99) == std::pair<i64, i64>{2, 2});
  CHECK(full.axis_pads(0, 5) == std::pair<i64, i64>{4, 4});
  CHECK(half.axis_pads(0, 4) == std::pair<i64, i64>{2, 2});
  CHECK(half.axis_pads(0, kUnknown) == std::pair<i64, i64>{kUnknown, kUnknown});
  CHECK_THROWS_AS(per.axis_pads(2, 3), ValueError);
}
