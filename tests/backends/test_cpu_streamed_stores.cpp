// Destinations over half the L3 are stored past the caches (non-temporal stores of whole
// aligned vectors, then a fence): cpu.direct's channel-vectorised path and cpu.winograd's
// output transform, forward and grad inputs, at every CPU level this machine runs (the
// active one under the sanitizers), against the float64 reference. The kernels take the L3
// to be 4 MiB here (ScopedStreamL3; the hosts' 32-480 MiB made the layers minutes long
// under the sanitizers), the layers' destinations are over half that, and the tensors are
// 64-byte aligned as the runtime's are, so the streamed path is the one that runs; plane
// ends and vector tails go through plain stores in the same run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>

#include "backends/cpu/sgemm.hpp"  // ScopedStreamL3
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

namespace {

/// Rows of W floats and H rows: 64 destination channels of H x W at least half the L3 the
/// kernels are told of in all; the other side has `narrow` channels.
void check_large_destination(const ConvAlgorithm& algo, std::int64_t W, std::int64_t narrow, std::uint64_t seed) {
  ThreadPool pool(2);
  constexpr std::int64_t kL3 = std::int64_t{4} << 20;
  const convgraph::cpu::ScopedStreamL3 small_l3(kL3);
  const std::int64_t H = kL3 / (2 * 64 * 4 * W) + 3;
  // Forward writes y (K = 64); grad inputs writes x (C = 64).
  for (ConvDirection dir : {ConvDirection::forward, ConvDirection::grad_inputs}) {
    const bool fwd = dir == ConvDirection::forward;
    const std::int64_t C = fwd ? narrow : 64, K = fwd ? 64 : narrow;
    const ConvCase c = make_conv_case("large planes", {1, C, H, W}, {K, C, 3, 3}, 1, {1, 1});
    const ConvProblem p = c.problem(dir, DType::float32);
    INFO(algo.name() << " " << p.key());
    REQUIRE(algo.applicable(p).is_ok());
    const ConvOperands ops = make_operands(p, seed);
    const std::vector<double> ref = reference_output(c.problem(dir, DType::float64), ops);
    const std::vector<CpuIsa> levels =
        convgraph::test::sanitized_build() ? std::vector<CpuIsa>{active_cpu_isa()} : runnable_cpu_levels();
    for (CpuIsa isa : levels) {
      ScopedCpuIsa scope(isa);
      INFO("level " << cpu_isa_name(isa));
      CHECK(max_abs_diff(run_cpu_conv_host(algo, p, ops, &pool), ref) <= 1e-4 * std::max(1.0, max_abs(ref)));
    }
  }
}

}  // namespace

TEST_CASE("cpu.direct: a destination over half the L3 is streamed out, every element right",
          "[backends][conv][cpu][direct]") {
  // Planes of 35 x 256 pixels: whole cache lines, not a whole number of work units.
  const auto direct = make_cpu_direct_algorithm();
  check_large_destination(*direct, 256, 2, 91);
}

TEST_CASE("cpu.winograd: a destination over half the L3 is streamed out, every element right",
          "[backends][conv][cpu][winograd]") {
  // Rows of 248 floats: every second row starts a 64-byte line (AVX-512 streams those, plain
  // stores the others), and each row ends in a partial vector (8 of 16 lanes).
  const auto winograd = make_cpu_winograd_algorithm();
  check_large_destination(*winograd, 248, 4, 92);
}
