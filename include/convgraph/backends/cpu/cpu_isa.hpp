#pragma once
/// The CPU instruction-set level the hot kernels run at.
///
/// Every hot CPU kernel (SGEMM micro-kernels, im2col/col2im, direct, depthwise, Winograd,
/// FFT) is compiled once per level and the variant is chosen at run time from CPUID, so a
/// library built anywhere runs on any x86-64 CPU. The level in use is the best one the CPU
/// supports, lowered by the environment variable CONVGRAPH_CPU_ISA=baseline|avx2|avx512
/// (read once; a level above what the CPU supports, or an unknown name, is refused with a
/// warning on stderr and ignored).
#include <optional>
#include <string_view>

namespace convgraph {

enum class CpuIsa : int {
  baseline = 0,  ///< x86-64-v2: SSE4.2, POPCNT
  avx2 = 1,      ///< x86-64-v3: AVX2, FMA, BMI1/2, F16C
  avx512 = 2,    ///< x86-64-v4: AVX-512 F/BW/CD/DQ/VL
};

/// "baseline", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);
/// The level named `name`, or nothing.
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);
/// The best level this CPU supports (CPUID, ignoring CONVGRAPH_CPU_ISA).
CpuIsa detected_cpu_isa();
/// Whether this build has kernels of `isa`: every level, unless it was configured with
/// CONVGRAPH_CPU_LEVELS=HOST (the default of CONVGRAPH_NATIVE builds), which compiles only
/// the build host's best level.
bool cpu_isa_compiled(CpuIsa isa);
/// Whether this build has kernels of `isa` and this CPU can run them.
bool cpu_isa_supported(CpuIsa isa);
/// The level the kernels use now.
CpuIsa active_cpu_isa();
/// Floats in one vector register at `isa`: 16, 8 or 4 (the unit channel-vectorised
/// kernels pad channel counts to, which the cost model charges for).
constexpr int cpu_isa_float_lanes(CpuIsa isa) {
  return isa == CpuIsa::avx512 ? 16 : isa == CpuIsa::avx2 ? 8 : 4;
}
/// Lowers (or raises, up to detected_cpu_isa()) the level for every kernel from now on;
/// throws ValueError if the CPU cannot run it. Meant for tests and benchmarks.
void set_active_cpu_isa(CpuIsa isa);

/// Whether vector gathers run at full speed on this CPU. Not where the kernel reports the
/// Gather Data Sampling mitigation in microcode (Intel Skylake to Tiger Lake), which makes
/// every gather several times slower: there the kernels with a gather-free path (Winograd's
/// filter transform and narrow-image taps) take it. Read once from
/// /sys/devices/system/cpu/vulnerabilities/gather_data_sampling; CONVGRAPH_CPU_GATHERS=0|1
/// overrides.
bool cpu_gathers_fast();
/// What a gather_data_sampling status line means for gathers: false for "Mitigation:
/// Microcode..." and for a guest's "Unknown: Dependent on hypervisor status" (the host's
/// microcode mitigates), true otherwise ("Not affected", "Vulnerable...", no file).
bool gathers_fast_under_gds_status(std::string_view status);
/// Turns the gather paths on or off for every kernel from now on (tests, benchmarks).
void set_cpu_gathers_fast(bool fast);

/// Sets the active level for a scope and restores the previous one (tests, benchmarks).
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa) : saved_(active_cpu_isa()) { set_active_cpu_isa(isa); }
  ~ScopedCpuIsa() { set_active_cpu_isa(saved_); }
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  CpuIsa saved_;
};

/// Sets whether the kernels use gathers for a scope and restores the previous setting.
class ScopedCpuGathers {
 public:
  explicit ScopedCpuGathers(bool fast) : saved_(cpu_gathers_fast()) { set_cpu_gathers_fast(fast); }
  ~ScopedCpuGathers() { set_cpu_gathers_fast(saved_); }
  ScopedCpuGathers(const ScopedCpuGathers&) = delete;
  ScopedCpuGathers& operator=(const ScopedCpuGathers&) = delete;

 private:
  bool saved_;
};

}  // namespace convgraph
