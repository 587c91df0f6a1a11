// Elementwise fusion: fused graphs compute what the unfused ones do (bit for bit: the
// fused kernel applies the same scalar formulas in the same order), node counts drop,
// intermediates needed elsewhere survive, and gradients still work through compile().
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>
#include <convgraph/ops/autodiff.hpp>
#include <convgraph/runtime/gradcheck.hpp>
#include <convgraph/core/print.hpp>
#include <convgraph/optimizer/optimize.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/fused_elementwise.hpp"
#include "support/graph_fixtures.hpp"

using namespace convgraph;
using convgraph::testing::noise;
using Catch::Contains;

namespace {

const Mode kUnfused = Mode::fast_run().excluding("fusion");

int count_ops(const Function& f, const std::string& name = {}) {
  int n = 0;
  for (const auto& v : f.graph().toposort()) n += v.op() && (name.empty() || v.op()->name() == name) ? 1 : 0;
  return n;
}

std::vector<const detail::FusedProgram*> fused_nodes(const Function& f) {
  std::vector<const detail::FusedProgram*> out;
  for (const auto& v : f.graph().toposort())
    if (v.op())
      if (auto* p = detail::fused_program(*v.op())) out.push_back(p);
  return out;
}

// Every output equal, element by element and bit for bit, except that a NaN matches any
// NaN: the sign and payload of a NaN made by arithmetic are unspecified (x86 CPUs differ,
// and a compiler may reorder an operation that produces one), so NaN is compared as a class.
void check_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t o = 0; o < a.size(); ++o) {
    INFO("output " << o);
    REQUIRE(a[o].dtype() == b[o].dtype());
    REQUIRE(a[o].shape() == b[o].shape());
    const auto va = a[o].to_vector(), vb = b[o].to_vector();  // exact: float32 -> double
    REQUIRE(va.size() == vb.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < va.size(); ++i) {
      const bool same = std::isnan(va[i]) ? std::isnan(vb[i])
                                          : std::memcmp(&va[i], &vb[i], sizeof(double)) == 0;
      if (!same && mismatches++ == 0)
        FAIL_CHECK("element " << i << ": fused " << va[i] << " vs unfused " << vb[i]);
    }
    CHECK(mismatches == 0);
  }
}

struct Both {
  Function fused, unfused;
};

Both compile_both(const std::vector<Var>& in, const std::vector<Var>& out) {
  return {compile(in, out, Mode::fast_run()), compile(in, out, kUnfused)};
}

}  // namespace

TEST_CASE("fusion: relu(x*w+b) becomes one node with the same numbers", "[optimizer][fusion]") {
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    Var x = input(t, {16, 40}, "x");
    Var w = input(t, {16, 40}, "w");
    Var b = input(t, {40}, "b");  // bias: broadcast along the rows
    Var y = relu(x * w + b);
    auto f = compile_both({x, w, b}, {y});
    CHECK(count_ops(f.unfused) == 3);
    CHECK(count_ops(f.fused) == 1);
    REQUIRE(fused_nodes(f.fused).size() == 1);
    CHECK(fused_nodes(f.fused)[0]->op_count() == 3);
    const std::string n(dtype_name(t));
    CHECK(fused_nodes(f.fused)[0]->text() == "relu(i0*i1+i2) [" + n + "," + n + "," + n + "]");
    const std::vector<Tensor> args{noise(t, {16, 40}, 1), noise(t, {16, 40}, 2), noise(t, {40}, 3)};
    check_identical(f.fused(args), f.unfused(args));
  }
}

