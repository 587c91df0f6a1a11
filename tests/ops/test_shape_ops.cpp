// Shape ops (reshape, flatten, dimshuffle/transpose, concatenate, slice, flip, pad):
// forward against index arithmetic done here, every dtype, unknown dimensions, gradients
// with verify_grad (first and second order), and bad inputs.
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <random>

using namespace convgraph;

namespace {

Tensor random_tensor(Shape shape, unsigned seed, DType dt = DType::float64) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  Tensor t(dt, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

/// 0, 1, 2, ... in any dtype (bool: alternating), so copies are easy to trace.
Tensor iota(Shape shape, DType dt) {
  Tensor t(dt, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, dt == DType::boolean ? static_cast<double>(i % 3 == 0) : i);
  return t;
}

Tensor run1(const Var& in, const Var& out, const Tensor& x) { return compile({in}, {out})({x})[0]; }

/// Row-major position of a multi-index.
std::int64_t flat(const Shape& shape, const std::vector<std::int64_t>& idx) {
  std::int64_t f = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) f = f * shape[a] + idx[a];
  return f;
}

/// Calls fn(multi-index) for every element of `shape` in row-major order.
template <class F>
void for_each_index(const Shape& shape, F&& fn) {
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t n = numel(shape), i = 0; i < n; ++i) {
    fn(idx);
    for (std::size_t a = shape.size(); a-- > 0;) {
      if (++idx[a] < shape[a]) break;
      idx[a] = 0;
    }
  }
}

const DType kAllDtypes[] = {DType::float32, DType::float64, DType::int32, DType::int64, DType::boolean};

}  // namespace

TEST_CASE("shape ops: reshape and flatten keep the elements in order, every dtype", "[ops][shape]") {
  for (DType dt : kAllDtypes) {
    INFO(dtype_name(dt));
    const Tensor x = iota({2, 3, 4}, dt);
    Var v = input(dt, {2, 3, 4});
    const std::vector<std::pair<Var, Shape>> cases = {{reshape(v, {4, -1}), {4, 6}},
                                                      {reshape(v, {24}), {24}},
                                                      {reshape(v, {-1}), {24}},
                                                      {reshape(v, {1, 2, 12, 1}), {1, 2, 12, 1}},
                                                      {flatten(v), {24}},
                                                      {flatten(v, 2), {2, 12}},
                                                      {flatten(v, 3), {2, 3, 4}},
                                                      {reshape_like(v, constant(Tensor::zeros(dt, {6, 4}))), {6, 4}}};
    for (const auto& [y, shape] : cases) {
      CHECK(y.shape() == shape);
      const Tensor out = run1(v, y, x);
      CHECK(out.shape() == shape);
      CHECK(out.to_vector() == x.to_vector());
    }
  }
  // 0-d inputs flatten to one element; reshape to and from ().
  Var s = input(DType::float32, {});
  CHECK(flatten(s).shape() == Shape{1});
  CHECK(run1(s, reshape(reshape(s, {1, 1}), {}), Tensor::scalar(3.5)).get(0) == 3.5);
}

TEST_CASE("shape ops: unknown dimensions are inferred when the function runs", "[ops][shape]") {
  Var x = input(DType::float64, {kUnknown, 6});
  Var y = reshape(x, {-1, 2, 3});
  CHECK(y.shape() == Shape{kUnknown, 2, 3});
  Var f = flatten(x, 1);
  CHECK(f.shape() == Shape{kUnknown});
  Var c = concatenate({x, x}, 0);
  CHECK(c.shape() == Shape{kUnknown, 6});
  Var s = slice(x, 0, 1, kSliceEnd);
  CHECK(s.shape() == Shape{kUnknown, 6});
  // Gradients through reshape of an unknown shape use the run-time shape of x.
  Var g = grad(sum(y * y), x);
  CHECK(g.shape() == Shape{kUnknown, 6});
  const Function fn = compile({x}, {y, f, c, s, g});
  for (std::int64_t rows : {1, 4}) {
    const Tensor xv = random_tensor({rows, 6}, 3);
    const auto out = fn({xv});
    CHECK(out[0].shape() == Shape{rows, 2, 3});
    CHECK(out[1].shape() == Shape{rows * 6});
    CHECK(out[2].shape() == Shape{2 * rows, 6});
    CHECK(out[3].shape() == Shape{rows - 1, 6});
    for (std::int64_t i = 0; i < xv.numel(); ++i) CHECK(out[4].get(i) == Approx(2 * xv.get(i)));
  }
}

