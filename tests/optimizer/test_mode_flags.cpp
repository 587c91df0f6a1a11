// Mode presets, chaining and the flag language (every flag of docs/DESIGN.md), and its errors.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "fakes.hpp"

using namespace convgraph;
using Catch::Contains;

TEST_CASE("mode: presets", "[optimizer][mode]") {
  CHECK(Mode::fast_run().optimizer == "fast_run");
  CHECK_FALSE(Mode::fast_run().debug);
  CHECK(Mode::fast_compile().optimizer == "fast_compile");
  CHECK(Mode::debug_mode().debug);
  CHECK(Mode::debug_mode().optimizer == "fast_run");
  CHECK(Mode::none().optimizer == "None");
  CHECK(Mode::fast_run().device == DeviceKind::cpu);
}

TEST_CASE("mode: chaining appends tags without duplicates and leaves the original alone", "[optimizer][mode]") {
  const Mode base = Mode::fast_run();
  const Mode m = base.including("conv_fft").excluding("conv_dnn:conv_gemm").requiring("conv_fft").including("conv_fft");
  CHECK(m.include_tags == std::vector<std::string>{"conv_fft"});
  CHECK(m.exclude_tags == std::vector<std::string>{"conv_dnn", "conv_gemm"});
  CHECK(m.require_tags == std::vector<std::string>{"conv_fft"});
  CHECK(base.include_tags.empty());
  CHECK(m.with_flags("device=cpu,optimizer_including=conv_meta").include_tags ==
        std::vector<std::string>{"conv_fft", "conv_meta"});
}

TEST_CASE("mode: every flag of docs/DESIGN.md parses", "[optimizer][mode]") {
  const Mode m = Mode::from_flags(
      "device=cpu, optimizer=fast_compile, optimizer_including=conv_fft:conv_meta,"
      "optimizer_excluding=conv_dnn, optimizer_requiring=conv_fft, metaopt.verbose=1,"
      "metaopt.optimizer_including=alternative, metaopt.optimizer_excluding=default:conv_dnn,"
      "metaopt.cache=/tmp/x/tuning.txt, workspace_limit=64M, profile=True, threads=3, metaopt.budget=0.5");
  CHECK(m.device == DeviceKind::cpu);
  CHECK(m.optimizer == "fast_compile");
  CHECK(m.include_tags == std::vector<std::string>{"conv_fft", "conv_meta"});
  CHECK(m.exclude_tags == std::vector<std::string>{"conv_dnn"});
  CHECK(m.require_tags == std::vector<std::string>{"conv_fft"});
  CHECK(m.metaopt_verbose == 1);
  CHECK(m.metaopt_include == std::vector<std::string>{"alternative"});
  CHECK(m.metaopt_exclude == std::vector<std::string>{"default", "conv_dnn"});
  CHECK(m.metaopt_cache == "/tmp/x/tuning.txt");
  CHECK(m.workspace_limit == 64u << 20);
  CHECK(m.profile);
  CHECK(m.threads == 3);
  CHECK(m.metaopt_budget == 0.5);

  CHECK(Mode::from_flags("device=cuda").device == DeviceKind::cuda);
  CHECK(Mode::from_flags("mode=DebugMode").debug);
  CHECK_FALSE(Mode::from_flags("mode=DebugMode,mode=FAST_RUN").debug);
  CHECK(Mode::from_flags("mode=FAST_COMPILE").optimizer == "fast_compile");
  CHECK(Mode::from_flags("optimizer=None").optimizer == "None");
  CHECK(Mode::from_flags("optimizer=none").optimizer == "None");
  CHECK(Mode::from_flags("workspace_limit=1024").workspace_limit == 1024);
  CHECK(Mode::from_flags("workspace_limit=2K").workspace_limit == 2048);
  CHECK(Mode::from_flags("workspace_limit=1G").workspace_limit == 1u << 30);
  CHECK(Mode::from_flags("workspace_limit=64M,workspace_limit=None").workspace_limit == SIZE_MAX);
  CHECK_FALSE(Mode::from_flags("profile=False").profile);
  CHECK(Mode::from_flags("metaopt.cache=None").metaopt_cache == "None");
  CHECK(Mode::from_flags("").to_string() == Mode::fast_run().to_string());
  CHECK(Mode::from_flags(" , device=cpu ,").device == DeviceKind::cpu);
}

TEST_CASE("mode: to_string round-trips through the flag parser", "[optimizer][mode]") {
  Mode m = Mode::debug_mode().including("conv_fft:conv_meta").excluding("conv_gemm").requiring("conv_fft");
  m.metaopt_verbose = 2;
  m.metaopt_include = {"alternative"};
  m.metaopt_exclude = {"default"};
  m.metaopt_cache = "/tmp/cache.txt";
  m.metaopt_budget = 2.5;
  m.workspace_limit = 3 << 20;
  m.profile = true;
  m.threads = 2;
  const std::string text = m.to_string();
  CHECK(Mode::from_flags(text).to_string() == text);
  CHECK_THAT(text, Contains("mode=DebugMode") && Contains("workspace_limit=3M") && Contains("optimizer_including=conv_fft:conv_meta"));
  CHECK(Mode::fast_run().to_string() == "device=cpu,optimizer=fast_run");
}

