#pragma once
/// The convolution cost model: what fast_run uses to choose among the applicable
/// algorithms without timing them (the meta-optimizer times them instead). Each algorithm
/// estimates its own time (ConvAlgorithm::estimated_seconds) from the problem's
/// arithmetic, the extra traffic of its transforms or packing, and the efficiency its
/// kernels typically reach, on a MachineModel measured once per process.
#include <cstdint>

#include "convgraph/conv/conv_problem.hpp"

namespace convgraph {

/// What the estimates need to know of the machine.
struct MachineModel {
  double gflops_per_thread = 50;  ///< sustained float32 FMA GFLOP/s of the SGEMM kernel, 1 thread
  double bandwidth_gbs = 10;      ///< memory copy bandwidth, GB/s (read + write), all threads
  int threads = 1;                ///< threads a convolution runs on

  /// Float32 arithmetic throughput with all threads, FLOP/s (halved for float64).
  double flops_per_s(bool float64 = false) const {
    return gflops_per_thread * 1e9 * threads * (float64 ? 0.5 : 1.0);
  }
  double bytes_per_s() const { return bandwidth_gbs * 1e9; }
};

/// This machine, measured on first use (about 50 ms: an in-cache SGEMM on one thread and a
/// 64 MiB copy), with `threads` threads (0: the hardware's).
/// CONVGRAPH_MACHINE="gflops=G,bandwidth=B" replaces the measurement (reproducible
/// choices, e.g. in tests); ValueError naming the variable when it does not parse.
MachineModel measured_machine(int threads = 0);

/// The fraction of peak a blocked GEMM of M x N x K reaches: high for large dimensions,
/// falling as any of them gets small (packing and edge tiles are then not amortised).
double gemm_efficiency(std::int64_t M, std::int64_t N, std::int64_t K);

/// Bytes of x, w and y in the problem's dtype: every algorithm reads two and writes one.
double operand_bytes(const ConvProblem& p);

/// Whether the problem computes in float64 (half the float32 arithmetic rate).
inline bool computes_in_float64(const ConvProblem& p) {
  return p.dtype == DType::float64 || p.compute == DType::float64;
}

/// What any call costs besides its work (dispatch, waking the thread pool), in seconds.
inline constexpr double kConvCallSeconds = 5e-6;

}  // namespace convgraph
