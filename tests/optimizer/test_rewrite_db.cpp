// The rewrite database: pytensor tag-query semantics, registration rules, the fixed-point
// driver and its iteration cap, and the default pipeline's phases.
#include <catch2/catch.hpp>

#include <convgraph/optimizer/rewrite_db.hpp>

#include "fakes.hpp"

using namespace convgraph;
using Catch::Contains;

TEST_CASE("rewrite db: tag queries follow pytensor (include any, exclude none, require all)", "[optimizer][rewrite_db]") {
  TagQuery q;
  q.include = {"fast_run", "conv_fft"};
  CHECK(q.accepts({"fast_run", "conv_gemm"}));
  CHECK(q.accepts({"conv_fft"}));
  CHECK_FALSE(q.accepts({"conv_gemm"}));
  CHECK_FALSE(q.accepts({}));
  q.exclude = {"conv_gemm"};
  CHECK_FALSE(q.accepts({"fast_run", "conv_gemm"}));  // exclusion wins over inclusion
  CHECK_THAT(q.reject_reason({"fast_run", "conv_gemm"}), Contains("excluded") && Contains("conv_gemm"));
  q.require = {"cudnn", "conv_dnn"};
  CHECK_FALSE(q.accepts({"fast_run", "cudnn"}));
  CHECK(q.accepts({"fast_run", "cudnn", "conv_dnn"}));
  CHECK_THAT(q.reject_reason({"fast_run", "cudnn"}), Contains("required tag conv_dnn"));
  const TagQuery only_fast{{"fast_run"}, {}, {}};
  CHECK_THAT(only_fast.reject_reason({"conv_fft"}), Contains("optimizer_including=conv_fft"));
  // A name is a tag.
  CHECK(TagQuery{{"my_rewrite"}, {}, {}}.accepts({}, "my_rewrite"));
  CHECK_FALSE(TagQuery{{"fast_run"}, {"my_rewrite"}, {}}.accepts({"fast_run"}, "my_rewrite"));
}

TEST_CASE("rewrite db: query text parses and prints", "[optimizer][rewrite_db]") {
  const TagQuery q = TagQuery::parse("fast_run:+conv_fft:-conv_gemm:&cudnn");
  CHECK(q.include == std::vector<std::string>{"fast_run", "conv_fft"});
  CHECK(q.exclude == std::vector<std::string>{"conv_gemm"});
  CHECK(q.require == std::vector<std::string>{"cudnn"});
  CHECK(q.to_string() == "+fast_run:+conv_fft:-conv_gemm:&cudnn");
  CHECK(TagQuery::parse(q.to_string()).to_string() == q.to_string());
  CHECK_THROWS_AS(TagQuery::parse("fast_run:-"), FlagError);
}

TEST_CASE("rewrite db: names are unique and may not collide with tags", "[optimizer][rewrite_db]") {
  RewriteDB db;
  db.add_phase("p", 1, {"fast_run"});
  auto nothing = [](const Var&, RewriteContext&) -> std::optional<Var> { return std::nullopt; };
  db.add_local("p", "r1", {"fast_run", "t1"}, 0, nothing);
  CHECK_THROWS_AS(db.add_local("p", "r1", {"fast_run"}, 1, nothing), ValueError);
  CHECK_THROWS_AS(db.add_local("p", "t1", {"fast_run"}, 1, nothing), ValueError);   // name = existing tag
  CHECK_THROWS_AS(db.add_local("p", "r2", {"r1"}, 1, nothing), ValueError);         // tag = existing name
  CHECK_THROWS_AS(db.add_local("p", "r3", {"p"}, 1, nothing), ValueError);          // tag = phase name
  CHECK_THROWS_AS(db.add_phase("p", 2, {}), ValueError);
  CHECK_THROWS_AS(db.add_local("nope", "r4", {"fast_run"}, 1, nothing), ValueError);
  CHECK_THROWS_AS(db.add_local("p", "r5", {"fast_run"}, 1, LocalRewrite{}), ValueError);
  CHECK_THAT(db.summary(), Contains("phase p") && Contains("local  r1") && Contains("t1"));
}

namespace {

/// An op that counts down: step(n) is rewritten to step(n-1) until 0.
class StepOp : public Op {
 public:
  explicit StepOp(int n) : n_(n) {}
  std::string name() const override { return "step"; }
  std::string params() const override { return std::to_string(n_); }
  TensorType infer(const std::vector<TensorType>& in) const override { return in[0]; }
  int n() const { return n_; }

 private:
  int n_;
};

std::optional<Var> count_down(const Var& v, RewriteContext&) {
  const auto* s = dynamic_cast<const StepOp*>(v.op());
  if (!s || s->n() == 0) return std::nullopt;
  return convgraph::apply(std::make_shared<StepOp>(s->n() - 1), v.inputs());
}

}  // namespace

