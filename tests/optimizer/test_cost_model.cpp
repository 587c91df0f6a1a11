// The cost model behind fast_run's default choice: each CPU algorithm's estimate, the
// choice it makes among the usable ones, the lowering and run-time paths that use it, the
// flags that turn it off, and the CONVGRAPH_MACHINE override.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include <convgraph/backends/conv_cost.hpp>
#include <convgraph/optimizer/conv_lowering.hpp>

#include "fakes.hpp"
#include "support/child_process.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

// A fixed machine (2 threads, 50 GFLOP/s each, 10 GB/s) so the choices do not depend on
// the host; the lowering tests below use cases far from any tie.
const MachineModel kMachine{.gflops_per_thread = 50, .bandwidth_gbs = 10, .threads = 2};

ConvProblem problem(ConvDirection dir, std::vector<std::int64_t> x, std::vector<std::int64_t> w,
                    std::int64_t stride = 1, std::int64_t pad = 0, std::int64_t groups = 1,
                    DType dtype = DType::float32) {
  ConvParams params;
  params.ndim = static_cast<int>(x.size()) - 2;
  params.border = BorderMode(pad);
  params.stride.assign(static_cast<std::size_t>(params.ndim), stride);
  params.filter_flip = false;
  params.groups = groups;
  return ConvProblem::make(dir, params.normalized("test"), x, w, dtype);
}

/// The usable CPU algorithms for p in priority order, and the one the model picks.
std::string cheapest(const ConvProblem& p, std::string* why = nullptr) {
  std::vector<AlgorithmPtr> usable;
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->device() == DeviceKind::cpu && a->name() != "cpu.reference" && a->applicable(p))
      usable.push_back(a);
  REQUIRE(!usable.empty());
  return cheapest_algorithm(usable, p, kMachine, why)->name();
}

std::string lowered(const Mode& mode, Shape x, Shape w, ConvOptions o = {}) {
  Var xv = input(DType::float32, x, "x"), wv = input(DType::float32, w, "w");
  // The lowering's choice: without the blocked_layout pass, which may replace it.
  const auto names = chosen(optimized({xv, wv}, {conv2d(xv, wv, o)}, mode.excluding("blocked_layout")));
  REQUIRE(names.size() == 1);
  return names[0];
}

}  // namespace

TEST_CASE("cost model: every fast_run CPU algorithm estimates a positive finite time", "[optimizer][cost]") {
  const ConvProblem p = problem(ConvDirection::forward, {8, 64, 28, 28}, {64, 64, 3, 3}, 1, 1);
  long estimated = 0;
  for (const auto& a : AlgorithmRegistry::builtin().all()) {
    if (a->device() != DeviceKind::cpu || !a->applicable(p)) continue;
    const double s = a->estimated_seconds(p, kMachine);
    const auto tags = a->tags();
    const bool fast_run = std::find(tags.begin(), tags.end(), "fast_run") != tags.end();
    INFO(a->name());
    if (fast_run) {
      CHECK(std::isfinite(s));
      CHECK(s > 0);
      // Never faster than the arithmetic at peak, except Winograd (fewer multiplications).
      if (a->name() != "cpu.winograd") CHECK(s >= p.flops() / kMachine.flops_per_s());
      ++estimated;
    } else {
      CHECK(std::isinf(s));  // opt-in algorithms (fft, reference) keep their priority
    }
  }
  CHECK(estimated >= 3);
  // More threads, less time; a slower memory, more time.
  const ConvAlgorithm* corrmm = AlgorithmRegistry::builtin().find("cpu.corrmm");
  REQUIRE(corrmm != nullptr);
  MachineModel one = kMachine, slow = kMachine;
  one.threads = 1;
  slow.bandwidth_gbs = 1;
  CHECK(corrmm->estimated_seconds(p, one) > corrmm->estimated_seconds(p, kMachine));
  CHECK(corrmm->estimated_seconds(p, slow) > corrmm->estimated_seconds(p, kMachine));
  // float64 runs at half the float32 rate.
  const ConvProblem p64 = problem(ConvDirection::forward, {8, 64, 28, 28}, {64, 64, 3, 3}, 1, 1, 1, DType::float64);
  CHECK(corrmm->estimated_seconds(p64, kMachine) > 1.5 * corrmm->estimated_seconds(p, kMachine));
}

