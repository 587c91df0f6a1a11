// Every CPU algorithm of AlgorithmRegistry::builtin() against the float64 reference, over
// the shared sweep (tests/support/conv_cases.hpp), every direction, float64 and float32.
//
// Tolerances, relative to the largest reference magnitude of the output (max |ref|, at
// least 1): float64 1e-10 and float32 1e-4 for exact-arithmetic algorithms (direct, GEMM,
// reference); 1e-9 / 1e-3 for algorithms that transform the data (tags conv_fft,
// conv_winograd). Outputs start as NaN garbage, inputs must come back bit-identical.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

namespace {

std::vector<const ConvAlgorithm*> cpu_algorithms() {
  std::vector<const ConvAlgorithm*> out;
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->device() == DeviceKind::cpu) out.push_back(a.get());
  return out;
}

bool has_tag(const ConvAlgorithm& a, const std::string& tag) {
  const auto tags = a.tags();
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

double tolerance(const ConvAlgorithm& a, DType dtype) {
  const bool transformed = has_tag(a, "conv_fft") || has_tag(a, "conv_winograd");
  if (dtype == DType::float64) return transformed ? 1e-9 : 1e-10;
  return transformed ? 1e-3 : 1e-4;
}

/// Algorithms that must handle every float32/float64 CPU problem (with no workspace limit).
bool must_apply(const ConvAlgorithm& a) {
  return a.name() == "cpu.corrmm" || a.name() == "cpu.direct" || a.name() == "cpu.reference";
}

/// The directions and dtypes an algorithm claims to support (its factory's comment in
/// include/convgraph/backends/cpu/algorithms.hpp): the sweep must check it on at least one
/// case of each, so an algorithm that declines everything cannot pass. Algorithms not
/// listed claim every direction in float32 and float64.
bool claims(const ConvAlgorithm& a, ConvDirection /*dir: all claim every direction today*/, DType dtype) {
  if (a.name() == "cpu.winograd") return dtype == DType::float32;
  return true;
}

struct Stats {
  long checked = 0;
  long declined = 0;
  double max_err = 0.0;
};

}  // namespace

TEST_CASE("the built-in registry lists the CPU convolutions in priority order", "[backends][conv][cpu]") {
  const auto algos = cpu_algorithms();
  std::vector<std::string> names;
  for (const auto* a : algos) names.push_back(a->name());
  auto pos = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  REQUIRE(pos("cpu.corrmm") < static_cast<long>(names.size()));
  REQUIRE(pos("cpu.direct") < static_cast<long>(names.size()));
  CHECK(pos("cpu.corrmm") < pos("cpu.direct"));
  CHECK(names.back() == "cpu.reference");  // the oracle stays last
  const ConvAlgorithm* ref = AlgorithmRegistry::builtin().find("cpu.reference");
  REQUIRE(ref != nullptr);
  CHECK(ref->tags() == std::vector<std::string>{"conv_reference"});
  CHECK(has_tag(*AlgorithmRegistry::builtin().find("cpu.corrmm"), "conv_gemm"));
  CHECK(has_tag(*AlgorithmRegistry::builtin().find("cpu.direct"), "conv_direct"));
  for (const char* n : {"cpu.corrmm", "cpu.direct"}) {
    CHECK(has_tag(*AlgorithmRegistry::builtin().find(n), "fast_run"));
    CHECK(has_tag(*AlgorithmRegistry::builtin().find(n), "fast_compile"));
  }
}

