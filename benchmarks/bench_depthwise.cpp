// bench_depthwise: cpu.depthwise against cpu.corrmm and cpu.direct on the standard set's
// depthwise layer (depthwise_3x3: N=8, C=K=256, groups=256, 28x28, 3x3, stride 1, pad 1),
// float32, every direction, the algorithms interleaved in one process, medians in ms.
// Built as bench_depthwise by benchmarks/CMakeLists.txt; not a test.
// Usage: bench_depthwise [threads=2] [repeats=30] [only: time cpu.depthwise alone] [--version]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/bench_cli.hpp"
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "benchmarks/host_floats.hpp"
#include "convgraph/core/thread_pool.hpp"

using namespace convgraph;

namespace {

using bench::HostFloats;

HostFloats make_buffer(std::size_t n, std::mt19937& rng) {
  HostFloats b(n);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : b) v = u(rng);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 30;
  std::string only;
  CLI::App app{"bench_depthwise: cpu.depthwise against cpu.corrmm and cpu.direct on depthwise_3x3, every "
               "direction, medians in ms.",
               "bench_depthwise"};
  convgraph::bench::setup_cli(app);
  app.add_option("threads", threads, "threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("repeats", repeats, "timed runs per algorithm")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("only", only, "'only': time cpu.depthwise alone (for profiling)")->check(CLI::IsMember({"only"}));
  if (const int status = convgraph::bench::parse_cli(app, argc, argv); status >= 0) return status;
  const bool only_depthwise = only == "only";
  ThreadPool pool(threads);
  ConvParams params;
  params.ndim = 2;
  params.border = 1;
  params.groups = 256;
  params.filter_flip = false;
  const std::vector<std::int64_t> x_shape{8, 256, 28, 28}, w_shape{256, 1, 3, 3};
  const char* names[] = {"cpu.depthwise", "cpu.corrmm", "cpu.direct"};
  std::printf("depthwise_3x3 float32, %d threads, median of %d (ms)\n", threads, repeats);
  std::printf("%-12s %14s %14s %14s %14s\n", "direction", names[0], names[1], names[2], "copy x->y");
  for (ConvDirection dir : {ConvDirection::forward, ConvDirection::grad_inputs, ConvDirection::grad_weights}) {
    const ConvProblem p = ConvProblem::make(dir, params, x_shape, w_shape, DType::float32, "bench");
    std::mt19937 rng(42);
    HostFloats x = make_buffer(static_cast<std::size_t>(p.x_numel()), rng);
    HostFloats w = make_buffer(static_cast<std::size_t>(p.w_numel()), rng);
    HostFloats y = make_buffer(static_cast<std::size_t>(p.y_numel()), rng);
    const ConvTensors t{x.data(), w.data(), y.data(), {}};
    std::vector<const ConvAlgorithm*> algos;
    std::vector<HostFloats> workspaces;
    std::vector<ConvContext> ctxs;
    for (const char* n : names) {
      const ConvAlgorithm* a = AlgorithmRegistry::builtin().find(n);
      if (a == nullptr || !a->applicable(p)) {
        std::fprintf(stderr, "%s missing or not applicable\n", n);
        return 1;
      }
      algos.push_back(a);
      const std::size_t ws = a->workspace_bytes(p);
      workspaces.push_back(make_buffer(ws / sizeof(float) + 1, rng));
      ctxs.push_back(ConvContext{&pool, workspaces.back().data(), ws, nullptr});
    }
    // The memory floor: a threaded copy of x into y (same bytes as forward reads and writes).
    HostFloats y2 = make_buffer(static_cast<std::size_t>(p.y_numel()), rng);
    const std::int64_t chunk = 4096, nchunks = (p.x_numel() + chunk - 1) / chunk;
    auto copy = [&] {
      pool.parallel_for(nchunks, [&](std::int64_t b, std::int64_t e) {
        const std::int64_t lo = b * chunk, hi = std::min(e * chunk, p.x_numel());
        std::copy(x.data() + lo, x.data() + hi, y2.data() + lo);
      });
    };
    std::vector<std::vector<double>> ms(algos.size() + 1);
    for (int r = -2; r < repeats; ++r)  // two warm-up rounds
      for (std::size_t i = 0; i <= algos.size(); ++i) {
        if (only_depthwise && i > 0) {
          ms[i].push_back(0.0);
          continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        if (i < algos.size()) algos[i]->run(p, t, ctxs[i]);
        else copy();
        const auto t1 = std::chrono::steady_clock::now();
        if (r >= 0) ms[i].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    std::printf("%-12s", std::string(direction_name(dir)).c_str());
    for (auto& v : ms) {
      std::sort(v.begin(), v.end());
      std::printf(" %14.3f", v[v.size() / 2]);
    }
    std::printf("\n");
  }
  return 0;
}
