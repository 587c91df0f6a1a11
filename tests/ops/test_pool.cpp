// 2-D max and average pooling: forward against a brute-force reference over a sweep of
// windows, strides, paddings and border modes; gradients and the gradient ops' own
// gradients with verify_grad; bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>

#include "support/pool_reference.hpp"
#include <random>

using namespace convgraph;
using convgraph::test::distinct_tensor;
using convgraph::test::starts;

namespace {

/// Brute-force pooling of a (..., H, W) tensor, walking the padded grid cell by cell.
Tensor reference_pool(const Tensor& x, const PoolOptions& o, bool is_max) {
  const Shape& xs = x.shape();
  const std::int64_t h = xs[xs.size() - 2], w = xs.back(), planes = x.numel() / (h * w);
  const std::vector<std::int64_t> stride = o.stride.empty() ? o.window : o.stride;
  const auto rs = starts(h, o.window[0], stride[0], o.padding[0], o.ignore_border);
  const auto cs = starts(w, o.window[1], stride[1], o.padding[1], o.ignore_border);
  Shape ys = xs;
  ys[ys.size() - 2] = static_cast<std::int64_t>(rs.size());
  ys.back() = static_cast<std::int64_t>(cs.size());
  Tensor y(DType::float64, ys);
  std::int64_t at = 0;
  for (std::int64_t pl = 0; pl < planes; ++pl)
    for (std::int64_t r0 : rs)
      for (std::int64_t c0 : cs) {
        double best = -INFINITY, sum = 0;
        std::int64_t inside = 0, cells = 0;
        for (std::int64_t pr = r0; pr < r0 + o.window[0] && pr < h + 2 * o.padding[0]; ++pr)
          for (std::int64_t pc = c0; pc < c0 + o.window[1] && pc < w + 2 * o.padding[1]; ++pc) {
            ++cells;
            const std::int64_t r = pr - o.padding[0], c = pc - o.padding[1];
            if (r < 0 || r >= h || c < 0 || c >= w) continue;
            const double v = x.get(pl * h * w + r * w + c);
            best = std::max(best, v);
            sum += v;
            ++inside;
          }
        y.set(at++, is_max ? best : sum / static_cast<double>(o.include_padding_in_average ? cells : inside));
      }
  return y;
}

PoolOptions options(std::int64_t w0, std::int64_t w1, std::int64_t s0, std::int64_t s1, std::int64_t p0,
                    std::int64_t p1, bool ignore_border, bool inc_pad = false) {
  PoolOptions o;
  o.window = {w0, w1};
  o.stride = {s0, s1};
  o.padding = {p0, p1};
  o.ignore_border = ignore_border;
  o.include_padding_in_average = inc_pad;
  return o;
}

std::string describe(const PoolOptions& o) {
  return msg("window ", o.window[0], "x", o.window[1], " stride ", o.stride[0], "x", o.stride[1], " pad ", o.padding[0],
             "x", o.padding[1], " ignore_border ", o.ignore_border, " inc_pad ", o.include_padding_in_average);
}

}  // namespace