TEST_CASE("shape ops: dimshuffle and transpose move elements to the permuted positions", "[ops][shape]") {
  for (DType dt : kAllDtypes) {
    INFO(dtype_name(dt));
    const Tensor x = iota({2, 1, 3, 4}, dt);
    Var v = input(dt, {2, 1, 3, 4});
    // (2, 1, 3, 4) -> (4, x, 2, 3): drops axis 1, adds a new axis.
    const Tensor y = run1(v, dimshuffle(v, {3, -1, 0, 2}), x);
    REQUIRE(y.shape() == Shape{4, 1, 2, 3});
    for_each_index(y.shape(), [&](const std::vector<std::int64_t>& i) {
      CHECK(y.get(flat(y.shape(), i)) == x.get(flat(x.shape(), {i[2], 0, i[3], i[0]})));
    });
    const Tensor t = run1(v, transpose(v), x);
    REQUIRE(t.shape() == Shape{4, 3, 1, 2});
    for_each_index(t.shape(), [&](const std::vector<std::int64_t>& i) {
      CHECK(t.get(flat(t.shape(), i)) == x.get(flat(x.shape(), {i[3], i[2], i[1], i[0]})));
    });
    const Tensor t2 = run1(v, transpose(v, {0, -1, 1, -2}), x);
    REQUIRE(t2.shape() == Shape{2, 4, 1, 3});
    for_each_index(t2.shape(), [&](const std::vector<std::int64_t>& i) {
      CHECK(t2.get(flat(t2.shape(), i)) == x.get(flat(x.shape(), {i[0], i[2], i[3], i[1]})));
    });
  }
  // A big transpose takes the parallel path and still lands every element.
  const Tensor big = random_tensor({300, 257}, 5, DType::float32);
  Var b = input(DType::float32, {300, 257});
  const Tensor bt = run1(b, transpose(b), big);
  bool all = true;
  for (std::int64_t i = 0; i < 300; ++i)
    for (std::int64_t j = 0; j < 257; ++j) all = all && bt.get(j * 300 + i) == big.get(i * 257 + j);
  CHECK(all);
}

TEST_CASE("shape ops: concatenate joins along any axis", "[ops][shape]") {
  for (DType dt : kAllDtypes) {
    INFO(dtype_name(dt));
    const Tensor a = iota({2, 3}, dt), b = iota({2, 1}, dt), c = iota({2, 4}, dt);
    Var va = input(dt, {2, 3}), vb = input(dt, {2, 1}), vc = input(dt, {2, 4});
    const Tensor y = compile({va, vb, vc}, {concatenate({va, vb, vc}, -1)})({a, b, c})[0];
    REQUIRE(y.shape() == Shape{2, 8});
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t col = 0; col < 8; ++col) {
        const double want = col < 3 ? a.get(r * 3 + col) : col < 4 ? b.get(r) : c.get(r * 4 + col - 4);
        CHECK(y.get(r * 8 + col) == want);
      }
    const Tensor z = compile({va}, {concatenate({va, va}, 0)})({a})[0];
    REQUIRE(z.shape() == Shape{4, 3});
    for (std::int64_t i = 0; i < 12; ++i) CHECK(z.get(i) == a.get(i % 6));
  }
}

