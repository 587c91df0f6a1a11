// Issue 9's extreme convolution geometries (found by fuzz_conv): ConvProblem::make bounds
// every per-axis quantity below 2^31 with a ShapeError naming it, and cpu.depthwise
// declines a problem whose per-thread plane buffer would be huge or above workspace_limit.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/error.hpp"

using namespace convgraph;

namespace {

constexpr std::int64_t kBig = std::int64_t{1} << 31;

ConvProblem make_2d(std::int64_t stride, std::int64_t dilation, std::int64_t pad, std::int64_t groups = 1,
                    std::int64_t channels = 2) {
  ConvParams p;
  p.ndim = 2;
  p.stride = {1, stride};
  p.dilation = {1, dilation};
  p.border = BorderMode({std::pair<std::int64_t, std::int64_t>{0, 0}, {pad, pad}});
  p.groups = groups;
  return ConvProblem::make(ConvDirection::forward, p, {1, channels, 5, 5}, {channels, channels / groups, 3, 3},
                           DType::float32, "test");
}

void require_limit_error(std::int64_t stride, std::int64_t dilation, std::int64_t pad, const std::string& what) {
  try {
    (void)make_2d(stride, dilation, pad);
    FAIL("accepted stride " << stride << ", dilation " << dilation << ", padding " << pad);
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("the " + what + " of spatial axis 1") != std::string::npos);
    CHECK(m.find("above the limit of 2147483647") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("conv problem: per-axis values of 2^31 and more are ShapeErrors naming the value",
          "[backends][conv][limits]") {
  require_limit_error(kBig, 1, 0, "stride");
  require_limit_error(1, kBig, 0, "dilated kernel size");  // (3 - 1) * 2^31 + 1
  require_limit_error(1, 1, kBig, "padded input size");
  require_limit_error(1, kBig / 2, 0, "dilated kernel size");  // (3 - 1) * 2^30 + 1
  require_limit_error(1, 1, INT64_MAX, "padded input size");   // saturates, no overflow
  // Just below the limit is accepted.
  CHECK(make_2d(kBig - 1, 1, 0).out[1] == 1);
  CHECK(make_2d(1, 1, (kBig - 1 - 5) / 2).out[1] > 0);
}

TEST_CASE("conv problem: cpu.depthwise declines a huge plane buffer and honours workspace_limit",
          "[backends][conv][limits]") {
  const ConvAlgorithm* dw = AlgorithmRegistry::builtin().find("cpu.depthwise");
  REQUIRE(dw != nullptr);
  // Depthwise (C = G = 2), small padding: accepted.
  ConvProblem small = make_2d(1, 1, 1, 2, 2);
  CHECK(dw->applicable(small).is_ok());
  // A padding of 2^27 per side makes a plane buffer of gigabytes: declined, with the reason.
  const ConvProblem huge = make_2d(1, 1, std::int64_t{1} << 27, 2, 2);
  const Status s = dw->applicable(huge);
  CHECK_FALSE(s.is_ok());
  CHECK(s.reason().find("per-thread plane buffer") != std::string::npos);
  // The buffer is its workspace: a limit below it declines, one above it accepts.
  small.workspace_limit = 16;
  CHECK_FALSE(dw->applicable(small).is_ok());
  CHECK(dw->applicable(small).reason().find("workspace_limit") != std::string::npos);
  small.workspace_limit = std::size_t{1} << 20;
  CHECK(dw->applicable(small).is_ok());
}