TEST_CASE("every CPU algorithm matches the reference over the sweep", "[backends][conv][cpu][sweep]") {
  const auto cases = conv_sweep_cases();
  const auto algos = cpu_algorithms();
  // Under the sanitizers (about 30x slower) every 5th case: the
  // full sweep runs in every normal build, and the coverage check below still holds.
  const std::size_t step = convgraph::test::sanitized_build() ? 5 : 1;
  ThreadPool pool(2);
  std::map<std::string, std::map<std::pair<ConvDirection, DType>, Stats>> stats;
  long combos = 0;
  std::uint64_t seed = 1;
  for (std::size_t i = 0; i < cases.size(); i += step) {
    const ConvCase& c = cases[i];
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++);
      const std::vector<double> ref = reference_output(p64, ops);
      const double scale = std::max(1.0, max_abs(ref));
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        for (const ConvAlgorithm* algo : algos) {
          Stats& st = stats[algo->name()][{dir, dtype}];
          const Status ok = algo->applicable(p);
          if (!ok) {
            ++st.declined;
            if (must_apply(*algo)) FAIL(algo->name() << " declined " << p.key() << ": " << ok.reason());
            continue;
          }
          const ConvRun run = run_cpu_conv(*algo, p, ops, &pool);
          const double err = max_abs_diff(run.out, ref) / scale;
          st.max_err = std::max(st.max_err, err);
          ++st.checked;
          ++combos;
          if (!(err <= tolerance(*algo, dtype)) || !run.inputs_intact) {
            FAIL(algo->name() << " on " << c.name << " " << p.key() << ": relative error " << err
                              << " (tolerance " << tolerance(*algo, dtype) << ")"
                              << (run.inputs_intact ? "" : ", and it modified an input"));
          }
        }
      }
    }
  }
  std::printf("CPU conv sweep: %zu cases, %ld (case, dtype, algorithm, direction) runs checked\n",
              cases.size(), combos);
  for (const auto& [name, per_case] : stats)
    for (const auto& [key, st] : per_case)
      std::printf("  %-16s %-10s %-7s checked %5ld declined %5ld  max rel err %.3g\n", name.c_str(),
                  std::string(direction_name(key.first)).c_str(), std::string(dtype_name(key.second)).c_str(),
                  st.checked, st.declined, st.max_err);
  // Every algorithm is exercised where it claims to work: a regression that makes one
  // decline (or a sweep that stops reaching it) fails here instead of passing vacuously.
  for (const ConvAlgorithm* algo : algos)
    for (ConvDirection dir : kAllDirections)
      for (DType dtype : {DType::float64, DType::float32}) {
        if (!claims(*algo, dir, dtype)) continue;
        INFO(algo->name() << " " << direction_name(dir) << " " << dtype_name(dtype)
                          << ": no case of the sweep was checked (all declined)");
        CHECK(stats[algo->name()][{dir, dtype}].checked > 0);
      }
}

TEST_CASE("exact arithmetic algorithms agree bit for bit on integer data", "[backends][conv][cpu][sweep]") {
  // Small integers keep every partial sum exact in float32 and float64, so the order of
  // summation cannot matter: any difference is a bug, not rounding.
  const auto cases = conv_sweep_cases();
  ThreadPool pool(2);
  long checked = 0;
  std::uint64_t seed = 7;
  // Every 3rd case; every 6th under the sanitizers (from the 2nd: other cases than above).
  const bool sanitized = convgraph::test::sanitized_build();
  for (std::size_t i = sanitized ? 1 : 0; i < cases.size(); i += sanitized ? 6 : 3) {
    const ConvCase& c = cases[i];
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++, /*integers=*/true);
      const std::vector<double> ref = reference_output(p64, ops);
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        for (const char* name : {"cpu.corrmm", "cpu.direct", "cpu.reference"}) {
          const ConvAlgorithm* algo = AlgorithmRegistry::builtin().find(name);
          REQUIRE(algo != nullptr);
          const ConvRun run = run_cpu_conv(*algo, p, ops, &pool);
          if (max_abs_diff(run.out, ref) != 0.0)
            FAIL(name << " is not exact on " << c.name << " " << p.key() << ": max error "
                      << max_abs_diff(run.out, ref));
          ++checked;
        }
      }
    }
  }
  std::printf("CPU conv integer sweep: %ld exact runs\n", checked);
  CHECK(checked > 0);
}

TEST_CASE("direct accumulating in float64 for float32 storage matches the reference", "[backends][conv][cpu]") {
  const ConvAlgorithm* direct = AlgorithmRegistry::builtin().find("cpu.direct");
  REQUIRE(direct != nullptr);
  ThreadPool pool(2);
  const auto cases = conv_chunking_cases();
  for (const ConvCase& c : cases)
    for (ConvDirection dir : kAllDirections) {
      ConvProblem p = c.problem(dir, DType::float32);
      p.compute = DType::float64;
      REQUIRE(direct->applicable(p));
      const ConvOperands ops = make_operands(p, 99);
      const auto ref = reference_output(p, ops);
      const ConvRun run = run_cpu_conv(*direct, p, ops, &pool);
      // Only the final rounding to float32 remains.
      CHECK(max_abs_diff(run.out, ref) / std::max(1.0, max_abs(ref)) < 1e-6);
    }
}

TEST_CASE("algorithms give the same answer without a thread pool", "[backends][conv][cpu]") {
  const auto cases = conv_chunking_cases();
  ThreadPool pool(2);
  for (const ConvCase& c : cases)
    for (ConvDirection dir : kAllDirections)
      for (const char* name : {"cpu.corrmm", "cpu.direct"}) {
        const ConvAlgorithm* algo = AlgorithmRegistry::builtin().find(name);
        const ConvProblem p = c.problem(dir, DType::float64);
        const ConvOperands ops = make_operands(p, 5);
        const ConvRun serial = run_cpu_conv(*algo, p, ops, nullptr);
        const ConvRun threaded = run_cpu_conv(*algo, p, ops, &pool);
        INFO(name << " " << p.key());
        // Tasks never share an output element, so threading cannot change a single bit.
        CHECK(max_abs_diff(serial.out, threaded.out) == 0.0);
      }
}