TEST_CASE("shape ops: slice follows numpy's rules for bounds and steps", "[ops][shape]") {
  struct Case {
    std::int64_t begin, end, step;
    std::vector<double> want;  // numpy: np.arange(5)[begin:end:step]
  };
  const std::vector<Case> cases = {
      {1, 4, 2, {1, 3}},
      {0, kSliceEnd, 1, {0, 1, 2, 3, 4}},
      {-2, kSliceEnd, 1, {3, 4}},
      {2, 100, 1, {2, 3, 4}},
      {3, 1, 1, {}},
      {-100, 2, 1, {0, 1}},
      {-1, kSliceBegin, -1, {4, 3, 2, 1, 0}},
      {kSliceEnd, kSliceBegin, -2, {4, 2, 0}},
      {-2, -6, -2, {3, 1}},
      {10, 2, -3, {4}},
      {1, 3, -1, {}},
      {0, 5, 7, {0}},
      {4, 0, kSliceBegin, {4}},
  };
  for (DType dt : kAllDtypes) {
    Var v = input(dt, {5});
    const Tensor x = iota({5}, dt);
    for (const auto& c : cases) {
      INFO(dtype_name(dt) << " [" << c.begin << ":" << c.end << ":" << c.step << "]");
      const Var y = slice(v, 0, c.begin, c.end, c.step);
      CHECK(y.shape() == Shape{static_cast<std::int64_t>(c.want.size())});
      const Tensor out = run1(v, y, x);
      std::vector<double> want;
      for (double i : c.want) want.push_back(x.get(static_cast<std::int64_t>(i)));
      CHECK(out.to_vector() == want);
    }
  }
  // Along an inner axis of a 3-D tensor.
  const Tensor x = iota({2, 5, 3}, DType::float64);
  Var v = input(DType::float64, {2, 5, 3});
  const Tensor y = run1(v, slice(v, -2, 4, 0, -2), x);
  REQUIRE(y.shape() == Shape{2, 2, 3});
  for_each_index(y.shape(), [&](const std::vector<std::int64_t>& i) {
    CHECK(y.get(flat(y.shape(), i)) == x.get(flat(x.shape(), {i[0], 4 - 2 * i[1], i[2]})));
  });
}

TEST_CASE("shape ops: flip and pad", "[ops][shape]") {
  for (DType dt : kAllDtypes) {
    INFO(dtype_name(dt));
    const Tensor x = iota({2, 3, 4}, dt);
    Var v = input(dt, {2, 3, 4});
    const Tensor f = run1(v, flip(v, {0, -1}), x);
    for_each_index(x.shape(), [&](const std::vector<std::int64_t>& i) {
      CHECK(f.get(flat(x.shape(), i)) == x.get(flat(x.shape(), {1 - i[0], i[1], 3 - i[2]})));
    });
    CHECK(run1(v, flip(v, {}), x).to_vector() == x.to_vector());
    const Tensor p = run1(v, pad(v, {{1, 2}, {0, 3}}), x);
    REQUIRE(p.shape() == Shape{2, 6, 7});
    for_each_index(p.shape(), [&](const std::vector<std::int64_t>& i) {
      const bool inside = i[1] >= 1 && i[1] < 4 && i[2] < 4;
      CHECK(p.get(flat(p.shape(), i)) == (inside ? x.get(flat(x.shape(), {i[0], i[1] - 1, i[2]})) : 0.0));
    });
  }
  // pad is the adjoint of slice: slicing the padding off gives the input back.
  Var v = input(DType::float64, {3, 4});
  const Tensor x = random_tensor({3, 4}, 9);
  const Var back = slice(slice(pad(v, {{2, 1}, {0, 2}}), 0, 2, -1), 1, 0, -2);
  CHECK(run1(v, back, x).to_vector() == x.to_vector());
}