TEST_CASE("pool: max and average pooling match a brute-force reference", "[ops][pool]") {
  const std::vector<Shape> shapes = {{2, 3, 5, 7}, {6, 5}, {1, 1, 4, 4}};
  int checked = 0;
  for (const Shape& shape : shapes)
    for (std::int64_t w0 : {1, 2, 3})
      for (std::int64_t w1 : {2, 3})
        for (std::int64_t s0 : {1, 2, 3})
          for (std::int64_t s1 : {1, 2})
            for (std::int64_t p : {0, 1})
              for (bool ib : {true, false})
                for (bool inc : {false, true}) {
                  if (p >= std::min(w0, w1) || (p > 0 && !ib)) continue;
                  const PoolOptions o = options(w0, w1, s0, s1, p, p, ib, inc);
                  const std::int64_t h = shape[shape.size() - 2], w = shape.back();
                  if (starts(h, w0, s0, p, ib).empty() || starts(w, w1, s1, p, ib).empty()) continue;
                  INFO(shape_to_string(shape) << " " << describe(o));
                  const Tensor x = distinct_tensor(shape, 21);
                  Var v = input(DType::float64, shape);
                  const auto out = compile({v}, {max_pool2d(v, o), avg_pool2d(v, o)})({x});
                  const Tensor want_max = reference_pool(x, o, true), want_avg = reference_pool(x, o, false);
                  REQUIRE(out[0].shape() == want_max.shape());
                  REQUIRE(out[1].shape() == want_avg.shape());
                  CHECK(max_abs_diff(out[0], want_max) == 0);
                  CHECK(max_abs_diff(out[1], want_avg) <= 1e-12);
                  ++checked;
                }
  CHECK(checked > 200);
  // float32, int32 (max only), the default options, a stride given as empty (= window),
  // and a large input that takes the parallel path.
  const Tensor x = distinct_tensor({4, 3, 40, 36}, 22);
  Var v32 = input(DType::float32, {4, 3, 40, 36});
  const auto out32 =
      compile({v32}, {max_pool2d(v32), avg_pool2d(v32, options(3, 3, 2, 2, 1, 1, true))})({x.astype(DType::float32)});
  CHECK(max_abs_diff(out32[0].astype(DType::float64), reference_pool(x.astype(DType::float32).astype(DType::float64),
                                                                     options(2, 2, 2, 2, 0, 0, true), true)) == 0);
  // Values reach about 1000 here: float32 rounding is about 6e-5.
  CHECK(max_abs_diff(out32[1].astype(DType::float64), reference_pool(x, options(3, 3, 2, 2, 1, 1, true), false)) <=
        2e-4);
  const Tensor xi = Tensor::from({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {3, 4}, DType::int32);
  Var vi = input(DType::int32, {3, 4});
  PoolOptions empty_stride;
  empty_stride.window = {2, 3};
  empty_stride.stride = {};
  empty_stride.ignore_border = false;
  const Tensor yi = compile({vi}, {max_pool2d(vi, empty_stride)})({xi})[0];
  CHECK(yi.shape() == Shape{2, 2});
  CHECK(yi.to_vector() == std::vector<double>{9, 6, 5, 8});
}

TEST_CASE("pool: unknown spatial sizes are resolved at run time", "[ops][pool]") {
  Var v = input(DType::float64, {kUnknown, 2, kUnknown, 6});
  const Var y = max_pool2d(v, options(2, 2, 2, 2, 0, 0, true));
  CHECK(y.shape() == Shape{kUnknown, 2, kUnknown, 3});
  const Var g = grad(sum(y), v);
  const Function f = compile({v}, {y, g});
  const Tensor x = distinct_tensor({3, 2, 5, 6}, 23);
  const auto out = f({x});
  CHECK(out[0].shape() == Shape{3, 2, 2, 3});
  CHECK(out[1].shape() == x.shape());
  double total = 0;
  for (std::int64_t i = 0; i < out[1].numel(); ++i) total += out[1].get(i);
  CHECK(total == Approx(3 * 2 * 2 * 3));  // one unit per window, routed to its maximum
}

TEST_CASE("pool: gradients pass verify_grad", "[ops][pool][grad]") {
  const std::vector<PoolOptions> opts = {
      options(2, 2, 2, 2, 0, 0, true),       options(3, 2, 1, 2, 0, 0, true),  options(3, 3, 2, 2, 1, 1, true, false),
      options(3, 3, 2, 2, 1, 2, true, true), options(2, 3, 2, 2, 0, 0, false), options(3, 2, 2, 1, 0, 0, false, true),
  };
  const Tensor x = distinct_tensor({2, 5, 6}, 24);
  for (const auto& o : opts) {
    INFO(describe(o));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return max_pool2d(v[0], o); }, {x}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return avg_pool2d(v[0], o); }, {x}));
    // The gradient ops are linear in the output gradient: check that derivative directly.
    Var xc = constant(x);
    const Tensor gy = distinct_tensor(reference_pool(x, o, true).shape(), 25);
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return max_pool2d_grad(xc, v[0], o); }, {gy}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return avg_pool2d_grad(xc, v[0], o); }, {gy}));
    // Second order through autodiff: d/dx of a function of d(pool)/dx.
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(pow(max_pool2d(v[0], o), 2.0)), v[0]); }, {x}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(pow(avg_pool2d(v[0], o), 2.0)), v[0]); }, {x}));
  }
  // Ties route to the first maximum only: the gradient sums to one per window.
  Var v = input(DType::float64, {2, 2});
  const Tensor g = compile({v}, {grad(sum(max_pool2d(v)), v)})({Tensor::full(DType::float64, {2, 2}, 1.0)})[0];
  CHECK(g.to_vector() == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE("pool: bad inputs raise typed errors naming op and values", "[ops][pool][errors]") {
  using Catch::Contains;
  Var x = input(DType::float32, {1, 1, 5, 5});
  auto opts = [](auto edit) {
    PoolOptions o;
    edit(o);
    return o;
  };
  const PoolOptions bad_window = opts([](PoolOptions& o) { o.window = {2}; });
  CHECK_THROWS_AS(max_pool2d(x, bad_window), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, bad_window),
                    Contains("max_pool2d") && Contains("window (2)") && Contains("2 entries"));
  const PoolOptions zero_window = opts([](PoolOptions& o) { o.window = {0, 2}; });
  CHECK_THROWS_AS(avg_pool2d(x, zero_window), ValueError);
  CHECK_THROWS_WITH(avg_pool2d(x, zero_window), Contains("avg_pool2d") && Contains("window (0, 2)"));
  const PoolOptions zero_stride = opts([](PoolOptions& o) { o.stride = {1, 0}; });
  CHECK_THROWS_AS(max_pool2d(x, zero_stride), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, zero_stride), Contains("max_pool2d") && Contains("stride (1, 0)"));
  const PoolOptions neg_pad = opts([](PoolOptions& o) { o.padding = {-1, 0}; });
  CHECK_THROWS_AS(max_pool2d(x, neg_pad), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, neg_pad), Contains("padding (-1, 0)") && Contains(">= 0"));
  const PoolOptions big_pad = opts([](PoolOptions& o) { o.padding = {2, 0}; });
  CHECK_THROWS_AS(max_pool2d(x, big_pad), ValueError);
  CHECK_THROWS_WITH(max_pool2d(x, big_pad), Contains("padding (2, 0)") && Contains("smaller than the window (2, 2)"));
  const PoolOptions pad_border = opts([](PoolOptions& o) {
    o.window = {3, 3};
    o.padding = {1, 1};
    o.ignore_border = false;
  });
  CHECK_THROWS_AS(avg_pool2d(x, pad_border), ValueError);
  CHECK_THROWS_WITH(avg_pool2d(x, pad_border), Contains("avg_pool2d") && Contains("ignore_border"));
  CHECK_THROWS_AS(max_pool2d(input(DType::float32, {5})), ShapeError);
  CHECK_THROWS_WITH(max_pool2d(input(DType::float32, {5})),
                    Contains("max_pool2d") && Contains("rank >= 2") && Contains("(5,)"));
  CHECK_THROWS_AS(max_pool2d(input(DType::boolean, {4, 4})), TypeError);
  CHECK_THROWS_AS(avg_pool2d(input(DType::int32, {4, 4})), TypeError);
  CHECK_THROWS_WITH(avg_pool2d(input(DType::int32, {4, 4})), Contains("avg_pool2d") && Contains("int32"));
  const PoolOptions big_window = opts([](PoolOptions& o) { o.window = {6, 2}; });
  CHECK_THROWS_AS(max_pool2d(x, big_window), ShapeError);
  CHECK_THROWS_WITH(max_pool2d(x, big_window),
                    Contains("max_pool2d") && Contains("(1, 1, 5, 5)") && Contains("too small"));
  CHECK_THROWS_AS(max_pool2d_grad(x, input(DType::float32, {1, 1, 3, 2})), ShapeError);
  CHECK_THROWS_WITH(max_pool2d_grad(x, input(DType::float32, {1, 1, 3, 2})),
                    Contains("max_pool2d_grad") && Contains("(1, 1, 3, 2)") && Contains("(1, 1, 2, 2)"));
  // Too small only at run time: the call fails with the sizes, the function stays usable.
  Var u = input(DType::float32, {kUnknown, kUnknown});
  const Function f = compile({u}, {max_pool2d(u, opts([](PoolOptions& o) { o.window = {3, 3}; }))});
  CHECK_THROWS_AS(f({Tensor::zeros(DType::float32, {2, 5})}), ShapeError);
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {2, 5})}), Contains("max_pool2d") && Contains("(2, 5)"));
  CHECK(f({Tensor::zeros(DType::float32, {3, 5})})[0].shape() == Shape{1, 1});
}
