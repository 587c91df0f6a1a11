// The cost model's machine measurement and the shared GEMM efficiency curve
// (convgraph/backends/conv_cost.hpp). The estimates themselves live with each algorithm.
#include "convgraph/backends/conv_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/sgemm.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/tensor.hpp"
#include "convgraph/core/thread_pool.hpp"

namespace convgraph {

namespace {

using Clock = std::chrono::steady_clock;

/// Best of 3 timings of fn, each repeated until it has run for at least 10 ms; seconds per call.
template <class F>
double best_seconds(F&& fn) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    int calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.01);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

MachineModel measure() {
  MachineModel m;
  // An SGEMM whose operands stay in cache: the kernel's sustained rate on one thread.
  const std::int64_t M = 96, N = 256, K = 256;
  std::vector<float> a(static_cast<std::size_t>(M * K), 0.5f), b(static_cast<std::size_t>(K * N), 0.25f),
      c(static_cast<std::size_t>(M * N));
  const double gemm_s = best_seconds([&] {
    cpu::sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N, nullptr);
  });
  m.gflops_per_thread = 2.0 * M * N * K / gemm_s * 1e-9;
  // A copy far larger than the caches: what streaming passes (im2col, transforms) get, on
  // memory from the allocator the operands come from.
  const std::size_t bytes = std::size_t{32} << 20;
  const auto src = allocate_host(bytes), dst = allocate_host(bytes);
  std::memset(src->data, 1, bytes);
  std::memset(dst->data, 0, bytes);
  const double copy_s = best_seconds([&] { std::memcpy(dst->data, src->data, bytes); });
  m.bandwidth_gbs = 2.0 * static_cast<double>(bytes) / copy_s * 1e-9;
  return m;
}

/// CONVGRAPH_MACHINE="gflops=G,bandwidth=B", or nothing.
bool from_environment(MachineModel& m) {
  const char* env = std::getenv("CONVGRAPH_MACHINE");
  if (!env || !*env) return false;
  const std::string text = env;
  bool gflops = false, bandwidth = false;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    double value = 0;
    char* stop = nullptr;
    if (eq != std::string::npos) value = std::strtod(item.c_str() + eq + 1, &stop);
    const bool number = eq != std::string::npos && stop && *stop == '\0' && stop != item.c_str() + eq + 1;
    if (!number || !(value > 0) || (key != "gflops" && key != "bandwidth"))
      throw ValueError(msg("CONVGRAPH_MACHINE: '", item, "' in \"", text,
                           "\" is not gflops=G or bandwidth=B with a positive number"));
    (key == "gflops" ? m.gflops_per_thread : m.bandwidth_gbs) = value;
    (key == "gflops" ? gflops : bandwidth) = true;
    pos = end + 1;
  }
  if (!gflops || !bandwidth)
    throw ValueError(msg("CONVGRAPH_MACHINE=\"", text, "\" needs both gflops=G and bandwidth=B"));
  return true;
}

}  // namespace

MachineModel measured_machine(int threads) {
  static std::once_flag once;
  static MachineModel machine;
  static std::string env_error;
  std::call_once(once, [] {
    try {
      if (!from_environment(machine)) machine = measure();
    } catch (const Error& e) {
      env_error = e.what();
    }
  });
  if (!env_error.empty()) throw ValueError(env_error);
  MachineModel m = machine;
  m.threads = threads > 0 ? threads : configured_thread_count();
  return m;
}

double gemm_efficiency(std::int64_t M, std::int64_t N, std::int64_t K) {
  // Each dimension saturates: x / (x + h), h about where half the micro-kernel's tile or
  // packing cost is wasted. Fitted to cpu.corrmm's times on the standard layers.
  const auto sat = [](std::int64_t x, double h) { return static_cast<double>(x) / (static_cast<double>(x) + h); };
  return 0.8 * sat(M, 8) * sat(N, 32) * sat(K, 16);
}

double operand_bytes(const ConvProblem& p) {
  return static_cast<double>(p.x_numel() + p.w_numel() + p.y_numel()) * static_cast<double>(dtype_size(p.dtype));
}

}  // namespace convgraph
