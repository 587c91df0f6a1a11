// Which implementation fires per flag set (docs/TESTING.md 8), the "nothing applies" errors,
// run-time choice for unknown shapes, and that lowered graphs compute the right numbers.
#include <catch2/catch.hpp>

#include <convgraph/optimizer/conv_lowering.hpp>

#include "fakes.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

struct ConvGraph {
  Var x, w, y;
};

ConvGraph conv_graph(std::vector<std::int64_t> stride = {1, 1}, ConvOptions o = {}) {
  ConvGraph g;
  g.x = input(DType::float32, {2, 3, 9, 9}, "x");
  g.w = input(DType::float32, {4, 3, 3, 3}, "w");
  o.subsample = std::move(stride);
  if (o.name.empty()) o.name = "conv1";
  g.y = conv2d(g.x, g.w, o);
  return g;
}

/// What `mode` lowers the conv to in plain priority order: these tests pin down the tag
/// semantics (Theano's), so the cost model (test_cost_model.cpp) is excluded.
std::string pick(const Mode& mode, std::vector<std::int64_t> stride = {1, 1}, ConvOptions o = {}) {
  ConvGraph g = conv_graph(std::move(stride), std::move(o));
  const auto names = chosen(optimized({g.x, g.w}, {g.y}, mode.excluding("conv_cost_model")));
  REQUIRE(names.size() == 1);
  return names[0];
}

Tensor random_tensor(Shape s, unsigned seed) {
  Tensor t(DType::float32, std::move(s));
  std::uint32_t state = seed * 2654435761u + 1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    t.set(i, static_cast<double>(state >> 8) / (1 << 24) - 0.5);
  }
  return t;
}

}  // namespace

TEST_CASE("lowering: the implementation each flag set picks on CPU", "[optimizer][lowering]") {
  CHECK(pick(Mode::fast_run()) == "cpu.corrmm");
  CHECK(pick(Mode::fast_compile()) == "cpu.corrmm");
  CHECK(pick(Mode::fast_run().excluding("conv_gemm")) == "cpu.direct");
  CHECK(pick(Mode::fast_run().excluding("conv_gemm:conv_direct")) == "cpu.winograd");
  // conv_fft is opt-in; included, it goes first where it applies ...
  CHECK(pick(Mode::fast_run().including("conv_fft")) == "cpu.fft");
  // ... and where it does not (stride 2), priority continues with the default list.
  CHECK(pick(Mode::fast_run().including("conv_fft"), {2, 2}) == "cpu.corrmm");
  CHECK(pick(Mode::fast_run().including("conv_fft").excluding("conv_gemm"), {2, 2}) == "cpu.direct");
  // A node that refuses FFT never gets it; conv2d_fft asks for it without any flag.
  CHECK(pick(Mode::fast_run().including("conv_fft"), {1, 1}, ConvOptions{.allow_fft = false}) == "cpu.corrmm");
  {
    ConvGraph g = conv_graph();
    Var y = conv2d_fft(g.x, g.w);
    CHECK(chosen(optimized({g.x, g.w}, {y}, Mode::fast_run())) == std::vector<std::string>{"cpu.fft"});
    CHECK(chosen(optimized({g.x, g.w}, {y}, Mode::fast_run().excluding("conv_fft:conv_cost_model"))) ==
          std::vector<std::string>{"cpu.corrmm"});
  }
  // Requiring a tag restricts algorithms to it; naming an algorithm works like a tag.
  CHECK(pick(Mode::fast_run().including("conv_fft").requiring("conv_fft")) == "cpu.fft");
  CHECK(pick(Mode::fast_run().including("cpu.reference")) == "cpu.reference");
  CHECK(pick(Mode::fast_run().including("conv_winograd")) == "cpu.winograd");
}