TEST_CASE("mode: unknown flags and bad values are FlagErrors that list the valid ones", "[optimizer][mode]") {
  CHECK_THROWS_AS(Mode::from_flags("devise=cpu"), FlagError);
  CHECK_THROWS_WITH(Mode::from_flags("devise=cpu"),
                    Contains("unknown flag 'devise'") && Contains("did you mean 'device'") && Contains("optimizer_including"));
  CHECK_THROWS_WITH(Mode::from_flags("metaopt.verbos=1"), Contains("did you mean 'metaopt.verbose'"));
  CHECK_THROWS_WITH(Mode::from_flags("device=tpu"), Contains("device") && Contains("'tpu'") && Contains("cpu|cuda"));
  CHECK_THROWS_WITH(Mode::from_flags("optimizer=fast_runn"), Contains("did you mean 'fast_run'"));
  CHECK_THROWS_WITH(Mode::from_flags("mode=Debug"), Contains("FAST_RUN|FAST_COMPILE|DebugMode"));
  CHECK_THROWS_WITH(Mode::from_flags("metaopt.verbose=3"), Contains("0|1|2"));
  CHECK_THROWS_WITH(Mode::from_flags("metaopt.verbose=x"), Contains("0|1|2"));
  CHECK_THROWS_WITH(Mode::from_flags("workspace_limit=-5"), Contains("BYTES"));
  CHECK_THROWS_WITH(Mode::from_flags("workspace_limit=12Q"), Contains("BYTES"));
  CHECK_THROWS_WITH(Mode::from_flags("workspace_limit=99999999999999999999"), Contains("workspace_limit"));
  CHECK_THROWS_WITH(Mode::from_flags("profile=maybe"), Contains("True|False"));
  CHECK_THROWS_WITH(Mode::from_flags("threads=-1"), Contains("threads"));
  CHECK_THROWS_WITH(Mode::from_flags("metaopt.budget=0"), Contains("SECONDS"));
  CHECK_THROWS_WITH(Mode::from_flags("metaopt.cache="), Contains("PATH"));
  CHECK_THROWS_WITH(Mode::from_flags("device"), Contains("has no value"));
  CHECK_THROWS_WITH(Mode::from_flags("optimizer_including=conv fft"), Contains("tags separated by ':'"));
}

TEST_CASE("mode: CONVGRAPH_FLAGS is read by from_env and its errors say so", "[optimizer][mode]") {
  ::setenv("CONVGRAPH_FLAGS", "optimizer_excluding=conv_gemm,metaopt.verbose=1", 1);
  const Mode m = Mode::from_env();
  CHECK(m.exclude_tags == std::vector<std::string>{"conv_gemm"});
  CHECK(m.metaopt_verbose == 1);
  ::setenv("CONVGRAPH_FLAGS", "optimiser=fast_run", 1);
  CHECK_THROWS_AS(Mode::from_env(), FlagError);
  CHECK_THROWS_WITH(Mode::from_env(), Contains("CONVGRAPH_FLAGS") && Contains("did you mean 'optimizer'"));
  ::unsetenv("CONVGRAPH_FLAGS");
  CHECK(Mode::from_env().to_string() == Mode::fast_run().to_string());
}

TEST_CASE("mode: unknown tags are caught when compiling, with a suggestion", "[optimizer][mode]") {
  Var x = input(DType::float32, {1, 1, 4, 4}, "x");
  Var w = input(DType::float32, {1, 1, 3, 3}, "w");
  Var y = conv2d(x, w);
  CHECK_THROWS_AS(compile({x, w}, {y}, Mode::fast_run().including("conv_ftt")), FlagError);
  CHECK_THROWS_WITH(compile({x, w}, {y}, Mode::fast_run().including("conv_ftt")),
                    Contains("optimizer_including") && Contains("'conv_ftt'") && Contains("did you mean 'conv_fft'"));
  CHECK_THROWS_WITH(compile({x, w}, {y}, Mode::from_flags("metaopt.optimizer_excluding=defualt")),
                    Contains("did you mean 'default'"));
  // Rewrite names and algorithm names are tags too.
  CHECK_NOTHROW(compile({x, w}, {y}, Mode::fast_run().excluding("merge_common_subexpressions")));
  CHECK_NOTHROW(compile({x, w}, {y}, Mode::fast_run().excluding("cpu.winograd")));
}

TEST_CASE("mode: a mode applies to one compiled function only", "[optimizer][mode]") {
  Var x = input(DType::float32, {1, 1, 5, 5}, "x");
  Var w = input(DType::float32, {1, 1, 3, 3}, "w");
  Var y = conv2d(x, w);
  // In list order (the cost model excluded), so that each mode's pick is known.
  Function a = compile({x, w}, {y}, Mode::fast_run().excluding("conv_gemm:conv_cost_model"));
  Function b = compile({x, w}, {y}, Mode::fast_run().excluding("conv_cost_model"));
  CHECK(testing::chosen(a.graph()) == std::vector<std::string>{"cpu.direct"});
  CHECK(testing::chosen(b.graph()) == std::vector<std::string>{"cpu.corrmm"});
  CHECK(a.mode().exclude_tags == std::vector<std::string>{"conv_gemm", "conv_cost_model"});
}
