// AbstractConvOp: inference with unknown dims, every bad input, merging, problem(),
// flops(), tags() and the gradient structure (first and second order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "convgraph/ops/autodiff.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/optimizer/conv_lowering.hpp"

using namespace convgraph;
using i64 = std::int64_t;
using Shp = std::vector<i64>;
using Catch::Contains;

namespace {

constexpr auto F32 = DType::float32;
constexpr auto U = kUnknown;

TensorType tt(Shp s, DType d = F32) { return TensorType{d, std::move(s), DeviceKind::cpu}; }

AbstractConvOp op(ConvDirection dir, ConvParams p = {}, Shp target = {}) { return AbstractConvOp(dir, p, target); }

ConvParams params2d(BorderMode b = "valid", Shp s = {}, Shp d = {}, i64 g = 1, bool flip = true) {
  ConvParams p;
  p.ndim = 2;
  p.border = std::move(b);
  p.stride = std::move(s);
  p.dilation = std::move(d);
  p.groups = g;
  p.filter_flip = flip;
  return p;
}

// Nodes of the graph reachable from `outs` whose op has the given name.
std::vector<Var> nodes_named(const std::vector<Var>& outs, const std::string& name) {
  std::vector<Var> r;
  for (const Var& v : topological_order(outs))
    if (v.op() && v.op()->name() == name) r.push_back(v);
  return r;
}

}  // namespace

TEST_CASE("AbstractConvOp::infer: forward shapes with unknown dims", "[conv][op]") {
  const auto fwd = op(ConvDirection::forward);
  CHECK(fwd.infer({tt({8, 3, 32, 30}), tt({16, 3, 5, 3})}).shape == Shp{8, 16, 28, 28});
  CHECK(fwd.infer({tt({U, 3, U, 30}), tt({16, 3, 5, 3})}).shape == Shp{U, 16, U, 28});
  CHECK(fwd.infer({tt({8, U, 32, 30}), tt({U, 3, U, 3})}).shape == Shp{8, U, U, 28});
  const auto half = op(ConvDirection::forward, params2d("half", {2, 1}));
  CHECK(half.infer({tt({1, 3, 9, 9}), tt({4, 3, U, 3})}).shape == Shp{1, 4, U, 9});
  const auto d64 = fwd.infer({tt({1, 1, 4, 4}, DType::float64), tt({1, 1, 2, 2}, DType::float64)});
  CHECK(d64.dtype == DType::float64);
  ConvParams p1;
  p1.ndim = 1;
  p1.border = BorderMode(std::vector<std::pair<i64, i64>>{{2, 0}});
  CHECK(op(ConvDirection::forward, p1).infer({tt({2, 4, 10}), tt({6, 4, 3})}).shape == Shp{2, 6, 10});
  ConvParams p3;
  p3.ndim = 3;
  p3.groups = 2;
  CHECK(op(ConvDirection::forward, p3).infer({tt({2, 4, 5, 6, 7}), tt({6, 2, 3, 3, 3})}).shape ==
        Shp{2, 6, 3, 4, 5});
}

TEST_CASE("AbstractConvOp::infer: grad ops derive, check and report ambiguity", "[conv][op]") {
  // grad_inputs (w, dy): stride 1 recovers the input size even without a target.
  const auto gi = op(ConvDirection::grad_inputs, params2d("valid"));
  CHECK(gi.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6})}).shape == Shp{2, 3, 8, 8});
  CHECK(gi.infer({tt({4, 3, 3, 3}), tt({U, 4, U, 6})}).shape == Shp{U, 3, U, 8});
  // stride 2: several input sizes give one output size.
  const auto gi2 = op(ConvDirection::grad_inputs, params2d("valid", {2, 2}));
  CHECK(gi2.infer({tt({4, 3, 3, 3}), tt({U, 4, 6, 6})}).shape == Shp{U, 3, U, U});
  CHECK_THROWS_AS(gi2.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6})}), ShapeError);
  CHECK_THROWS_WITH(gi2.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6})}),
                    Contains("AbstractConvGradInputs") && Contains("ambiguous") && Contains("input_shape"));
  const auto gi2t = op(ConvDirection::grad_inputs, params2d("valid", {2, 2}), {U, U, 14, 13});
  CHECK(gi2t.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6})}).shape == Shp{2, 3, 14, 13});
  // The shape source (third operand) fills unknown target dims at run time.
  const auto gi2u = op(ConvDirection::grad_inputs, params2d("valid", {2, 2}), {U, 3, U, U});
  CHECK(gi2u.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6}), tt({2, 3, 14, 14})}).shape == Shp{2, 3, 14, 14});
  CHECK_THROWS_AS(gi2t.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6}), tt({2, 3, 14, 14})}), ShapeError);

  // grad_weights (x, dy): 'half' and stride > 1 hide the kernel size.
  const auto gw = op(ConvDirection::grad_weights, params2d("full", {}, {}, 2));
  CHECK(gw.infer({tt({2, 4, 6, 6}), tt({2, 6, 8, 8})}).shape == Shp{6, 2, 3, 3});
  const auto gwh = op(ConvDirection::grad_weights, params2d("half"), {U, U, 3, U});
  CHECK(gwh.infer({tt({2, 4, U, 6}), tt({2, 6, U, 6})}).shape == Shp{6, 4, 3, U});
  CHECK_THROWS_WITH(gwh.infer({tt({2, 4, 6, 6}), tt({2, 6, 6, 6})}), Contains("filter_shape") && Contains("ambiguous"));
}