TEST_CASE("shape ops: gradients pass verify_grad", "[ops][shape][grad]") {
  using Fn = std::function<Var(const std::vector<Var>&)>;
  const std::vector<std::pair<const char*, Fn>> unary = {
      {"reshape",
       [](const auto& v) {
         return reshape(v[0], {4, -1});
       }},
      {"flatten", [](const auto& v) { return flatten(v[0], 2); }},
      {"dimshuffle",
       [](const auto& v) {
         return dimshuffle(reshape(v[0], {2, 1, 6}), {2, -1, 0});
       }},
      {"transpose",
       [](const auto& v) {
         return transpose(v[0], {1, 0, 2});
       }},
      {"slice", [](const auto& v) { return slice(v[0], 1, 0, kSliceEnd, 2); }},
      {"slice-neg", [](const auto& v) { return slice(v[0], -1, -1, 0, -2); }},
      {"flip",
       [](const auto& v) {
         return flip(v[0], {0, 2});
       }},
      {"pad",
       [](const auto& v) {
         return pad(v[0], {{1, 0}, {2, 1}});
       }},
      {"concat-self",
       [](const auto& v) {
         return concatenate({v[0], v[0] * 2.0}, 1);
       }},
  };
  const Tensor x = random_tensor({2, 3, 2}, 17);
  for (const auto& [name, fn] : unary) {
    INFO(name);
    CHECK_NOTHROW(verify_grad(fn, {x}));
  }
  INFO("concatenate of three inputs");
  CHECK_NOTHROW(verify_grad(
      [](const auto& v) {
        return concatenate({v[0], v[1], v[2]}, 0);
      },
      {random_tensor({2, 3}, 1), random_tensor({1, 3}, 2), random_tensor({3, 3}, 3)}));
  // Second order: the gradient ops (slice_grad, split_like, reshape_like) are differentiable.
  const std::vector<std::pair<const char*, Fn>> second = {
      {"d slice", [](const auto& v) { return grad(sum(pow(slice(v[0], 0, 1, kSliceEnd), 3.0)), v[0]); }},
      {"d concat",
       [](const auto& v) {
         return grad(sum(pow(concatenate({v[0], v[0] * v[0]}, 1), 2.0)), v[0]);
       }},
      {"d reshape", [](const auto& v) { return grad(sum(pow(reshape(v[0], {-1}), 3.0)), v[0]); }},
      {"d pad",
       [](const auto& v) {
         return grad(sum(pow(pad(v[0], {{1, 1}}), 3.0)), v[0]);
       }},
  };
  const Tensor y = random_tensor({3, 2}, 23);
  for (const auto& [name, fn] : second) {
    INFO(name);
    CHECK_NOTHROW(verify_grad(fn, {y}));
  }
}

