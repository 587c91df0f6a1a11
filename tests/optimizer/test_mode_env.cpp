// CONVGRAPH_FLAGS under every Mode, code on top (THEANO_FLAGS precedence), its errors
// whatever the program passes, and config(): every flag, value, origin and doc line.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "fakes.hpp"

using namespace convgraph;
using Catch::Contains;

namespace {

/// Sets CONVGRAPH_FLAGS for one test and restores its absence after.
struct EnvFlags {
  explicit EnvFlags(const char* flags) { ::setenv("CONVGRAPH_FLAGS", flags, 1); }
  ~EnvFlags() { ::unsetenv("CONVGRAPH_FLAGS"); }
};

const ConfigEntry& entry(const std::vector<ConfigEntry>& all, const std::string& name) {
  for (const auto& e : all)
    if (e.name == name) return e;
  FAIL("config_entries has no flag " << name);
  throw;
}

struct Net {
  Var x = input(DType::float32, {1, 1, 5, 5}, "x");
  Var w = input(DType::float32, {1, 1, 3, 3}, "w");
  Var y = conv2d(x, w);
};

}  // namespace

TEST_CASE("mode: CONVGRAPH_FLAGS is the base under a Mode made in code, and code wins", "[optimizer][mode][env]") {
  EnvFlags env("profile=True,metaopt.verbose=1,optimizer_excluding=conv_fft,workspace_limit=64M,mode=DebugMode");
  Mode code = Mode::fast_run().excluding("conv_gemm");
  code.metaopt_verbose = 2;
  const Mode eff = code.effective();
  CHECK(eff.profile);                                  // from the environment
  CHECK(eff.debug);                                    // fast_run() is the default preset: env's mode applies
  CHECK(eff.workspace_limit == std::size_t{64} << 20);  // from the environment
  CHECK(eff.metaopt_verbose == 2);                     // code over environment
  CHECK(eff.exclude_tags == std::vector<std::string>{"conv_fft", "conv_gemm"});  // union
  CHECK(eff.effective().to_string() == eff.to_string());  // applying it twice changes nothing

  // A default value set in code through the flag language, a setter or code_flags still wins.
  CHECK_FALSE(Mode::fast_run().with_flags("profile=False").effective().profile);
  CHECK_FALSE(Mode::from_flags("mode=FAST_RUN").effective().debug);
  Mode direct;
  direct.profile = false;
  CHECK(direct.effective().profile);  // assigned its default directly: the environment's applies
  direct.code_flags.push_back("profile");
  CHECK_FALSE(direct.effective().profile);

  // compile() runs with it, whatever Mode the program passes; from_env() is the same.
  Net n;
  Function f = compile({n.x, n.w}, {n.y}, Mode::fast_run().excluding("conv_gemm"));
  CHECK(f.mode().profile);
  CHECK(f.mode().debug);
  // Neither excluded family lowers it (which of the others does is the cost model's near
  // tie between cpu.direct and cpu.winograd on this small layer, measured peaks deciding).
  const std::vector<std::string> chosen = testing::chosen(f.graph());
  REQUIRE(chosen.size() == 1);
  CHECK(chosen[0] != "cpu.corrmm");
  CHECK(chosen[0] != "cpu.fft");
  CHECK(compile({n.x, n.w}, {n.y}).mode().to_string() == Mode::fast_run().effective().to_string());
  CHECK(Mode::from_env().effective().to_string() == Mode::from_env().to_string());
}

TEST_CASE("mode: a misspelled CONVGRAPH_FLAGS is reported even when the program passes a Mode", "[optimizer][mode][env]") {
  Net n;
  EnvFlags env("optimiser=fast_run");
  CHECK_THROWS_AS(compile({n.x, n.w}, {n.y}, Mode::fast_run()), FlagError);
  CHECK_THROWS_WITH(compile({n.x, n.w}, {n.y}, Mode::fast_compile().including("conv_gemm")),
                    Contains("CONVGRAPH_FLAGS=\"optimiser=fast_run\"") && Contains("did you mean 'optimizer'"));
  CHECK_THROWS_AS(config(), FlagError);
  ::setenv("CONVGRAPH_FLAGS", "profile=maybe", 1);
  CHECK_THROWS_WITH(Mode::fast_run().effective(), Contains("CONVGRAPH_FLAGS") && Contains("True|False"));
}

TEST_CASE("mode: config() shows every flag with its value, where it came from and its doc", "[optimizer][mode][env]") {
  EnvFlags env("metaopt.verbose=1,optimizer_including=conv_fft,profile.file=/tmp/p.txt");
  Mode code = Mode::fast_run().including("conv_meta");
  code.threads = 2;
  const auto all = config_entries(code);
  CHECK(entry(all, "device").value == "cpu");
  CHECK(entry(all, "device").origin == "default");
  CHECK(entry(all, "metaopt.verbose").value == "1");
  CHECK(entry(all, "metaopt.verbose").origin == "env");
  CHECK(entry(all, "threads").value == "2");
  CHECK(entry(all, "threads").origin == "code");
  CHECK(entry(all, "optimizer_including").value == "conv_fft:conv_meta");
  CHECK(entry(all, "optimizer_including").origin == "env+code");
  CHECK(entry(all, "profile.file").value == "/tmp/p.txt");
  CHECK(entry(all, "profile").value == "False");
  // Every flag of the language is there, documented, and its value parses back.
  for (const auto& e : all) {
    INFO(e.name);
    CHECK_FALSE(e.doc.empty());
    CHECK_FALSE(e.values.empty());
    if (!e.value.empty()) CHECK_NOTHROW(Mode::from_flags(e.name + "=" + e.value));
  }
  CHECK_THROWS_WITH(Mode::from_flags("x=1"), Contains("profile.file") && Contains("threads"));
  CHECK(all.size() == 15);
  const std::string text = config(code);
  CHECK_THAT(text, Contains("CONVGRAPH_FLAGS=\"metaopt.verbose=1,optimizer_including=conv_fft,profile.file=/tmp/p.txt\""));
  CHECK_THAT(text, Contains("threads (N (0 = default pool))\n    Doc:    ") && Contains("    Value:  2\n    From:   code\n"));
  CHECK_THAT(text, Contains("metaopt.verbose (0|1|2)") && Contains("    Value:  1\n    From:   env\n"));
}

TEST_CASE("mode: profile.file parses, prints and round-trips", "[optimizer][mode][env]") {
  CHECK(Mode::from_flags("profile.file=/tmp/prof.txt").profile_file == "/tmp/prof.txt");
  CHECK(Mode::from_flags("profile.file=/tmp/a,profile.file=stderr").profile_file.empty());
  const Mode m = Mode::from_flags("profile=True,profile.file=/tmp/prof.txt");
  CHECK_THAT(m.to_string(), Contains("profile=True,profile.file=/tmp/prof.txt"));
  CHECK(Mode::from_flags(m.to_string()).to_string() == m.to_string());
  CHECK_THROWS_WITH(Mode::from_flags("profile.file="), Contains("profile.file") && Contains("PATH"));
  CHECK_THROWS_WITH(Mode::from_flags("profile.fil=x"), Contains("did you mean 'profile.file'"));
}
