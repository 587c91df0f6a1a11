// The structural passes - canonicalize, merge, constant folding, device placement,
// cleanup - and DebugMode's cross-check of every lowered convolution.
#include <catch2/catch.hpp>

#include "convgraph/backends/cuda.hpp"

#include <convgraph/optimizer/transfer_op.hpp>

#include "fakes.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

int count_ops(const FunctionGraph& g, const std::string& name) {
  int n = 0;
  for (const auto& v : g.toposort()) n += v.op() && v.op()->name() == name ? 1 : 0;
  return n;
}

Tensor ramp(Shape s, double scale = 0.01) {
  Tensor t(DType::float32, std::move(s));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, scale * static_cast<double>((i * 7) % 23) - 0.1);
  return t;
}

}  // namespace

TEST_CASE("merge: identical convolutions become one, different ones stay", "[optimizer][passes]") {
  Var x = input(DType::float32, {1, 2, 6, 6}, "x");
  Var w = input(DType::float32, {3, 2, 3, 3}, "w");
  Var a = conv2d(x, w, {.name = "a"});
  Var b = conv2d(x, w, {.name = "b"});                       // same op, same inputs
  Var c = conv2d(x, w, {.filter_flip = false, .name = "c"});  // different params
  Var out = a + b + c;
  const auto g = optimized({x, w}, {out}, Mode::fast_run());
  CHECK(conv_impls(g).size() == 2);
  Function f = compile({x, w}, {out, a, b});
  auto r = f({ramp({1, 2, 6, 6}), ramp({3, 2, 3, 3})});
  CHECK(r[1].to_vector() == r[2].to_vector());
  // Without merge the duplicate survives.
  CHECK(conv_impls(optimized({x, w}, {out}, Mode::fast_run().excluding("merge:merge_again"))).size() == 3);
}

TEST_CASE("merge: equal constants merge, and so does what is built on them", "[optimizer][passes]") {
  Var x = input(DType::float32, {4}, "x");
  Var k1 = constant(Tensor::from({1, 2, 3, 4}, {4}));
  Var k2 = constant(Tensor::from({1, 2, 3, 4}, {4}));
  Var k3 = constant(Tensor::from({1, 2, 3, 5}, {4}));
  Var out = (x * k1) + (x * k2) + (x * k3);
  const auto g = optimized({x}, {out}, Mode::fast_run().excluding("constant_folding:fusion"));
  CHECK(count_ops(g, "mul") == 2);
  Function f = compile({x}, {out});
  CHECK(f({Tensor::from({1, 1, 1, 1}, {4})})[0].to_vector() == std::vector<double>{3, 6, 9, 13});
}

TEST_CASE("constant folding: constant subgraphs are evaluated once at compile time", "[optimizer][passes]") {
  Var x = input(DType::float32, {2, 1, 4, 4}, "x");
  // A filter computed from constants: folded into one constant before lowering.
  Var base = constant(ramp({1, 1, 3, 3}, 0.1));
  Var w = exp(base * 2.0) - 1.0;
  Var y = conv2d(x, w, {.name = "folded_filter"});
  const auto g = optimized({x}, {y}, Mode::fast_run());
  CHECK(count_ops(g, "exp") == 0);
  CHECK(count_ops(g, "mul") == 0);
  const auto impls = conv_impls(g);
  REQUIRE(impls.size() == 1);
  bool filter_is_constant = false;
  for (const auto& v : g.toposort())
    if (as_conv_impl(v)) filter_is_constant = v.inputs()[1].is_constant();
  CHECK(filter_is_constant);
  // Same numbers with and without folding.
  const Tensor xv = ramp({2, 1, 4, 4});
  auto folded = compile({x}, {y})({xv})[0].to_vector();
  auto unfolded = compile({x}, {y}, Mode::fast_run().excluding("constant_folding"))({xv})[0].to_vector();
  REQUIRE(folded.size() == unfolded.size());
  for (std::size_t i = 0; i < folded.size(); ++i) CHECK(folded[i] == Approx(unfolded[i]).epsilon(1e-6));
  // A convolution of constants stays a (lowered) convolution: abstract ops are not folded.
  Var cy = conv2d(constant(ramp({1, 1, 4, 4})), constant(ramp({1, 1, 3, 3})));
  Var z = input(DType::float32, {1, 1, 2, 2}, "z");
  CHECK(conv_impls(optimized({z}, {cy + z}, Mode::fast_run())).size() == 1);
}

TEST_CASE("canonicalize: useless casts and double negations disappear", "[optimizer][passes]") {
  Var x = input(DType::float32, {3}, "x");
  Var y = -(-(x * 3.0));
  Var z = cast(y, DType::float64);
  const auto g = optimized({x}, {y, z}, Mode::fast_run());
  CHECK(count_ops(g, "neg") == 0);
  CHECK(count_ops(g, "cast") == 1);  // a real conversion stays
  Function f = compile({x}, {y, z});
  CHECK(f({Tensor::from({1, 2, 3}, {3})})[0].to_vector() == std::vector<double>{3, 6, 9});
}

TEST_CASE("fusion is registered, runs in fast_run and fuses elementwise chains", "[optimizer][passes]") {
  Var x = input(DType::float32, {3}, "x");
  Var y = exp(x) * 2.0 + 1.0;
  CompileStats stats;
  const auto g = optimized({x}, {y}, Mode::fast_run(), &stats);
  bool fusion_ran = false;
  for (const auto& [name, s] : stats.pass_seconds) fusion_ran = fusion_ran || name == "fusion";
  CHECK(fusion_ran);
  CHECK(count_ops(g, "exp") == 0);
  CHECK(count_ops(g, "fused") == 1);  // details in test_fusion.cpp
}

