// Run-time choice of the CPU kernel level: CPUID once, lowered by CONVGRAPH_CPU_ISA.
#include "convgraph/backends/cpu/cpu_isa.hpp"

#include <cpuid.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "convgraph/core/error.hpp"

namespace convgraph {
namespace {

// Features the kernels' target strings use that __builtin_cpu_supports cannot name in
// every compiler (clang 14 knows no "f16c"): read straight from CPUID.
bool cpuid_has_avx2_extras() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool f16c = (c >> 29) & 1u, movbe = (c >> 22) & 1u;
  if (!__get_cpuid(0x80000001u, &a, &b, &c, &d)) return false;
  const bool lzcnt = (c >> 5) & 1u;
  return f16c && movbe && lzcnt;
}

bool cpu_has(CpuIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::avx512:
#if defined(CONVGRAPH_EMULATE_AVX512)  // a test build whose AVX-512 level runs on AVX2
      return cpu_has(CpuIsa::avx2);
#else
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && cpu_has(CpuIsa::avx2);
#endif
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
             cpuid_has_avx2_extras() && cpu_has(CpuIsa::baseline);
    case CpuIsa::baseline:
      return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt");
  }
  return false;
}

CpuIsa initial_isa() {
  CpuIsa isa = detected_cpu_isa();
#if defined(CONVGRAPH_ISA_ONLY_LEVEL)
  // A build with one level's kernels runs them: it is meant for the CPU it was built on.
  isa = static_cast<CpuIsa>(CONVGRAPH_ISA_ONLY_LEVEL);
  if (isa > detected_cpu_isa())
    std::fprintf(stderr, "convgraph: this library has only %s kernels (CONVGRAPH_CPU_LEVELS=HOST) "
                 "and this CPU supports up to %s: expect illegal instructions\n",
                 cpu_isa_name(isa), cpu_isa_name(detected_cpu_isa()));
#endif
  if (const char* env = std::getenv("CONVGRAPH_CPU_ISA"); env != nullptr && *env != '\0') {
    const auto want = parse_cpu_isa(env);
    if (!want)
      std::fprintf(stderr,
                   "convgraph: ignoring CONVGRAPH_CPU_ISA=%s (valid: baseline, avx2, avx512); "
                   "using %s\n", env, cpu_isa_name(isa));
    else if (!cpu_isa_compiled(*want))
      std::fprintf(stderr, "convgraph: ignoring CONVGRAPH_CPU_ISA=%s: this build has only %s kernels\n",
                   env, cpu_isa_name(isa));
    else if (*want > isa)
      std::fprintf(stderr, "convgraph: ignoring CONVGRAPH_CPU_ISA=%s: this CPU supports up to %s\n",
                   env, cpu_isa_name(isa));
    else
      isa = *want;
  }
  return isa;
}

std::atomic<int>& active_level() {
  static std::atomic<int> level{static_cast<int>(initial_isa())};
  return level;
}

bool initial_gathers_fast() {
  if (const char* env = std::getenv("CONVGRAPH_CPU_GATHERS"); env != nullptr && *env != '\0') {
    const std::string_view want(env);
    if (want == "0" || want == "1") return want == "1";
    std::fprintf(stderr, "convgraph: ignoring CONVGRAPH_CPU_GATHERS=%s (valid: 0, 1)\n", env);
  }
  std::ifstream file("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling");
  std::string status;
  if (!file || !std::getline(file, status)) return true;
  return gathers_fast_under_gds_status(status);
}

std::atomic<bool>& gathers_fast() {
  static std::atomic<bool> fast{initial_gathers_fast()};
  return fast;
}

}  // namespace

bool gathers_fast_under_gds_status(std::string_view status) {
  return !status.starts_with("Mitigation: Microcode") && !status.starts_with("Unknown");
}

bool cpu_gathers_fast() { return gathers_fast().load(std::memory_order_relaxed); }

void set_cpu_gathers_fast(bool fast) { gathers_fast().store(fast, std::memory_order_relaxed); }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return "baseline";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512})
    if (name == cpu_isa_name(isa)) return isa;
  return std::nullopt;
}

CpuIsa detected_cpu_isa() {
  static const CpuIsa best = cpu_has(CpuIsa::avx512) ? CpuIsa::avx512
                             : cpu_has(CpuIsa::avx2) ? CpuIsa::avx2
                                                     : CpuIsa::baseline;
  return best;
}

bool cpu_isa_compiled(CpuIsa isa) {
#if defined(CONVGRAPH_ISA_ONLY_LEVEL)
  return static_cast<int>(isa) == CONVGRAPH_ISA_ONLY_LEVEL;
#else
  return true;
#endif
}

bool cpu_isa_supported(CpuIsa isa) { return cpu_isa_compiled(isa) && isa <= detected_cpu_isa(); }

CpuIsa active_cpu_isa() { return static_cast<CpuIsa>(active_level().load(std::memory_order_relaxed)); }

void set_active_cpu_isa(CpuIsa isa) {
  if (!cpu_isa_compiled(isa))
    throw ValueError(msg("set_active_cpu_isa: isa=", cpu_isa_name(isa), " has no kernels in this build (",
                         cpu_isa_name(active_cpu_isa()), " only: CONVGRAPH_CPU_LEVELS=HOST)"));
  if (!cpu_isa_supported(isa))
    throw ValueError(msg("set_active_cpu_isa: isa=", cpu_isa_name(isa),
                         " is not supported by this CPU (best: ", cpu_isa_name(detected_cpu_isa()), ")"));
  active_level().store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace convgraph