TEST_CASE("AbstractConvOp::infer: grad targets that cannot match raise (Theano arbitrary output shapes)",
          "[conv][op][errors]") {
  // input (2,1,7,7), filters (2,1,3,3): only the forward output shape is a valid output_grad.
  for (const char* mode : {"valid", "half", "full"}) {
    for (const Shp& top : {Shp{2, 2, 8, 8}, Shp{2, 2, 9, 9}, Shp{2, 2, 12, 12}}) {
      const auto gi = op(ConvDirection::grad_inputs, params2d(mode), {2, 1, 7, 7});
      const bool ok = std::string(mode) == "full" && top[2] == 9;
      INFO(mode << " top " << top[2]);
      if (ok) CHECK(gi.infer({tt({2, 1, 3, 3}), tt(top)}).shape == Shp{2, 1, 7, 7});
      else CHECK_THROWS_WITH(gi.infer({tt({2, 1, 3, 3}), tt(top)}),
                             Contains("invalid input_shape") && Contains("(2, 1, 7, 7)") &&
                                 Contains(shape_to_string(top)));
    }
  }
  // Theano's impossible output shapes: computed + {-3, -1, 1, 2} always raises.
  int raised = 0;
  for (auto [i, k] : std::vector<std::pair<i64, i64>>{{1, 1}, {1, 2}, {2, 1}, {4, 2}, {4, 3}, {7, 3}, {9, 5}})
    for (BorderMode border : {BorderMode("valid"), BorderMode("half"), BorderMode("full"), BorderMode({0, 2})})
      for (auto [s, d] : std::vector<std::pair<i64, i64>>{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {3, 1}, {1, 3}}) {
        const Shp img{1, 1, i, i}, ker{1, 1, k, k};
        const Shp out = get_conv_output_shape(img, ker, border, {s, s}, {d, d});
        if (out[2] < 1 || out[3] < 1) continue;
        for (i64 o : {-3, -1, 1, 2}) {
          const Shp top{1, 1, out[2] + o, out[3]};
          if (top[2] < 1) continue;
          const auto gi = op(ConvDirection::grad_inputs, params2d(border, {s, s}, {d, d}), img);
          CHECK_THROWS_AS(gi.infer({tt(ker), tt(top)}), ShapeError);
          ++raised;
        }
      }
  CHECK(raised > 100);
}