TEST_CASE("cost model: picks what the standard layers' timings favour", "[optimizer][cost]") {
  using D = ConvDirection;
  // 3x3 stride-1 layers with many channels: Winograd (2-4x faster than im2col+GEMM here).
  for (D dir : {D::forward, D::grad_inputs}) {
    CHECK(cheapest(problem(dir, {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1)) == "cpu.winograd");
    CHECK(cheapest(problem(dir, {8, 128, 28, 28}, {128, 128, 3, 3}, 1, 1)) == "cpu.winograd");
  }
  // 3x3 grad weights: Winograd too (transform-domain sums over the batch; measured 1.4-1.7x
  // faster than the channel-vectorised direct kernel on resnet_3x3_56 and vgg_3x3_112).
  CHECK(cheapest(problem(D::grad_weights, {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1)) == "cpu.winograd");
  CHECK(cheapest(problem(D::grad_weights, {4, 64, 112, 112}, {128, 64, 3, 3}, 1, 1)) == "cpu.winograd");
  // 1x1 layers need no column matrix: GEMM.
  for (D dir : {D::forward, D::grad_inputs, D::grad_weights})
    CHECK(cheapest(problem(dir, {8, 64, 56, 56}, {256, 64, 1, 1})) == "cpu.corrmm");
  // Strided 7x7 stem: the channel-vectorised direct kernel forward and for grad weights
  // (C = 3 makes the GEMM's reduction short; Zen 4, 2 threads, forward: 11 ms against
  // cpu.corrmm's 20 since its transposed store went through registers on AVX-512);
  // depthwise: the depthwise kernel.
  CHECK(cheapest(problem(D::forward, {8, 3, 224, 224}, {64, 3, 7, 7}, 2, 3)) == "cpu.direct");
  CHECK(cheapest(problem(D::grad_weights, {8, 3, 224, 224}, {64, 3, 7, 7}, 2, 3)) == "cpu.direct");
  for (D dir : {D::forward, D::grad_inputs, D::grad_weights})
    CHECK(cheapest(problem(dir, {8, 64, 56, 56}, {64, 1, 3, 3}, 1, 1, 64)) == "cpu.depthwise");
  // Depthwise 5x5 and 7x7 too: the direct kernel's pixel-vector tiles make short calls there
  // (a tap a reduction step), 1.3-2.3x slower (Zen 5, 2 threads, 8x96 channels).
  for (D dir : {D::forward, D::grad_inputs, D::grad_weights}) {
    CHECK(cheapest(problem(dir, {8, 96, 28, 28}, {96, 1, 5, 5}, 1, 2, 96)) == "cpu.depthwise");
    CHECK(cheapest(problem(dir, {8, 96, 56, 56}, {96, 1, 7, 7}, 1, 3, 96)) == "cpu.depthwise");
  }
  // ResNeXt's 32 groups: the direct kernel for 4-channel groups (pixel vectors; Winograd
  // 1.3-2x slower) and for grad weights on 8-channel groups, where Winograd's per-group
  // GEMMs of 8 rows ran at a fraction of the rate its estimate assumed (2.7x slower).
  for (D dir : {D::forward, D::grad_inputs})
    CHECK(cheapest(problem(dir, {8, 128, 56, 56}, {128, 4, 3, 3}, 1, 1, 32)) == "cpu.direct");
  CHECK(cheapest(problem(D::grad_weights, {8, 256, 28, 28}, {256, 8, 3, 3}, 1, 1, 32)) == "cpu.direct");
  // Few channels (c3d_small, resnet8): Winograd's own kernel for a C = 3 3-D layer's forward
  // (1.4x faster than GEMM). resnet8's 16-channel grad weights is near a tie (Zen 4, 2
  // threads: direct 0.91, Winograd 1.08 ms), either may be picked, never GEMM (3x slower).
  CHECK(cheapest(problem(D::forward, {4, 3, 8, 32, 32}, {32, 3, 3, 3, 3}, 1, 1)) == "cpu.winograd");
  const std::string r16 = cheapest(problem(D::grad_weights, {32, 16, 32, 32}, {16, 16, 3, 3}, 1, 1));
  CHECK((r16 == "cpu.winograd" || r16 == "cpu.direct"));
  // Grad weights with C = 3 (first layers): Winograd transforms and multiplies whole
  // 16-channel panels, so the direct kernel (Zen 4, 2 threads, 8x3x128x128 -> 32: 2.1 ms
  // against 5.9; the 3-D c3d_conv1: 25 against 31). Grouped 3x3 (4 groups of 32 channels):
  // Winograd, 1.6 against direct's 2.6 ms.
  CHECK(cheapest(problem(D::grad_weights, {8, 3, 128, 128}, {32, 3, 3, 3}, 1, 1)) == "cpu.direct");
  CHECK(cheapest(problem(D::grad_weights, {2, 3, 16, 112, 112}, {64, 3, 3, 3, 3}, 1, 1)) == "cpu.direct");
  CHECK(cheapest(problem(D::grad_weights, {8, 128, 28, 28}, {128, 32, 3, 3}, 1, 1, 4)) == "cpu.winograd");
  // Winograd's grad weights put several tile rows of a narrow image in one vector, and one
  // block of tiles (small images) keeps the transformed filter or the transform-domain sums
  // in cache. Measured (Zen 4, interleaved): c3d_small's 32 -> 64 grad weights 1.8x faster
  // than the direct kernel, resnet_3x3_7's grad inputs 1.8x; resnet8's 64-channel grad
  // weights on 8x8 images a tie (0.98 vs 0.99 ms), so either may be picked, never GEMM.
  CHECK(cheapest(problem(D::grad_weights, {4, 32, 4, 16, 16}, {64, 32, 3, 3, 3}, 1, 1)) == "cpu.winograd");
  CHECK(cheapest(problem(D::grad_inputs, {8, 512, 7, 7}, {512, 512, 3, 3}, 1, 1)) == "cpu.winograd");
  const std::string r8 = cheapest(problem(D::grad_weights, {32, 64, 8, 8}, {64, 64, 3, 3}, 1, 1));
  CHECK((r8 == "cpu.winograd" || r8 == "cpu.direct"));
  for (D dir : {D::forward, D::grad_inputs})
    CHECK(cheapest(problem(dir, {32, 32, 16, 16}, {32, 32, 3, 3}, 1, 1)) == "cpu.winograd");
  // The reason names the pick and every other candidate with its estimate.
  std::string why;
  CHECK(cheapest(problem(D::forward, {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1), &why) == "cpu.winograd");
  CHECK_THAT(why, Contains("cost model: cpu.winograd") && Contains("cpu.corrmm") && Contains(" ms"));
}

TEST_CASE("cost model: ties and algorithms without an estimate keep priority order", "[optimizer][cost]") {
  const ConvProblem p = problem(ConvDirection::forward, {2, 8, 16, 16}, {8, 8, 3, 3}, 1, 1);
  const AlgorithmRegistry& reg = AlgorithmRegistry::builtin();
  auto get = [&](const char* name) {
    for (const auto& a : reg.all())
      if (a->name() == name) return a;
    FAIL("no algorithm " << name);
    return AlgorithmPtr{};
  };
  // cpu.fft and cpu.reference have no model: the first of them wins.
  CHECK(cheapest_algorithm({get("cpu.fft"), get("cpu.reference")}, p, kMachine)->name() == "cpu.fft");
  CHECK(cheapest_algorithm({get("cpu.reference"), get("cpu.fft")}, p, kMachine)->name() == "cpu.reference");
  // A model beats no model wherever it stands.
  CHECK(cheapest_algorithm({get("cpu.fft"), get("cpu.corrmm")}, p, kMachine)->name() == "cpu.corrmm");
  // The same algorithm twice: the first.
  const auto corrmm = get("cpu.corrmm");
  CHECK(cheapest_algorithm({corrmm, corrmm}, p, kMachine) == corrmm);
  CHECK(cheapest_algorithm({}, p, kMachine) == nullptr);
}

TEST_CASE("cost model: fast_run lowers by it; excluding conv_cost_model or including a tag restores priority",
          "[optimizer][cost][lowering]") {
  const Shape x{8, 64, 28, 28}, w{64, 64, 3, 3};
  const ConvOptions half{.border_mode = "half"};
  CHECK(lowered(Mode::fast_run(), x, w, half) == "cpu.winograd");
  CHECK(lowered(Mode::fast_run().excluding("conv_cost_model"), x, w, half) == "cpu.corrmm");
  // An explicitly included tag is the user's choice: it goes first, as in Theano.
  CHECK(lowered(Mode::fast_run().including("conv_fft"), x, w, half) == "cpu.fft");
  CHECK(lowered(Mode::fast_run().excluding("conv_winograd"), x, w, half) == "cpu.direct");
  // describe() says how the choice was made.
  Var xv = input(DType::float32, x, "x"), wv = input(DType::float32, w, "w");
  Function f = compile({xv, wv}, {conv2d(xv, wv, half)}, Mode::fast_run());
  CHECK_THAT(f.describe(), Contains("cpu.winograd") && Contains("cost model"));
  // A misspelt tag is still caught.
  CHECK_THROWS_WITH(compile({xv, wv}, {conv2d(xv, wv, half)}, Mode::fast_run().excluding("conv_cost_modle")),
                    Contains("conv_cost_model"));
}

TEST_CASE("cost model: shapes known only at run time are chosen per shape by it", "[optimizer][cost][lowering]") {
  Var x = input(DType::float32, {kUnknown, 32, 20, 20}, "x"), w = input(DType::float32, {32, 32, 3, 3}, "w");
  Var y = conv2d(x, w, {.border_mode = "half"});
  Function f = compile({x, w}, {y}, Mode::fast_run());
  Tensor xt = Tensor::full(DType::float32, {4, 32, 20, 20}, 0.5), wt = Tensor::full(DType::float32, {32, 32, 3, 3}, 0.25);
  const Tensor out = f({xt, wt})[0];
  // Every interior output sums 32 channels x 9 taps of 0.5 * 0.25.
  CHECK(out.at<float>({1, 3, 10, 10}) == Approx(32 * 9 * 0.125).epsilon(1e-5));
  CHECK_THAT(f.describe(), Contains("cost model"));
}

// Run in a fresh process by the test below, with CONVGRAPH_MACHINE set.
TEST_CASE("cost model child: CONVGRAPH_MACHINE", "[.][cost_child]") {
  const char* env = std::getenv("CONVGRAPH_MACHINE");
  REQUIRE(env != nullptr);
  if (std::string(env) == "gflops=123,bandwidth=4.5") {
    const MachineModel m = measured_machine(3);
    CHECK(m.gflops_per_thread == 123);
    CHECK(m.bandwidth_gbs == 4.5);
    CHECK(m.threads == 3);
  } else {
    CHECK_THROWS_AS(measured_machine(), ValueError);
    CHECK_THROWS_WITH(measured_machine(), Contains("CONVGRAPH_MACHINE") && Contains(env));
  }
}

TEST_CASE("cost model: CONVGRAPH_MACHINE replaces the measurement; bad values are ValueErrors",
          "[optimizer][cost]") {
  const std::string child = "cost model child: CONVGRAPH_MACHINE";
  CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_MACHINE", "gflops=123,bandwidth=4.5"}}) == 0);
  for (const char* bad : {"gflops=abc,bandwidth=4", "gflops=10", "gflops=-1,bandwidth=4", "speed=1,bandwidth=2",
                          "gflops=1,bandwidth=2,"})
    CHECK(test::run_test_in_new_process(child, {{"CONVGRAPH_MACHINE", bad}}) == 0);
  // Measured here: plausible figures for any x86-64 machine.
  const MachineModel m = measured_machine(2);
  CHECK(m.gflops_per_thread > 0.1);
  CHECK(m.bandwidth_gbs > 0.1);
  CHECK(m.threads == 2);
}