TEST_CASE("fusion: matmul + bias + relu fuses the elementwise tail only", "[optimizer][fusion]") {
  Var x = input(DType::float32, {8, 12}, "x");
  Var w = input(DType::float32, {12, 20}, "w");
  Var b = input(DType::float32, {20}, "b");
  Var y = relu(matmul(x, w) + b) * 0.5;
  auto f = compile_both({x, w, b}, {y});
  CHECK(count_ops(f.fused, "fused") == 1);
  CHECK(count_ops(f.fused) < count_ops(f.unfused));
  const std::vector<Tensor> args{noise(DType::float32, {8, 12}, 4), noise(DType::float32, {12, 20}, 5),
                                 noise(DType::float32, {20}, 6)};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: scalar constants become immediates and debugprint shows the program", "[optimizer][fusion]") {
  Var x = input(DType::float32, {3, 1000}, "x");
  Var c = input(DType::float32, {1000}, "c");
  Var d = input(DType::float32, {}, "d");  // a 0-d input: splatted
  Var y = sigmoid(x * 2.0 + 0.1) * c - d;
  auto f = compile_both({x, c, d}, {y});
  REQUIRE(fused_nodes(f.fused).size() == 1);
  const std::string text = fused_nodes(f.fused)[0]->text();
  CHECK(text == "sigmoid(i0*2+0.100000001)*i1-i2 [float32,float32,float32]");
  CHECK_THAT(debugprint(f.fused.graph()), Contains("fused{sigmoid("));
  CHECK_THAT(f.fused.describe() + debugprint(f.fused.graph()), Contains("fused 5 ops"));
  const std::vector<Tensor> args{noise(DType::float32, {3, 1000}, 7), noise(DType::float32, {1000}, 8),
                                 Tensor::scalar(0.25)};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: where and comparisons, including a bool result", "[optimizer][fusion]") {
  Var x = input(DType::float64, {5, 301}, "x");
  Var y = input(DType::float64, {301}, "y");
  Var m = input(DType::boolean, {5, 1}, "m");  // an external mask, broadcast
  Var a = where(x > y, x * y, exp(x) - 1.0);
  Var b = where(m, maximum(a, y), minimum(-a, y) / 3.0);
  Var mask = (abs(b) * 2.0) >= y;  // ends in a comparison: a bool output
  auto f = compile_both({x, y, m}, {b, mask});
  CHECK(count_ops(f.fused, "where") == 0);
  CHECK(count_ops(f.fused) < count_ops(f.unfused));
  Tensor mv(DType::boolean, {5, 1});
  for (int i = 0; i < 5; ++i) mv.set(i, i % 2);
  const std::vector<Tensor> args{noise(DType::float64, {5, 301}, 9), noise(DType::float64, {301}, 10), mv};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: casts between float types fuse, integer math does not", "[optimizer][fusion]") {
  Var x = input(DType::float32, {777}, "x");
  Var z = input(DType::float64, {777}, "z");
  Var up = cast(tanh(x), DType::float64) * z + 1.0;       // float32 -> float64
  Var down = sqrt(cast(abs(z), DType::float32)) + x;      // float64 -> float32
  auto f = compile_both({x, z}, {up, down});
  CHECK(count_ops(f.fused, "cast") == 0);
  CHECK(count_ops(f.fused, "fused") == 2);
  const std::vector<Tensor> args{noise(DType::float32, {777}, 11), noise(DType::float64, {777}, 12)};
  check_identical(f.fused(args), f.unfused(args));

  Var i = input(DType::int32, {10}, "i");
  Var j = input(DType::int32, {10}, "j");
  Function g = compile({i, j}, {(i + j) * j - i});
  CHECK(count_ops(g, "fused") == 0);
}

TEST_CASE("fusion: intermediates with other clients are not fused away", "[optimizer][fusion]") {
  Var x = input(DType::float64, {64, 33}, "x");
  Var y = input(DType::float64, {33}, "y");
  Var t = exp(x * y);                  // two clients: its own group
  Var out1 = sigmoid(t + 1.0);
  Var out2 = tanh(t * 2.0);
  Var u = log(abs(x) + 1.0);           // a graph output that is also used below
  Var out3 = u * y - 3.0;
  auto f = compile_both({x, y}, {out1, out2, u, out3, t});
  for (const auto* p : fused_nodes(f.fused)) CHECK(p->op_count() >= 2);
  CHECK(count_ops(f.fused, "fused") == 5);  // exp(x*y), the two heads, u, out3
  CHECK(count_ops(f.fused, "exp") == 0);
  const std::vector<Tensor> args{noise(DType::float64, {64, 33}, 13), noise(DType::float64, {33}, 14)};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: diamonds inside a group share one register", "[optimizer][fusion]") {
  Var x = input(DType::float32, {2000}, "x");
  Var s = x * x;
  Var y = exp(s) + log(s + 1.0) * s;  // s has three clients, all in the group
  auto f = compile_both({x}, {y});
  REQUIRE(fused_nodes(f.fused).size() == 1);
  CHECK(count_ops(f.fused) == 1);
  CHECK_THAT(fused_nodes(f.fused)[0]->text(), Contains("t0=i0*i0; "));
  const std::vector<Tensor> args{noise(DType::float32, {2000}, 15)};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: broadcasting across blocks and threads, unknown dims", "[optimizer][fusion]") {
  // Odd sizes so that blocks start mid-row and the gather carries across axes.
  Var a = input(DType::float32, {7, 1, 129}, "a");
  Var b = input(DType::float32, {kUnknown, 1}, "b");
  Var c = input(DType::float32, {kUnknown, kUnknown, 129}, "c");
  Var y = (a * b + c) / (abs(b) + 1.0) - sigmoid(a);
  auto f = compile_both({a, b, c}, {y});
  CHECK(count_ops(f.fused) == 1);
  for (std::int64_t rows : {1, 33, 70}) {
    INFO("rows " << rows);
    const std::vector<Tensor> args{noise(DType::float32, {7, 1, 129}, 16), noise(DType::float32, {rows, 1}, 17),
                                   noise(DType::float32, {7, rows, 129}, 18)};
    check_identical(f.fused(args), f.unfused(args));
  }
  // A large flat case takes the in-place fast path on every thread.
  Var p = input(DType::float64, {kUnknown}, "p");
  Var q = input(DType::float64, {kUnknown}, "q");
  auto g = compile_both({p, q}, {pow(abs(p) + 0.5, q) - p * q});
  const std::vector<Tensor> args{noise(DType::float64, {300001}, 19), noise(DType::float64, {300001}, 20)};
  check_identical(g.fused(args), g.unfused(args));
  const std::vector<Tensor> empty{Tensor(DType::float64, {0}), Tensor(DType::float64, {0})};
  CHECK(g.fused(empty)[0].numel() == 0);
}