TEST_CASE("rewrite db: local rewrites run to a fixed point, in order, with a cap", "[optimizer][rewrite_db]") {
  RewriteDB db;
  db.add_phase("late", 2, {"fast_run"});
  db.add_phase("early", 1, {"fast_run"});
  std::vector<std::string> log;
  db.add_global("late", "g_late", {"fast_run"}, 0, [&](RewriteContext&) { log.push_back("late"); });
  db.add_global("early", "g_early", {"fast_run"}, 0, [&](RewriteContext&) { log.push_back("early"); });
  db.add_local("early", "count_down", {"fast_run", "counting"}, 1, count_down);
  db.add_global("early", "opt_in", {"special"}, 2, [&](RewriteContext&) { log.push_back("opt_in"); });

  Var x = input(DType::float32, {2}, "x");
  Var y = convgraph::apply(std::make_shared<StepOp>(10), {x});
  FunctionGraph g(std::vector<Var>{x}, std::vector<Var>{y});
  CompileStats stats;
  Mode mode;
  RewriteContext ctx{g, mode, stats, nullptr, {}};
  db.run(TagQuery{{"fast_run"}, {}, {}}, ctx);
  CHECK(log == std::vector<std::string>{"early", "late"});
  CHECK(dynamic_cast<const StepOp*>(g.outputs()[0].op())->n() == 0);
  REQUIRE(stats.pass_seconds.size() == 2);
  CHECK(stats.pass_seconds[0].first == "early");
  CHECK(stats.pass_seconds[1].first == "late");

  // Opt-in rewrites run only when included; excluding a tag or a name switches one off.
  log.clear();
  Var y2 = convgraph::apply(std::make_shared<StepOp>(3), {x});
  FunctionGraph g2(std::vector<Var>{x}, std::vector<Var>{y2});
  RewriteContext ctx2{g2, mode, stats, nullptr, {}};
  db.run(TagQuery{{"fast_run", "special"}, {"counting", "late"}, {}}, ctx2);
  CHECK(log == std::vector<std::string>{"early", "opt_in"});
  CHECK(dynamic_cast<const StepOp*>(g2.outputs()[0].op())->n() == 3);

  // The cap: a rewrite that never converges stops after kMaxSweeps sweeps, with a note.
  RewriteDB loop;
  loop.add_phase("loop", 1, {"fast_run"});
  loop.add_local("loop", "flip", {"fast_run"}, 0, [](const Var& v, RewriteContext&) -> std::optional<Var> {
    const auto* s = dynamic_cast<const StepOp*>(v.op());
    if (!s) return std::nullopt;
    return convgraph::apply(std::make_shared<StepOp>(1 - s->n()), v.inputs());
  });
  Var y3 = convgraph::apply(std::make_shared<StepOp>(0), {x});
  FunctionGraph g3(std::vector<Var>{x}, std::vector<Var>{y3});
  CompileStats s3;
  RewriteContext ctx3{g3, mode, s3, nullptr, {}};
  const int n = loop.run_phase(*loop.phases()[0], TagQuery{{"fast_run"}, {}, {}}, ctx3);
  CHECK(n == RewriteDB::kMaxSweeps);
  REQUIRE(s3.notes.size() == 1);
  CHECK_THAT(s3.notes[0], Contains("no fixed point"));
}

TEST_CASE("rewrite db: the default pipeline has the seven phases in order", "[optimizer][rewrite_db]") {
  std::vector<std::string> names;
  for (const auto* p : default_rewrite_db().phases()) names.push_back(p->name);
  CHECK(names == std::vector<std::string>{"canonicalize", "merge", "constant_folding", "device_placement",
                                          "conv_lowering", "fusion", "cleanup"});
  Var x = input(DType::float32, {1, 1, 5, 5}, "x");
  Var w = input(DType::float32, {1, 1, 3, 3}, "w");
  CompileStats stats;
  testing::optimized({x, w}, {conv2d(x, w)}, Mode::fast_run(), &stats);
  std::vector<std::string> ran;
  for (const auto& [name, s] : stats.pass_seconds) {
    ran.push_back(name);
    CHECK(s >= 0);
  }
  CHECK(ran == names);
  // fast_compile skips fusion (tagged fast_run only); excluding a phase by name skips it.
  CompileStats fc;
  testing::optimized({x, w}, {conv2d(x, w)}, Mode::fast_compile().excluding("constant_folding"), &fc);
  ran.clear();
  for (const auto& [name, s] : fc.pass_seconds) ran.push_back(name);
  CHECK(ran == std::vector<std::string>{"canonicalize", "merge", "device_placement", "conv_lowering", "cleanup"});
  // optimizer=None runs nothing (and then the abstract conv cannot compile).
  CompileStats none;
  FunctionGraph g(std::vector<Var>{x, w}, std::vector<Var>{x * 2.0});
  optimize(g, Mode::none(), none);
  CHECK(none.pass_seconds.empty());
  CHECK_THAT(default_rewrite_db().summary(), Contains("meta_optimize_conv") && Contains("conv_meta"));
}