TEST_CASE("transfer op: host copies work, device copies need a GPU", "[optimizer][passes]") {
  TransferOp to_cpu(DeviceKind::cpu);
  Tensor in = Tensor::from({1, 2}, {2});
  Tensor out(DType::float32, {2});
  to_cpu.perform({in}, out, ExecContext{});
  CHECK(out.to_vector() == std::vector<double>{1, 2});
  TransferOp to_gpu(DeviceKind::cuda);
  CHECK(to_gpu.infer({TensorType{DType::float32, {2}, DeviceKind::cpu}}).device == DeviceKind::cuda);
  CHECK_THROWS_AS(to_gpu.perform({in}, out, ExecContext{}), DeviceError);
  if (!cuda_info().available)  // the transfer itself is exercised by tests/cuda/test_cuda_ops.cpp
    CHECK_THROWS_WITH(to_gpu.perform({in}, out, ExecContext{}), Contains(cuda_info().reason));
  Var x = input(DType::float32, {2}, "x");
  CHECK(transfer(x, DeviceKind::cpu).same(x));
  CHECK(as_transfer(transfer(x, DeviceKind::cuda)) != nullptr);
}

TEST_CASE("debug mode: a wrong algorithm is caught with the node, algorithm and error", "[optimizer][debugmode]") {
  AlgorithmRegistry reg;
  reg.add(std::make_shared<FakeAlgorithm>("fake.wrong", std::vector<std::string>{"conv_gemm", "fast_run"}, 0.0,
                                          nullptr, /*wrong=*/true));
  Var x = input(DType::float32, {1, 2, 5, 5}, "x");
  Var w = input(DType::float32, {2, 2, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "checked"});
  Mode m = Mode::debug_mode();
  m.registry = &reg;
  Function f = compile({x, w}, {y}, m);
  CHECK_THROWS_AS(f({ramp({1, 2, 5, 5}), ramp({2, 2, 3, 3})}), MismatchError);
  CHECK_THROWS_WITH(f({ramp({1, 2, 5, 5}), ramp({2, 2, 3, 3})}),
                    Contains("DebugMode") && Contains("'checked'") && Contains("fake.wrong") &&
                        Contains("largest error 0.5"));
  // Outside DebugMode the same algorithm runs unchecked.
  Mode plain = Mode::fast_run();
  plain.registry = &reg;
  CHECK_NOTHROW(compile({x, w}, {y}, plain)({ramp({1, 2, 5, 5}), ramp({2, 2, 3, 3})}));
}

TEST_CASE("debug mode: an algorithm that writes into its inputs is caught", "[optimizer][debugmode]") {
  AlgorithmRegistry reg;
  auto a = std::make_shared<FakeAlgorithm>("fake.clobber", std::vector<std::string>{"conv_gemm", "fast_run"}, 0.0, nullptr);
  a->clobber_input = true;
  reg.add(a);
  Var x = input(DType::float32, {1, 2, 5, 5}, "x");
  Var w = input(DType::float32, {2, 2, 3, 3}, "w");
  Mode m = Mode::debug_mode();
  m.registry = &reg;
  Function f = compile({x, w}, {conv2d(x, w, {.name = "clobber"})}, m);
  CHECK_THROWS_WITH(f({ramp({1, 2, 5, 5}), ramp({2, 2, 3, 3})}),
                    Contains("DebugMode") && Contains("fake.clobber") && Contains("modified its input 0"));
}

TEST_CASE("debug mode: every built-in CPU algorithm passes on every direction", "[optimizer][debugmode]") {
  for (DType dtype : {DType::float32, DType::float64}) {
    Var x = input(dtype, {2, 3, 7, 7}, "x");
    Var w = input(dtype, {4, 3, 3, 3}, "w");
    Var y = conv2d(x, w, {.border_mode = "half", .name = "c"});
    auto g = grad(sum(y * y), {x, w});
    for (const char* flags : {"", "optimizer_excluding=conv_gemm", "optimizer_including=conv_fft",
                              "optimizer_including=conv_winograd"}) {
      Function f = compile({x, w}, {y, g[0], g[1]}, Mode::debug_mode().with_flags(flags));
      CHECK_NOTHROW(f({ramp({2, 3, 7, 7}).astype(dtype), ramp({4, 3, 3, 3}).astype(dtype)}));
    }
  }
}

TEST_CASE("debug mode: compare_conv_results tolerances", "[optimizer][debugmode]") {
  const std::vector<float> want{1.0f, -2.0f, 4.0f};
  std::vector<float> got = want;
  got[2] += 3e-3f;  // 3e-3 / max|want| 4 = 7.5e-4 relative: fine for float32
  CHECK(compare_conv_results(got.data(), want.data(), 3, DType::float32).ok);
  got[2] += 3e-3f;  // 1.5e-3 relative: too much
  const ConvCheck c = compare_conv_results(got.data(), want.data(), 3, DType::float32);
  CHECK_FALSE(c.ok);
  CHECK(c.index == 2);
  got[0] = std::nanf("");
  CHECK_FALSE(compare_conv_results(got.data(), want.data(), 3, DType::float32).ok);
  const std::vector<double> wd{1.0, 2.0};
  std::vector<double> gd{1.0, 2.0 + 1e-10};
  CHECK(compare_conv_results(gd.data(), wd.data(), 2, DType::float64).ok);
  gd[1] = 2.0 + 1e-8;
  CHECK_FALSE(compare_conv_results(gd.data(), wd.data(), 2, DType::float64).ok);
}