TEST_CASE("AbstractConvOp rejects every bad input with op, argument and values", "[conv][op][errors]") {
  const auto fwd = op(ConvDirection::forward);
  // rank mismatch
  CHECK_THROWS_AS(fwd.infer({tt({8, 3, 32, 32}), tt({16, 3, 5})}), ShapeError);
  CHECK_THROWS_WITH(fwd.infer({tt({8, 3, 32, 32}), tt({16, 3, 5})}),
                    Contains("AbstractConv") && Contains("'filters'") && Contains("rank 4") &&
                        Contains("float32(16, 3, 5)"));
  CHECK_THROWS_WITH(fwd.infer({tt({8, 3, 32}), tt({16, 3, 5, 5})}), Contains("'input'") && Contains("rank 4"));
  // channels vs filters x groups
  CHECK_THROWS_AS(fwd.infer({tt({8, 3, 32, 32}), tt({16, 4, 5, 5})}), ShapeError);
  CHECK_THROWS_WITH(fwd.infer({tt({8, 3, 32, 32}), tt({16, 4, 5, 5})}),
                    Contains("channels mismatch") && Contains("3 channels") && Contains("expect 4"));
  const auto g2 = op(ConvDirection::forward, params2d("valid", {}, {}, 2));
  CHECK_THROWS_WITH(g2.infer({tt({8, 3, 32, 32}), tt({16, 1, 5, 5})}),
                    Contains("input channels 3") && Contains("num_groups 2"));
  CHECK_THROWS_WITH(g2.infer({tt({8, 4, 32, 32}), tt({15, 2, 5, 5})}),
                    Contains("filter count 15") && Contains("num_groups 2"));
  CHECK_THROWS_WITH(g2.infer({tt({8, 4, 32, 32}), tt({16, 1, 5, 5})}), Contains("expect 1 per group x num_groups 2"));
  // output size below 1
  CHECK_THROWS_AS(fwd.infer({tt({1, 1, 4, 4}), tt({1, 1, 5, 3})}), ShapeError);
  CHECK_THROWS_WITH(fwd.infer({tt({1, 1, 4, 4}), tt({1, 1, 5, 3})}),
                    Contains("below 1") && Contains("spatial axis 0") && Contains("dilated kernel 5"));
  const auto dil = op(ConvDirection::forward, params2d("valid", {}, {3, 1}));
  CHECK_THROWS_WITH(dil.infer({tt({1, 1, 6, 6}), tt({1, 1, 3, 3})}), Contains("dilated kernel 7"));
  // dtypes
  CHECK_THROWS_AS(fwd.infer({tt({1, 1, 4, 4}), tt({1, 1, 2, 2}, DType::float64)}), TypeError);
  CHECK_THROWS_WITH(fwd.infer({tt({1, 1, 4, 4}), tt({1, 1, 2, 2}, DType::float64)}),
                    Contains("dtype mismatch") && Contains("float32") && Contains("float64"));
  CHECK_THROWS_AS(fwd.infer({tt({1, 1, 4, 4}, DType::int32), tt({1, 1, 2, 2}, DType::int32)}), TypeError);
  CHECK_THROWS_WITH(fwd.infer({tt({1, 1, 4, 4}, DType::int32), tt({1, 1, 2, 2}, DType::int32)}),
                    Contains("'input'") && Contains("int32"));
  // operand count
  CHECK_THROWS_AS(fwd.infer({tt({1, 1, 4, 4})}), ValueError);
  CHECK_THROWS_AS(fwd.infer({tt({1, 1, 4, 4}), tt({1, 1, 2, 2}), tt({1, 1, 4, 4})}), ValueError);
  // parameters: wrong tuple length, negative padding, zero stride/dilation, bad groups
  CHECK_THROWS_AS(op(ConvDirection::forward, params2d("valid", {1, 1, 1})), ValueError);
  CHECK_THROWS_WITH(op(ConvDirection::forward, params2d("valid", {1, 1, 1})),
                    Contains("AbstractConv") && Contains("subsample") && Contains("(1, 1, 1)"));
  CHECK_THROWS_WITH(op(ConvDirection::forward, params2d(BorderMode({1, -1}))),
                    Contains("border_mode must be >= 0") && Contains("(1, -1)"));
  CHECK_THROWS_WITH(op(ConvDirection::forward, params2d("valid", {0, 1})), Contains("subsample") && Contains("(0, 1)"));
  CHECK_THROWS_WITH(op(ConvDirection::forward, params2d("valid", {}, {1, 0})),
                    Contains("filter_dilation") && Contains("(1, 0)"));
  CHECK_THROWS_AS(op(ConvDirection::forward, params2d("valid", {}, {}, 0)), ValueError);
  CHECK_THROWS_AS(op(ConvDirection::grad_inputs, params2d(), {1, 2, 3}), ValueError);
  CHECK_THROWS_AS(op(ConvDirection::grad_weights, params2d(), {1, 2, 3, -4}), ValueError);
  CHECK_THROWS_AS(op(ConvDirection::forward, params2d(), {1, 2, 3, 4}), ValueError);
  // grad targets whose batch/channels disagree with the operands
  const auto gi = op(ConvDirection::grad_inputs, params2d(), {3, 3, 8, 8});
  CHECK_THROWS_WITH(gi.infer({tt({4, 3, 3, 3}), tt({2, 4, 6, 6})}),
                    Contains("input_shape (3, 3, 8, 8)") && Contains("batch size"));
  const auto gw = op(ConvDirection::grad_weights, params2d(), {4, 2, 3, 3});
  CHECK_THROWS_WITH(gw.infer({tt({2, 3, 8, 8}), tt({2, 4, 6, 6})}), Contains("channels per group"));
}