TEST_CASE("lowering: gradients lower too, and the lowered graph matches the reference", "[optimizer][lowering]") {
  Var x = input(DType::float32, {2, 3, 8, 8}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.border_mode = "half", .subsample = {2, 2}, .name = "c"});
  Var cost = sum(y * y);
  auto grads = grad(cost, {x, w});
  const Tensor xv = random_tensor({2, 3, 8, 8}, 1), wv = random_tensor({4, 3, 3, 3}, 2);
  std::vector<std::vector<double>> results;
  for (const char* flags : {"optimizer_excluding=conv_gemm", "", "optimizer_including=conv_fft"}) {
    Function f = compile({x, w}, {y, grads[0], grads[1]}, Mode::from_flags(flags));
    for (const auto* c : conv_impls(f.graph())) CHECK_FALSE(c->implementation().empty());
    std::vector<double> all;
    for (const auto& t : f({xv, wv}))
      for (double d : t.to_vector()) all.push_back(d);
    results.push_back(all);
  }
  Function ref = compile({x, w}, {y, grads[0], grads[1]}, Mode::fast_run().including("cpu.reference"));
  for (const auto* c : conv_impls(ref.graph())) CHECK(c->algorithm()->name() == "cpu.reference");
  std::vector<double> want;
  for (const auto& t : ref({xv, wv}))
    for (double d : t.to_vector()) want.push_back(d);
  for (const auto& r : results) {
    REQUIRE(r.size() == want.size());
    for (std::size_t i = 0; i < r.size(); ++i) CHECK(r[i] == Approx(want[i]).margin(1e-4));
  }
}

TEST_CASE("lowering: implementation() and describe() say what was chosen and why", "[optimizer][lowering]") {
  ConvGraph g = conv_graph({2, 2});
  Function f = compile({g.x, g.w}, {g.y}, Mode::fast_run().including("conv_fft").excluding("conv_cost_model"));
  const auto impls = conv_impls(f.graph());
  REQUIRE(impls.size() == 1);
  CHECK_THAT(impls[0]->implementation(),
             Contains("cpu.corrmm (priority") && Contains("declined first: cpu.fft") && Contains("stride"));
  CHECK_THAT(f.describe(), Contains("cpu.corrmm") && Contains("priority"));
  CHECK_THAT(debugprint(f.graph()), Contains("cpu.corrmm"));
  CHECK(impls[0]->name() == "Conv");
  CHECK(impls[0]->tags() == std::vector<std::string>{"conv_gemm", "fast_run", "fast_compile"});
}

TEST_CASE("lowering: excluding everything fails naming the node, tags and reasons", "[optimizer][lowering]") {
  ConvGraph g = conv_graph({2, 2});
  const Mode m = Mode::fast_run().excluding("conv_gemm:conv_direct").including("conv_fft");
  CHECK_THROWS_AS(compile({g.x, g.w}, {g.y}, m), CompileError);
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, m),
                    Contains("AbstractConv") && Contains("'conv1'") && Contains("tags that could lower it") &&
                        Contains("conv_gemm") && Contains("excluded tags: conv_gemm, conv_direct") &&
                        Contains("cpu.corrmm: excluded by optimizer_excluding=conv_gemm") &&
                        Contains("cpu.fft: stride 2") && Contains("cpu.winograd: stride") &&
                        Contains("cpu.reference: not enabled") && Contains("cuda"));
  // optimizer=None lowers nothing.
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, Mode::none()), Contains("optimizer=None") && Contains("'conv1'"));
  // Excluding the lowering rewrite itself.
  CHECK_THROWS_AS(compile({g.x, g.w}, {g.y}, Mode::fast_run().excluding("conv_lowering")), CompileError);
  // Requiring a tag no CPU algorithm has.
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, Mode::fast_run().requiring("conv_dnn")),
                    Contains("lacks the required tag conv_dnn"));
}

TEST_CASE("lowering: cuDNN requests and device=cuda fail clearly without a GPU", "[optimizer][lowering]") {
  if (cuda_info().available) {
    WARN("a GPU is present (" << cuda_info().device_name << "): the no-GPU errors cannot be observed here");
    return;
  }
  ConvGraph g = conv_graph();
  CHECK_THROWS_AS(compile({g.x, g.w}, {g.y}, Mode::from_flags("optimizer_including=cudnn")), CompileError);
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, Mode::from_flags("optimizer_including=cudnn")),
                    Contains("optimizer_including=cudnn") && Contains("cuDNN was requested") &&
                        Contains(cuda_info().reason));
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, Mode::from_flags("optimizer_requiring=cudnn")),
                    Contains("optimizer_requiring=cudnn"));
  CHECK_THROWS_AS(compile({g.x, g.w}, {g.y}, Mode::from_flags("device=cuda")), DeviceError);
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, Mode::from_flags("device=cuda")),
                    Contains("device=cuda") && Contains(cuda_info().reason));
}