TEST_CASE("shape ops: bad inputs raise typed errors naming op and values", "[ops][shape][errors]") {
  Var x = input(DType::float32, {2, 3});
  Var x3 = input(DType::float32, {2, 3, 4});
  using Catch::Contains;
  // reshape
  CHECK_THROWS_AS(reshape(x, {4, 2}), ShapeError);
  CHECK_THROWS_WITH(reshape(x, {4, 2}), Contains("reshape") && Contains("(2, 3)") && Contains("(4, 2)"));
  CHECK_THROWS_AS(reshape(x, {-1, -1}), ValueError);
  CHECK_THROWS_WITH(reshape(x, {-1, -1}), Contains("reshape") && Contains("more than one -1"));
  CHECK_THROWS_AS(reshape(x, {-3, 2}), ValueError);
  CHECK_THROWS_WITH(reshape(x, {-3, 2}), Contains("reshape") && Contains("-3"));
  CHECK_THROWS_AS(reshape(x, {4, -1}), ShapeError);
  CHECK_THROWS_WITH(reshape(x, {4, -1}), Contains("reshape") && Contains("6 elements"));
  // flatten
  CHECK_THROWS_AS(flatten(x3, 0), ValueError);
  CHECK_THROWS_WITH(flatten(x3, 0), Contains("flatten") && Contains("ndim 0"));
  CHECK_THROWS_AS(flatten(x3, 4), ValueError);
  CHECK_THROWS_WITH(flatten(x3, 4), Contains("flatten") && Contains("ndim 4") && Contains("(2, 3, 4)"));
  // dimshuffle / transpose
  CHECK_THROWS_AS(dimshuffle(x, {0, 2}), ShapeError);
  CHECK_THROWS_WITH(dimshuffle(x, {0, 2}), Contains("dimshuffle") && Contains("axis 2"));
  CHECK_THROWS_AS(dimshuffle(x, {1}), ShapeError);
  CHECK_THROWS_WITH(dimshuffle(x, {1}), Contains("dimshuffle") && Contains("drops axis 0 of length 2"));
  CHECK_THROWS_AS(dimshuffle(x, {0, 0}), ValueError);
  CHECK_THROWS_WITH(dimshuffle(x, {0, 0}), Contains("dimshuffle") && Contains("repeats axis 0"));
  CHECK_THROWS_AS(transpose(x3, {1, 0}), ShapeError);
  CHECK_THROWS_WITH(transpose(x3, {1, 0}), Contains("transpose") && Contains("(1, 0)") && Contains("rank-3"));
  CHECK_THROWS_AS(transpose(x3, {0, 1, 1}), ValueError);
  CHECK_THROWS_WITH(transpose(x3, {0, 1, 1}), Contains("transpose") && Contains("not a permutation"));
  // concatenate
  CHECK_THROWS_AS(concatenate({x, input(DType::float64, {2, 3})}), TypeError);
  CHECK_THROWS_WITH(concatenate({x, input(DType::float64, {2, 3})}),
                    Contains("concatenate") && Contains("float64") && Contains("float32"));
  CHECK_THROWS_AS(concatenate({x, input(DType::float32, {2, 4})}, 0), ShapeError);
  CHECK_THROWS_WITH(concatenate({x, input(DType::float32, {2, 4})}, 0),
                    Contains("concatenate") && Contains("(2, 4)") && Contains("(2, 3)"));
  CHECK_THROWS_AS(concatenate({x, x3}, 0), ShapeError);
  CHECK_THROWS_AS(concatenate({x, x}, 2), ShapeError);
  CHECK_THROWS_WITH(concatenate({x, x}, 2), Contains("concatenate") && Contains("axis 2"));
  CHECK_THROWS_AS(concatenate({}, 0), ValueError);
  // slice, flip, pad
  CHECK_THROWS_AS(slice(x, 0, 0, 2, 0), ValueError);
  CHECK_THROWS_WITH(slice(x, 0, 0, 2, 0), Contains("slice") && Contains("step must not be 0"));
  CHECK_THROWS_AS(slice(x, 2, 0, 1), ShapeError);
  CHECK_THROWS_WITH(slice(x, -3, 0, 1), Contains("slice") && Contains("axis -3"));
  CHECK_THROWS_AS(slice(input(DType::float32, {}), 0, 0, 1), ShapeError);
  CHECK_THROWS_AS(flip(x, {2}), ShapeError);
  CHECK_THROWS_WITH(flip(x, {2}), Contains("flip") && Contains("axis 2"));
  CHECK_THROWS_AS(flip(x, {1, -1}), ValueError);
  CHECK_THROWS_WITH(flip(x, {1, -1}), Contains("flip") && Contains("twice"));
  CHECK_THROWS_AS(pad(x, {{1, -1}}), ValueError);
  CHECK_THROWS_WITH(pad(x, {{1, -1}}), Contains("pad") && Contains("(1, -1)") && Contains("negative"));
  CHECK_THROWS_AS(pad(x, {{1, 1}, {1, 1}, {1, 1}}), ShapeError);
  CHECK_THROWS_WITH(pad(x, {{1, 1}, {1, 1}, {1, 1}}), Contains("pad") && Contains("(2, 3)"));
  // Run-time shapes: an unknown dimension that turns out wrong fails the call, not the build.
  Var u = input(DType::float32, {kUnknown, 3});
  const Function f = compile({u}, {reshape(u, {2, 6})});
  CHECK_THROWS_AS(f({Tensor::zeros(DType::float32, {2, 3})}), ShapeError);
  CHECK_THROWS_WITH(f({Tensor::zeros(DType::float32, {2, 3})}), Contains("reshape") && Contains("(2, 6)"));
  CHECK(f({Tensor::zeros(DType::float32, {4, 3})})[0].shape() == Shape{2, 6});  // still usable
  Var one = input(DType::float32, {2, kUnknown});
  const Function g = compile({one}, {dimshuffle(one, {0})});
  CHECK_THROWS_AS(g({Tensor::zeros(DType::float32, {2, 3})}), ShapeError);
  CHECK_THROWS_WITH(g({Tensor::zeros(DType::float32, {2, 3})}), Contains("dimshuffle") && Contains("length 3"));
}