TEST_CASE("AbstractConvOp errors carry the user's node name", "[conv][op][errors]") {
  ConvParams p = params2d("valid", {1, 1});
  p.name = "encoder.conv1";
  const AbstractConvOp o(ConvDirection::forward, p);
  CHECK(o.who() == "AbstractConv 'encoder.conv1'");
  CHECK_THROWS_WITH(o.infer({tt({8, 3, 32, 32}), tt({16, 4, 5, 5})}), Contains("AbstractConv 'encoder.conv1'"));
  p.stride = {1, 1, 1};
  CHECK_THROWS_WITH(AbstractConvOp(ConvDirection::grad_weights, p), Contains("AbstractConvGradWeights 'encoder.conv1'"));
  const Var x = input(F32, {8, 3, 32, 32}, "x");
  const Var w = input(F32, {16, 4, 5, 5}, "w");
  CHECK_THROWS_WITH(conv2d(x, w, {.name = "stem"}), Contains("'stem'") && Contains("channels mismatch"));
  CHECK_THROWS_WITH(conv2d(x, input(F32, {16, 3, 5}, "w3")), Contains("conv2d") && Contains("'filters'"));
}

TEST_CASE("identical abstract nodes are equal and hash alike; names do not matter", "[conv][op]") {
  const Var x = input(F32, {2, 4, 9, 9}, "x");
  const Var w = input(F32, {6, 2, 3, 3}, "w");
  const Var a = conv2d(x, w, {.border_mode = 1, .subsample = {2, 2}, .num_groups = 2, .name = "a"});
  const Var b = conv2d(x, w, {.border_mode = BorderMode({1, 1}), .subsample = {2, 2}, .num_groups = 2, .name = "b"});
  const Var c = conv2d(x, w, {.border_mode = 1, .subsample = {2, 1}, .num_groups = 2});
  const Var d = conv2d(x, w, {.border_mode = 1, .subsample = {2, 2}, .filter_flip = false, .num_groups = 2});
  REQUIRE(a.op());
  CHECK(a.op()->equals(*b.op()));
  CHECK(a.op()->hash() == b.op()->hash());
  CHECK_FALSE(a.op()->equals(*c.op()));
  CHECK_FALSE(a.op()->equals(*d.op()));
  CHECK(a.name() == "a");
  CHECK(conv2d(x, w, {.border_mode = BorderMode(std::vector<std::pair<i64, i64>>{{0, 0}, {0, 0}}), .num_groups = 2})
            .op()
            ->equals(*conv2d(x, w, {.num_groups = 2}).op()));
  const auto gi1 = AbstractConvOp(ConvDirection::grad_inputs, params2d(), {2, 3, 8, 8});
  const auto gi2 = AbstractConvOp(ConvDirection::grad_inputs, params2d(), {2, 3, 8, 9});
  CHECK_FALSE(gi1.equals(gi2));
  CHECK_FALSE(gi1.equals(AbstractConvOp(ConvDirection::grad_weights, params2d(), {2, 3, 8, 8})));
  CHECK(gi1.label().find("input_shape=(2, 3, 8, 8)") != std::string::npos);
}