TEST_CASE("lowering: unknown shapes choose per shape at run time", "[optimizer][lowering]") {
  Var x = input(DType::float32, {kUnknown, 3, kUnknown, kUnknown}, "x");
  Var w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var y = conv2d(x, w, {.name = "dyn"});
  Function f = compile({x, w}, {y}, Mode::fast_run().including("conv_fft"));
  const auto impls = conv_impls(f.graph());
  REQUIRE(impls.size() == 1);
  CHECK(impls[0]->algorithm() == nullptr);
  REQUIRE(impls[0]->candidates().size() >= 2);
  CHECK(impls[0]->candidates()[0]->name() == "cpu.fft");
  const Tensor xv = random_tensor({1, 3, 7, 7}, 3), wv = random_tensor({4, 3, 3, 3}, 4);
  auto out = f({xv, wv});
  CHECK(out[0].shape() == Shape{1, 4, 5, 5});
  CHECK_THAT(impls[0]->implementation(), Contains("per shape") && Contains("-> cpu.fft"));

  // Unknown shapes with a stride that FFT refuses: the next candidate runs.
  Var y2 = conv2d(x, w, {.subsample = {2, 2}});
  Function f2 = compile({x, w}, {y2}, Mode::fast_run().including("conv_fft"));
  auto out2 = f2({xv, wv});
  CHECK(out2[0].shape() == Shape{1, 4, 3, 3});
  CHECK_THAT(conv_impls(f2.graph())[0]->implementation(), Contains("-> cpu.corrmm"));

  // Gradients of a strided conv with unknown dims carry a shape-source input; in DebugMode
  // every run is also checked against the reference.
  auto g = grad(sum(y2 * y2), {x, w});
  Function f3 = compile({x, w}, {g[0], g[1]}, Mode::debug_mode());
  for (const auto* c : conv_impls(f3.graph())) CHECK(c->algorithm() == nullptr);
  auto out3 = f3({xv, wv});
  CHECK(out3[0].shape() == xv.shape());
  CHECK(out3[1].shape() == wv.shape());
}

TEST_CASE("lowering: the workspace limit skips candidates that need more", "[optimizer][lowering]") {
  auto clock = std::make_shared<FakeClock>();
  auto big = std::make_shared<FakeAlgorithm>("fake.big", std::vector<std::string>{"conv_gemm", "fast_run"}, 1e-3, clock);
  big->workspace = 1 << 20;
  auto small = std::make_shared<FakeAlgorithm>("fake.small", std::vector<std::string>{"conv_direct", "fast_run"}, 1e-3, clock);
  AlgorithmRegistry reg;
  reg.add(big);
  reg.add(small);
  Mode m = Mode::fast_run();
  m.registry = &reg;
  CHECK(pick(m) == "fake.big");
  m.workspace_limit = 1000;
  CHECK(pick(m) == "fake.small");
  m.exclude_tags = {"conv_direct"};
  ConvGraph g = conv_graph();
  CHECK_THROWS_WITH(compile({g.x, g.w}, {g.y}, m), Contains("fake.big: workspace 1.0 MiB exceeds workspace_limit"));
}

TEST_CASE("lowering: the selector orders promoted algorithms first and reports the rest", "[optimizer][lowering]") {
  ConvGraph g = conv_graph();
  const auto* op = as_abstract_conv(g.y);
  REQUIRE(op != nullptr);
  ConvProblem p = op->problem({g.x.type(), g.w.type()});
  const auto c = conv_candidates(*op, &p, DeviceKind::cpu, Mode::fast_run().including("conv_fft"),
                                 AlgorithmRegistry::builtin());
  REQUIRE(!c.verdicts.empty());
  CHECK(c.verdicts[0].algorithm->name() == "cpu.fft");
  CHECK(c.verdicts[0].promoted);
  const auto usable = c.usable();
  REQUIRE(usable.size() >= 3);
  CHECK(usable[0]->name() == "cpu.fft");
  CHECK(usable[1]->name() == "cpu.corrmm");
  bool reference_declined = false;
  for (const auto& d : c.declined()) reference_declined = reference_declined || d.rfind("cpu.reference: not enabled", 0) == 0;
  CHECK(reference_declined);
}