TEST_CASE("fusion: equal fused nodes merge", "[optimizer][fusion]") {
  Var x = input(DType::float32, {100}, "x");
  Var y = input(DType::float32, {100}, "y");
  // Without the first merge the two copies reach fusion; merge_again joins the fused nodes.
  const std::vector<Var> outs{sigmoid(x * y + 1.0), sigmoid(x * y + 1.0)};
  Function f = compile({x, y}, outs, Mode::fast_run().excluding("merge"));
  Function g = compile({x, y}, outs, Mode::fast_run().excluding("merge:merge_again"));
  CHECK(count_ops(f, "fused") == 1);
  CHECK(count_ops(g, "fused") == 2);
  const std::vector<Tensor> args{noise(DType::float32, {100}, 21), noise(DType::float32, {100}, 22)};
  check_identical(f(args), g(args));
}

TEST_CASE("fusion: gradients compile and stay correct with fusion on", "[optimizer][fusion][grad]") {
  // verify_grad compiles with fast_run, which includes fusion.
  CHECK_NOTHROW(verify_grad(
      [](const std::vector<Var>& v) { return sigmoid(v[0] * v[1] + v[2]) * tanh(v[0]) - relu(v[1] - 0.3); },
      {noise(DType::float64, {4, 6}, 23), noise(DType::float64, {4, 6}, 24), noise(DType::float64, {6}, 25)}));
  CHECK_NOTHROW(verify_grad([](const std::vector<Var>& v) { return where(v[0] > v[1], exp(v[0]), v[1] * v[1]); },
                            {noise(DType::float64, {9}, 26), noise(DType::float64, {9}, 27)}));
  // The gradient graph itself is fused and matches the unfused one.
  Var x = input(DType::float32, {32, 10}, "x");
  Var w = input(DType::float32, {10}, "w");
  Var b = input(DType::float32, {10}, "b");
  Var cost = sum(relu(x * w + b) * sigmoid(x));
  const auto gs = grad(cost, {x, w, b});
  auto f = compile_both({x, w, b}, {cost, gs[0], gs[1], gs[2]});
  CHECK(count_ops(f.fused) < count_ops(f.unfused));
  const std::vector<Tensor> args{noise(DType::float32, {32, 10}, 28), noise(DType::float32, {10}, 29),
                                 noise(DType::float32, {10}, 30)};
  check_identical(f.fused(args), f.unfused(args));
}

TEST_CASE("fusion: the fused op has no gradient and checks its program", "[optimizer][fusion]") {
  detail::FusedProgram p;
  p.inputs = {DType::float32, DType::float32};
  detail::FusedInstr add;
  add.code = detail::FusedInstr::Code::binary;
  add.binary = detail::BinaryKind::add;
  add.a = 0;
  add.b = 1;
  p.code = {add};
  Var x = input(DType::float32, {3}, "x");
  Var y = input(DType::float32, {3}, "y");
  Var z = apply(detail::make_fused_elementwise(p), {x, y});
  CHECK(z.op()->label() == "fused{i0+i1 [float32,float32]}");
  CHECK_THROWS_AS(z.op()->grad({x, y}, z, z), TypeError);
  CHECK_THROWS_WITH(z.op()->grad({x, y}, z, z), Contains("no gradient"));
  CHECK_THROWS_AS(apply(detail::make_fused_elementwise(p), {x, cast(y, DType::float64)}), TypeError);
  p.code[0].b = 5;
  CHECK_THROWS_AS(detail::make_fused_elementwise(p), ValueError);
}