TEST_CASE("AbstractConvOp::problem, flops and tags", "[conv][op]") {
  const auto o = op(ConvDirection::forward, params2d(BorderMode(std::vector<std::pair<i64, i64>>{{1, 0}, {2, 2}}),
                                                      {2, 1}, {1, 2}, 2, false));
  const ConvProblem p = o.problem({tt({3, 4, 9, 10}), tt({6, 2, 3, 3})});
  CHECK(p.direction == ConvDirection::forward);
  CHECK(p.N == 3);
  CHECK(p.C == 4);
  CHECK(p.K == 6);
  CHECK(p.G == 2);
  CHECK(p.out[0] == 4);   // (9 + 1 - 3) // 2 + 1
  CHECK(p.out[1] == 10);  // (10 + 4 - 5) + 1
  CHECK(p.pad_pre[0] == 1);
  CHECK(p.pad_post[0] == 0);
  CHECK_FALSE(p.flip);
  CHECK(o.flops({tt({3, 4, 9, 10}), tt({6, 2, 3, 3})}) == Approx(2.0 * 3 * 3 * 4 * 10 * 4 * 6 * 3 / 2));

  const auto gi = op(ConvDirection::grad_inputs, params2d("valid", {2, 2}), {2, 3, 9, 9});
  const ConvProblem q = gi.problem({tt({4, 3, 3, 3}), tt({2, 4, 4, 4})});
  CHECK(q.direction == ConvDirection::grad_inputs);
  CHECK(q.x_shape() == Shp{2, 3, 9, 9});
  CHECK(q.y_shape() == Shp{2, 4, 4, 4});
  const auto gw = op(ConvDirection::grad_weights, params2d("half"), {4, 3, 3, 3});
  CHECK(gw.problem({tt({2, 3, 5, 5}), tt({2, 4, 5, 5})}).w_shape() == Shp{4, 3, 3, 3});
  CHECK(gw.flops({tt({2, 3, 5, 5}), tt({2, 4, 5, 5})}) == Approx(2.0 * 9 * 25 * 3 * 4 * 2));
  CHECK_THROWS_AS(o.problem({tt({U, 4, 9, 10}), tt({6, 2, 3, 3})}), ShapeError);

  // The tags that could lower a node come from the algorithm registry.
  const AlgorithmRegistry& reg = mode_registry(Mode::fast_run());
  const auto tags = conv_lowering_tags(o, reg);
  for (const char* t : {"conv_gemm", "conv_fft", "conv_direct", "conv_meta"})
    CHECK(std::find(tags.begin(), tags.end(), t) != tags.end());
  if (CONVGRAPH_WITH_CUDA) CHECK(std::find(tags.begin(), tags.end(), "conv_dnn") != tags.end());
  ConvParams nofft = params2d();
  nofft.allow_fft = false;
  const auto t2 = conv_lowering_tags(op(ConvDirection::forward, nofft), reg);
  CHECK(std::find(t2.begin(), t2.end(), "conv_fft") == t2.end());
  CHECK(op(ConvDirection::forward, nofft).params().find("no_fft") != std::string::npos);
  CHECK(op(ConvDirection::forward).is_abstract());
}

TEST_CASE("grad of the forward op: GradInputs and GradWeights with the forward params", "[conv][op][grad]") {
  const Var x = input(F32, {2, 4, 9, 8}, "x");
  const Var w = input(F32, {6, 2, 3, 2}, "w");
  const ConvOptions opts{.border_mode = BorderMode({1, 0}), .subsample = {2, 1}, .filter_flip = false,
                         .filter_dilation = {1, 2}, .num_groups = 2, .name = "c"};
  const Var y = conv2d(x, w, opts);
  const auto g = grad(sum(y), {x, w});
  const auto* fwd = as_abstract_conv(y);
  const auto* gi = as_abstract_conv(g[0]);
  const auto* gw = as_abstract_conv(g[1]);
  REQUIRE(fwd);
  REQUIRE(gi);
  REQUIRE(gw);
  CHECK(gi->direction() == ConvDirection::grad_inputs);
  CHECK(gw->direction() == ConvDirection::grad_weights);
  CHECK(gi->conv_params() == fwd->conv_params());
  CHECK(gw->conv_params() == fwd->conv_params());
  CHECK(gi->target_shape() == x.shape());
  CHECK(gw->target_shape() == w.shape());
  CHECK(g[0].shape() == x.shape());
  CHECK(g[1].shape() == w.shape());
  CHECK(g[0].inputs().size() == 2);  // static shapes known: no shape source
  CHECK(g[0].inputs()[0].same(w));
  CHECK(g[1].inputs()[0].same(x));
  CHECK(g[0].name() == "c.grad_inputs");

  // Second order through autodiff builds and keeps the shapes.
  const Var cost2 = sum(g[0] * g[0]) + sum(g[1] * g[1]);
  const auto h = grad(cost2, {x, w});
  CHECK(h[0].shape() == x.shape());
  CHECK(h[1].shape() == w.shape());
  CHECK(nodes_named(h, "AbstractConvGradInputs").size() >= 1);
  CHECK(nodes_named(h, "AbstractConvGradWeights").size() >= 1);
}

