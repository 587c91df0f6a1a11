// Every CPU convolution algorithm against the float64 reference on seeded random
// geometries, beside the chosen sweeps (support/conv_cases.hpp) and each algorithm's own
// cases: shapes nobody picked, at every ISA level.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

TEST_CASE("cpu algorithms: seeded random shapes match the reference at every level", "[backends][conv][cpu]") {
  // 1-3 axes of 1-200 positions (often 1-3), kernels of 1-4 taps, strides up to 4 (often
  // past the kernel or the input), dilation, asymmetric padding, flip, 1-8 groups of 1-80
  // channels, float32 and float64, every direction. Written after cpu.direct's strided
  // grad inputs crashed on rows narrower than the stride and cpu.winograd refused a
  // dilated layer whose every phase was empty; with 4000 problems a seed, 30 seeds passed
  // (this runs 200).
  const std::vector<std::shared_ptr<const ConvAlgorithm>> algorithms = {
      make_cpu_corrmm_algorithm(), make_cpu_direct_algorithm(), make_cpu_winograd_algorithm(),
      make_cpu_fft_algorithm(),    make_cpu_depthwise_algorithm(), make_cpu_conv3d2d_algorithm()};
  const std::vector<CpuIsa> levels =
      convgraph::test::sanitized_build() ? std::vector<CpuIsa>{active_cpu_isa()} : runnable_cpu_levels();
  ThreadPool pool(2);
  std::uint64_t state = 4242;
  const auto draw = [&](std::int64_t lo, std::int64_t hi) {  // uniform in [lo, hi]
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<std::int64_t>((state >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const int wanted = convgraph::test::sanitized_build() ? 40 : 200;
  int checked = 0;
  for (int attempt = 0; checked < wanted && attempt < 20 * wanted; ++attempt) {
    const std::int64_t nd = draw(1, 3), groups = draw(1, 4) == 1 ? draw(1, 8) : 1;
    const std::int64_t cg = draw(1, 3) == 1 ? draw(21, 80) : draw(1, 20);
    const std::int64_t kg = draw(1, 3) == 1 ? draw(21, 80) : draw(1, 20);
    std::vector<std::int64_t> x{draw(1, 3), groups * cg}, w{groups * kg, cg}, stride, dilation;
    std::vector<std::pair<std::int64_t, std::int64_t>> pads;
    for (std::int64_t a = 0; a < nd; ++a) {
      x.push_back(draw(1, 3) == 1 ? draw(1, 3) : draw(1, nd == 3 ? 8 : nd == 2 ? 30 : 200));
      w.push_back(draw(1, 4));
      stride.push_back(draw(1, 3) == 1 ? draw(2, 4) : 1);
      dilation.push_back(draw(1, 4) == 1 ? 2 : 1);
      pads.emplace_back(draw(0, w.back()), draw(0, w.back()));
    }
    const bool flip = draw(0, 1) == 1;
    ConvCase c;
    try {
      c = make_conv_case("random", x, w, pads, stride, dilation, flip, groups);
      (void)c.problem(ConvDirection::forward);
    } catch (const Error&) {
      continue;  // no output position
    }
    const ConvDirection dir = kAllDirections[static_cast<std::size_t>(draw(0, 2))];
    const ConvProblem p64 = c.problem(dir, DType::float64);
    if (p64.flops() > 4e6) continue;
    const ConvOperands ops = make_operands(p64, state);
    const std::vector<double> ref = reference_output(p64, ops);
    const double scale = std::max(1.0, max_abs(ref));
    const bool f64 = draw(1, 4) == 1;
    const ConvProblem p = c.problem(dir, f64 ? DType::float64 : DType::float32);
    INFO(p.key());
    // cpu.corrmm and cpu.direct (the first two) take every problem: both check every one.
    CHECK(algorithms[0]->applicable(p).is_ok());
    CHECK(algorithms[1]->applicable(p).is_ok());
    for (const auto& algo : algorithms) {
      if (!algo->applicable(p)) continue;
      for (CpuIsa isa : levels) {
        ScopedCpuIsa scope(isa);
        INFO(algo->name() << " at level " << cpu_isa_name(isa));
        const ConvRun run = run_cpu_conv(*algo, p, ops, &pool);
        CHECK(run.inputs_intact);
        CHECK(max_abs_diff(run.out, ref) / scale <= (f64 ? 1e-9 : 1e-4));
      }
    }
    ++checked;
  }
  CHECK(checked == wanted);
}