TEST_CASE("fusion: special values give the same bits as the unfused ops", "[optimizer][fusion]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> vals{0.0, -0.0, 1e-30, -1e-30, 80, -80, 800, -800, inf, -inf, nan, 3.5, -3.5, 1, -1};
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    Var x = input(t, {static_cast<std::int64_t>(vals.size())}, "x");
    Var y = sigmoid(x) * 1.0 + tanh(-x) - sign(x) * relu(x);
    Var z = maximum(sqrt(abs(x)), log(abs(x))) / minimum(x, exp(x));
    auto f = compile_both({x}, {y, z});
    CHECK(count_ops(f.fused, "fused") == 2);
    const std::vector<Tensor> args{Tensor::from(vals, {static_cast<std::int64_t>(vals.size())}, t)};
    check_identical(f.fused(args), f.unfused(args));
  }
}

TEST_CASE("fusion: per-channel and per-pixel operands of NCHW, relu's gradient of a sum", "[optimizer][fusion]") {
  // The gather merges the axes an operand walks as one (a channel vector: runs of H*W
  // splats; a [N,1,H,W] map: runs of H*W); odd sizes put block edges mid-run and leave
  // vector tails; a bool mask and float64 take the 1- and 8-byte paths.
  for (DType t : {DType::float32, DType::float64}) {
    INFO(dtype_name(t));
    const Shape s{3, 5, 7, 11};
    Var x = input(t, s, "x"), g1 = input(t, s, "g1"), g2 = input(t, s, "g2");
    Var c = input(t, {1, 5, 1, 1}, "c"), p = input(t, {3, 1, 7, 11}, "p");
    Var m = input(DType::boolean, {3, 1, 1, 11}, "m");
    Var relu_grad = where(x > 0.0, g1 + g2, zeros_like(g1));
    Var affine = relu(x * c + p);
    Var masked = where(m, g1 - c, p * 2.0);
    auto f = compile_both({x, g1, g2, c, p, m}, {relu_grad, affine, masked});
    CHECK(count_ops(f.fused, "fused") == 3);
    Tensor mv(DType::boolean, {3, 1, 1, 11});
    for (std::int64_t i = 0; i < mv.numel(); ++i) mv.set(i, (i * 7) % 3 == 0 ? 1.0 : 0.0);
    const std::vector<Tensor> args{noise(t, s, 31), noise(t, s, 32), noise(t, s, 33), noise(t, {1, 5, 1, 1}, 34),
                                   noise(t, {3, 1, 7, 11}, 35), mv};
    const auto fused = f.fused(args), unfused = f.unfused(args);
    check_identical(fused, unfused);
    // And against the formulas themselves, element by element.
    const auto vx = args[0].to_vector(), v1 = args[1].to_vector(), v2 = args[2].to_vector();
    const auto vc = args[3].to_vector(), vp = args[4].to_vector();
    const auto r0 = fused[0].to_vector(), r1 = fused[1].to_vector(), r2 = fused[2].to_vector();
    std::size_t bad = 0;
    for (std::int64_t n = 0, i = 0; n < 3; ++n)
      for (std::int64_t ch = 0; ch < 5; ++ch)
        for (std::int64_t hw = 0; hw < 77; ++hw, ++i) {
          const auto k = static_cast<std::size_t>(i);
          const auto pk = static_cast<std::size_t>(n * 77 + hw);
          const double sum = t == DType::float32 ? double(float(v1[k]) + float(v2[k])) : v1[k] + v2[k];
          bad += r0[k] != (vx[k] > 0 ? sum : 0.0);
          const double lin = t == DType::float32 ? double(float(vx[k]) * float(vc[ch]) + float(vp[pk]))
                                                 : vx[k] * vc[ch] + vp[pk];
          bad += r1[k] != std::max(lin, 0.0);
          const bool mk = ((n * 11 + hw % 11) * 7) % 3 == 0;
          const double dif = t == DType::float32 ? double(float(v1[k]) - float(vc[ch])) : v1[k] - vc[ch];
          bad += r2[k] != (mk ? dif : vp[pk] * 2.0);
        }
    CHECK(bad == 0);
  }
}
