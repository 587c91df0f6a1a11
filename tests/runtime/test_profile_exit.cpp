// profile=True prints every profiled function's summary when the process exits (to
// profile.file here), including functions already destroyed and ones still alive.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "support/child_process.hpp"

using namespace convgraph;
using Catch::Contains;

namespace {
Function small_function(const std::string& name) {
  Var x = input(DType::float32, {2, 3}, "x");
  Var y = relu(x * x);
  y.named(name);
  return compile({x}, {y}, Mode::fast_run());  // an explicit Mode: the environment still applies
}
}  // namespace

// Run by the test below in a new process, with CONVGRAPH_FLAGS set.
TEST_CASE("profile at exit: child", "[.][profile_exit_child]") {
  static std::optional<Function> alive;  // destroyed after the exit report: still alive then
  {
    Function gone = small_function("gone");
    for (int i = 0; i < 3; ++i) gone({Tensor::full(DType::float32, {2, 3}, 1)});
  }
  alive = small_function("alive");
  (*alive)({Tensor::full(DType::float32, {2, 3}, 2)});
  CHECK(alive->mode().profile);
}

TEST_CASE("profile: profile=True in CONVGRAPH_FLAGS prints the summary at exit to profile.file", "[runtime][profile]") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("convgraph_profile_exit_" + std::to_string(::getpid()) + ".txt")).string();
  std::filesystem::remove(path);
  const int rc = test::run_test_in_new_process("profile at exit: child",
                                               {{"CONVGRAPH_FLAGS", "profile=True,profile.file=" + path}});
  REQUIRE(rc == 0);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::filesystem::remove(path);
  CHECK_THAT(text, Contains("convgraph profile (profile=True): 2 function(s)"));
  CHECK_THAT(text, Contains("function 1 of 2: outputs ") && Contains("'gone'") && Contains("3 call(s)"));
  CHECK_THAT(text, Contains("function 2 of 2: outputs ") && Contains("'alive'") && Contains("1 call(s)"));
  CHECK_THAT(text, Contains("Apply nodes") && Contains("profile=True"));
}
