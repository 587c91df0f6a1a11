// The per-level CPU kernels (backends/cpu/kernels/, compiled once per level): every level
// this CPU supports runs the shared sweep against the float64 reference, and the level
// selection itself (names, CONVGRAPH_CPU_ISA's values, refusing levels the CPU lacks).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <string>

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

namespace {

// The algorithms whose kernels exist per level (cpu.reference and cpu.conv3d2d delegate).
const char* const kPerLevel[] = {"cpu.corrmm", "cpu.direct", "cpu.depthwise", "cpu.winograd", "cpu.fft"};

double tolerance(const std::string& name, DType dtype) {
  const bool transformed = name == "cpu.fft" || name == "cpu.winograd";
  if (dtype == DType::float64) return transformed ? 1e-9 : 1e-10;
  return transformed ? 1e-3 : 1e-4;
}

}  // namespace

TEST_CASE("CPU levels: names, parsing and what this CPU supports", "[backends][cpu][isa]") {
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    REQUIRE(parse_cpu_isa(cpu_isa_name(isa)) == isa);
    CHECK(cpu_isa_supported(isa) == (cpu_isa_compiled(isa) && isa <= detected_cpu_isa()));
    if (!cpu_isa_compiled(isa)) CHECK_THROWS_AS(set_active_cpu_isa(isa), ValueError);
  }
  CHECK_FALSE(parse_cpu_isa("sse2").has_value());
  CHECK_FALSE(parse_cpu_isa("AVX2").has_value());
  CHECK(cpu_isa_supported(active_cpu_isa()));
  // A portable build has every level; a HOST-levels build (CONVGRAPH_NATIVE) the host's.
  CHECK((cpu_isa_compiled(CpuIsa::baseline) || cpu_isa_compiled(detected_cpu_isa())));
  CHECK(active_cpu_isa() <= detected_cpu_isa());
  std::printf("CPU levels: detected %s, active %s\n", cpu_isa_name(detected_cpu_isa()),
              cpu_isa_name(active_cpu_isa()));
  if (detected_cpu_isa() != CpuIsa::avx512)
    CHECK_THROWS_AS(set_active_cpu_isa(CpuIsa::avx512), ValueError);
  const CpuIsa before = active_cpu_isa();
  if (cpu_isa_compiled(CpuIsa::baseline)) {
    ScopedCpuIsa scope(CpuIsa::baseline);
    CHECK(active_cpu_isa() == CpuIsa::baseline);
  }
  CHECK(active_cpu_isa() == before);
}

TEST_CASE("CPU gathers: off under the Gather Data Sampling microcode, set per scope", "[backends][cpu][isa]") {
  // The kernel's status lines (Documentation/admin-guide/hw-vuln/gather_data_sampling.rst).
  CHECK_FALSE(gathers_fast_under_gds_status("Mitigation: Microcode"));
  CHECK_FALSE(gathers_fast_under_gds_status("Mitigation: Microcode (locked)"));
  CHECK_FALSE(gathers_fast_under_gds_status("Unknown: Dependent on hypervisor status"));
  CHECK(gathers_fast_under_gds_status("Not affected"));
  CHECK(gathers_fast_under_gds_status("Vulnerable"));
  CHECK(gathers_fast_under_gds_status("Vulnerable: No microcode"));
  CHECK(gathers_fast_under_gds_status("Mitigation: AVX disabled, no microcode"));
  CHECK(gathers_fast_under_gds_status(""));
  const bool before = cpu_gathers_fast();
  for (bool fast : {false, true}) {
    ScopedCpuGathers scope(fast);
    CHECK(cpu_gathers_fast() == fast);
  }
  CHECK(cpu_gathers_fast() == before);
  std::printf("CPU gathers: %s\n", before ? "used" : "not used");
}