TEST_CASE("grads of GradInputs and GradWeights are the other two ops", "[conv][op][grad]") {
  const Var x = input(F32, {2, 4, 9, 8}, "x");
  const Var w = input(F32, {6, 2, 3, 2}, "w");
  const ConvOptions opts{.border_mode = "full", .subsample = {2, 3}, .filter_dilation = {2, 1}, .num_groups = 2};
  const Shp yshape = conv2d(x, w, opts).shape();
  const Var gy = input(F32, yshape, "gy");
  const ConvParams p = as_abstract_conv(conv2d(x, w, opts))->conv_params();

  const Var dx = conv2d_grad_wrt_inputs(gy, w, x.shape(), opts);
  CHECK(dx.shape() == x.shape());
  const auto hx = grad(sum(dx * dx), {w, gy});
  REQUIRE(as_abstract_conv(hx[0]));
  REQUIRE(as_abstract_conv(hx[1]));
  CHECK(as_abstract_conv(hx[0])->direction() == ConvDirection::grad_weights);
  CHECK(as_abstract_conv(hx[0])->target_shape() == w.shape());
  CHECK(as_abstract_conv(hx[1])->direction() == ConvDirection::forward);
  CHECK(as_abstract_conv(hx[0])->conv_params() == p);
  CHECK(as_abstract_conv(hx[1])->conv_params() == p);
  CHECK(hx[0].shape() == w.shape());
  CHECK(hx[1].shape() == yshape);

  const Var dw = conv2d_grad_wrt_weights(x, gy, w.shape(), opts);
  CHECK(dw.shape() == w.shape());
  const auto hw = grad(sum(dw * dw), {x, gy});
  REQUIRE(as_abstract_conv(hw[0]));
  REQUIRE(as_abstract_conv(hw[1]));
  CHECK(as_abstract_conv(hw[0])->direction() == ConvDirection::grad_inputs);
  CHECK(as_abstract_conv(hw[0])->target_shape() == x.shape());
  CHECK(as_abstract_conv(hw[1])->direction() == ConvDirection::forward);
  CHECK(hw[0].shape() == x.shape());
  CHECK(hw[1].shape() == yshape);
  // Third order still builds.
  const auto third = grad(sum(hw[0] * hw[0]) + sum(hx[1]), {x, w, gy});
  CHECK(third[1].shape() == w.shape());
}

TEST_CASE("grads with unknown static shapes carry a shape source", "[conv][op][grad]") {
  const Var x = input(F32, {U, 3, U, U}, "x");
  const Var w = input(F32, {5, 3, 3, 3}, "w");
  const Var y = conv2d(x, w, {.subsample = {2, 2}});
  CHECK(y.shape() == Shp{U, 5, U, U});
  const auto g = grad(sum(y), {x, w});
  REQUIRE(as_abstract_conv(g[0]));
  CHECK(g[0].inputs().size() == 3);
  CHECK(g[0].inputs()[2].same(x));
  CHECK(g[0].shape() == Shp{U, 3, U, U});
  CHECK(g[1].shape() == Shp{5, 3, 3, 3});
  CHECK(g[1].inputs().size() == 2);
  // The shape source gets no gradient; second order still builds.
  const auto h = grad(sum(g[0]) + sum(g[1]), {x, w}, Disconnected::zero);
  CHECK(h.size() == 2);
  // Run-time concrete types resolve the ambiguity through the shape source.
  const auto* gi = as_abstract_conv(g[0]);
  CHECK(gi->infer({tt({5, 3, 3, 3}), tt({2, 5, 4, 4}), tt({2, 3, 9, 10})}).shape == Shp{2, 3, 9, 10});
  CHECK_THROWS_AS(gi->infer({tt({5, 3, 3, 3}), tt({2, 5, 4, 4}), tt({2, 3, 11, 10})}), ShapeError);
}