TEST_CASE("CPU levels: every supported level matches the reference over the sweep",
          "[backends][conv][cpu][sweep][isa]") {
  const auto cases = conv_sweep_cases();
  // Under the sanitizers (about 30x slower) every 5th case per level: the full sweep runs
  // there at the active level ("every CPU algorithm matches the reference over the sweep")
  // and here in every normal build; the coverage check below still holds per level.
  const std::size_t step = convgraph::test::sanitized_build() ? 5 : 1;
  ThreadPool pool(2);
  for (CpuIsa isa : runnable_cpu_levels()) {
    ScopedCpuIsa scope(isa);
    INFO("level " << cpu_isa_name(isa));
    std::map<std::string, std::map<std::pair<int, DType>, long>> checked;
    std::uint64_t seed = 11;
    for (std::size_t i = 0; i < cases.size(); i += step) {
      const ConvCase& c = cases[i];
      for (ConvDirection dir : kAllDirections) {
        const ConvProblem p64 = c.problem(dir, DType::float64);
        const ConvOperands ops = make_operands(p64, seed++);
        const std::vector<double> ref = reference_output(p64, ops);
        const double scale = std::max(1.0, max_abs(ref));
        for (DType dtype : {DType::float64, DType::float32}) {
          const ConvProblem p = c.problem(dir, dtype);
          for (const char* name : kPerLevel) {
            const ConvAlgorithm* algo = AlgorithmRegistry::builtin().find(name);
            REQUIRE(algo != nullptr);
            if (!algo->applicable(p)) continue;
            const ConvRun run = run_cpu_conv(*algo, p, ops, &pool);
            const double err = max_abs_diff(run.out, ref) / scale;
            if (!(err <= tolerance(name, dtype)) || !run.inputs_intact)
              FAIL(name << " at level " << cpu_isa_name(isa) << " on " << c.name << " " << p.key()
                        << ": relative error " << err << (run.inputs_intact ? "" : ", input modified"));
            ++checked[name][{static_cast<int>(dir), dtype}];
          }
        }
      }
    }
    // Each per-level algorithm ran at this level in every direction and dtype it claims.
    for (const char* name : kPerLevel)
      for (ConvDirection dir : kAllDirections)
        for (DType dtype : {DType::float64, DType::float32}) {
          const std::string n = name;
          if (n == "cpu.winograd" && dtype != DType::float32) continue;  // float32 only, every direction
          INFO(n << " " << direction_name(dir) << " " << dtype_name(dtype));
          CHECK(checked[n][{static_cast<int>(dir), dtype}] > 0);
        }
    std::printf("CPU level %s: sweep of %zu cases checked\n", cpu_isa_name(isa), (cases.size() + step - 1) / step);
  }
}

TEST_CASE("CPU levels: exact algorithms give identical integer results at every level",
          "[backends][conv][cpu][isa]") {
  // Small integers keep every partial sum exact, so any difference between levels is a bug.
  const auto cases = conv_sweep_cases();
  ThreadPool pool(2);
  long compared = 0;
  // Every 5th case; every 10th under the sanitizers (about 30x slower).
  const std::size_t step = convgraph::test::sanitized_build() ? 10 : 5;
  for (std::size_t i = 0; i < cases.size(); i += step)
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p = cases[i].problem(dir, DType::float32);
      const ConvOperands ops = make_operands(p, 1000 + i, /*integers=*/true);
      for (const char* name : {"cpu.corrmm", "cpu.direct", "cpu.depthwise"}) {
        const ConvAlgorithm* algo = AlgorithmRegistry::builtin().find(name);
        if (!algo->applicable(p)) continue;
        std::vector<double> first;
        for (CpuIsa isa : runnable_cpu_levels()) {
          ScopedCpuIsa scope(isa);
          const ConvRun run = run_cpu_conv(*algo, p, ops, &pool);
          if (first.empty()) first = run.out;
          else if (max_abs_diff(first, run.out) != 0.0)
            FAIL(name << " at " << cpu_isa_name(isa) << " differs from baseline on " << p.key());
          ++compared;
        }
      }
    }
  CHECK(compared > 0);
}

TEST_CASE("CPU levels: a small sweep at the active level", "[backends][conv][cpu][isa-small]") {
  // Every 16th sweep case at whatever level is active: what the `isa` ctest runs under
  // qemu-user as older CPUs (Haswell: avx2, Nehalem: baseline), where the full sweep is slow.
  const auto cases = conv_sweep_cases();
  ThreadPool pool(2);
  long checked = 0;
  std::uint64_t seed = 5;
  for (std::size_t i = 0; i < cases.size(); i += 16)
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = cases[i].problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++);
      const std::vector<double> ref = reference_output(p64, ops);
      const double scale = std::max(1.0, max_abs(ref));
      const ConvProblem p = cases[i].problem(dir, DType::float32);
      for (const char* name : kPerLevel) {
        const ConvAlgorithm* algo = AlgorithmRegistry::builtin().find(name);
        if (!algo->applicable(p)) continue;
        const double err = max_abs_diff(run_cpu_conv(*algo, p, ops, &pool).out, ref) / scale;
        if (!(err <= tolerance(name, DType::float32)))
          FAIL(name << " at level " << cpu_isa_name(active_cpu_isa()) << " on " << p.key() << ": error " << err);
        ++checked;
      }
    }
  std::printf("CPU level %s: small sweep, %ld runs checked\n", cpu_isa_name(active_cpu_isa()), checked);
  CHECK(checked > 0);
}
