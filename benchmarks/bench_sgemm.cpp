// bench_sgemm: convgraph's sgemm against Eigen (and oneDNN's dnnl_sgemm and OpenBLAS's
// cblas_sgemm when built with them) on the GEMM shapes that im2col turns the standard conv
// layers into ("--filter layer": every layer of benchmarks/layers.txt, each direction).
//
//   bench_sgemm [--threads 1,2] [--samples N] [--filter substring] [--isa avx512|avx2|baseline] [--no-eigen] [--best]
//               [--wall] [--cpu] [--shape MxNxK[:ta|:tb|:tatb]]... [--version]     (--opt=value works too)
//
// Prints an FMA peak check first (these hosts sometimes run one vCPU at half speed: rerun
// when it reads low), then per shape and thread count the median GFLOP/s of each
// implementation. Implementations are timed interleaved, one sample each in turn, so
// a slow spell hits them alike. One-thread rows are timed in thread CPU time (unless
// --wall): on a machine shared with compilers that keeps them meaningful; multi-thread
// rows are wall time and need a quiet machine (--cpu: process CPU time over the thread count).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <time.h>
#include <unistd.h>

// GCC 12's AVX-512 headers raise false -Wuninitialized warnings (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/sgemm.hpp"
#include "benchmarks/bench_cli.hpp"
#include "benchmarks/host_floats.hpp"
#include "convgraph/core/thread_pool.hpp"

#if CONVGRAPH_HAVE_OPENMP
#include <omp.h>
#endif
#if CONVGRAPH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if CONVGRAPH_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);  // OpenBLAS's own; not in every cblas.h
#endif

namespace {

using convgraph::ThreadPool;
namespace cpu = convgraph::cpu;
using convgraph::CpuIsa;
using convgraph::active_cpu_isa;
using convgraph::cpu_isa_name;
using convgraph::cpu_isa_supported;
using convgraph::detected_cpu_isa;
using convgraph::parse_cpu_isa;
using convgraph::bench::HostFloats;

struct Shape {
  const char* name;
  bool ta, tb;
  std::int64_t M, N, K;
  bool one_thread = false;  ///< a per-task call: the caller already runs one per thread
};

// Forward: C[Kout x HW] = W[Kout x CRS] * col[CRS x HW]; grad-inputs: col = W^T * dY
// (transA); grad-weights: dW = dY * col^T (transB). "xN8" = eight images side by side.
const Shape kShapes[] = {
    {"square_1024", false, false, 1024, 1024, 1024},
    {"resnet_stem fwd", false, false, 64, 12544, 147},
    {"resnet_1x1_56 fwd", false, false, 256, 3136, 64},
    {"resnet_3x3_56 fwd", false, false, 64, 3136, 576},
    {"resnet_3x3_28 fwd", false, false, 128, 784, 1152},
    {"resnet_3x3_28 fwd xN8", false, false, 128, 6272, 1152},
    {"resnet_3x3_14 fwd", false, false, 256, 196, 2304},
    {"resnet_3x3_14 fwd xN8", false, false, 256, 1568, 2304},
    {"resnet_3x3_7 fwd", false, false, 512, 49, 4608},
    {"resnet_3x3_7 fwd xN8", false, false, 512, 392, 4608},
    {"vgg_3x3_112 fwd", false, false, 128, 12544, 576},
    {"vgg_3x3_56 fwd", false, false, 256, 3136, 2304},
    {"alexnet_conv1 fwd", false, false, 96, 3025, 363},
    {"resnet_3x3_28 gradin", true, false, 1152, 784, 128},
    {"resnet_3x3_7 gradin", true, false, 4608, 49, 512},
    {"vgg_3x3_56 gradin", true, false, 2304, 3136, 256},
    {"resnet_3x3_28 gradw", false, true, 128, 1152, 784},
    {"resnet_1x1_56 gradw", false, true, 256, 64, 3136},
    {"resnet_3x3_7 gradw", false, true, 512, 4608, 49},
    {"vgg_3x3_56 gradw", false, true, 256, 2304, 3136},
    // The single-threaded calls cpu.corrmm makes (one column segment, one dW block each).
    {"call resnet_stem fwd", false, false, 64, 3136, 147, true},
    {"call resnet_1x1_56 fwd", false, false, 256, 3136, 64, true},
    {"call resnet_3x3_56 fwd", false, false, 64, 784, 576, true},
    {"call resnet_3x3_28 fwd", false, false, 128, 392, 1152, true},
    {"call resnet_3x3_14 fwd", false, false, 256, 196, 2304, true},
    {"call resnet_3x3_7 fwd", false, false, 512, 49, 4608, true},
    {"call vgg_3x3_56 fwd", false, false, 256, 224, 2304, true},
    {"call resnet_3x3_28 gradin", true, false, 1152, 392, 128, true},
    {"call resnet_3x3_7 gradin", true, false, 4608, 49, 512, true},
    {"call vgg_3x3_56 gradin", true, false, 2304, 224, 256, true},
    {"call resnet_3x3_28 gradw", false, true, 64, 256, 392, true},
    {"call resnet_3x3_7 gradw", false, true, 64, 256, 49, true},
    {"call vgg_3x3_56 gradw", false, true, 64, 256, 224, true},
    {"call resnet_1x1_56 gradw", false, true, 64, 64, 3136, true},
    // cpu.winograd's grad-weights GEMMs, one per transform position and thread: S_e =
    // D_e V_e^T over one chunk of tiles (F(4x4, 3x3): 14 x 14 tiles an image at 56x56).
    {"wino vgg_3x3_56 gradw", false, true, 256, 256, 224, true},
    {"wino vgg_3x3_112 gradw", false, true, 128, 64, 588, true},
    {"wino resnet_3x3_14 gradw", false, true, 256, 256, 128, true},
    {"wino resnet_3x3_7 gradw", false, true, 512, 512, 32, true},
    // Every standard layer (benchmarks/layers.txt; depthwise_3x3 is no GEMM), per direction,
    // as one image's GEMM (forward, grad inputs: the whole column matrix) and the whole
    // batch's grad-weights GEMM (K = N x output positions; cpu.corrmm's batch-reduce GEMM).
    {"layer resnet_stem fwd", false, false, 64, 12544, 147},
    {"layer resnet_stem gradin", true, false, 147, 12544, 64},
    {"layer resnet_stem gradw", false, true, 64, 147, 100352},
    {"layer resnet_1x1_56 fwd", false, false, 256, 3136, 64},
    {"layer resnet_1x1_56 gradin", true, false, 64, 3136, 256},
    {"layer resnet_1x1_56 gradw", false, true, 256, 64, 25088},
    {"layer resnet_3x3_56 fwd", false, false, 64, 3136, 576},
    {"layer resnet_3x3_56 gradin", true, false, 576, 3136, 64},
    {"layer resnet_3x3_56 gradw", false, true, 64, 576, 25088},
    {"layer resnet_3x3_28 fwd", false, false, 128, 784, 1152},
    {"layer resnet_3x3_28 gradin", true, false, 1152, 784, 128},
    {"layer resnet_3x3_28 gradw", false, true, 128, 1152, 6272},
    {"layer resnet_3x3_14 fwd", false, false, 256, 196, 2304},
    {"layer resnet_3x3_14 gradin", true, false, 2304, 196, 256},
    {"layer resnet_3x3_14 gradw", false, true, 256, 2304, 1568},
    {"layer resnet_3x3_7 fwd", false, false, 512, 49, 4608},
    {"layer resnet_3x3_7 gradin", true, false, 4608, 49, 512},
    {"layer resnet_3x3_7 gradw", false, true, 512, 4608, 392},
    {"layer vgg_3x3_112 fwd", false, false, 128, 12544, 576},
    {"layer vgg_3x3_112 gradin", true, false, 576, 12544, 128},
    {"layer vgg_3x3_112 gradw", false, true, 128, 576, 50176},
    {"layer vgg_3x3_56 fwd", false, false, 256, 3136, 2304},
    {"layer vgg_3x3_56 gradin", true, false, 2304, 3136, 256},
    {"layer vgg_3x3_56 gradw", false, true, 256, 2304, 12544},
    {"layer alexnet_conv1 fwd", false, false, 96, 3025, 363},
    {"layer alexnet_conv1 gradin", true, false, 363, 3025, 96},
    {"layer alexnet_conv1 gradw", false, true, 96, 363, 24200},
    {"layer dilated_3x3 fwd", false, false, 64, 3136, 576},
    {"layer dilated_3x3 gradin", true, false, 576, 3136, 64},
    {"layer dilated_3x3 gradw", false, true, 64, 576, 12544},
    {"layer c3d_conv2 fwd", false, false, 128, 50176, 1728},
    {"layer c3d_conv2 gradin", true, false, 1728, 50176, 128},
    {"layer c3d_conv2 gradw", false, true, 128, 1728, 100352},
    {"layer c3d_conv1 fwd", false, false, 64, 200704, 81},
    {"layer c3d_conv1 gradin", true, false, 81, 200704, 64},
    {"layer c3d_conv1 gradw", false, true, 64, 81, 401408},
};

/// Seconds on a wall clock, or in this thread's CPU time.
/// --cpu: multi-thread rows in the process's CPU time over the thread count (a busy machine
/// then still shows what the threads' work costs: packing, cache misses; not idle waits).
bool g_process_cpu = false;

double now_seconds(bool thread_cpu) {
  timespec ts{};
  clock_gettime(thread_cpu ? CLOCK_THREAD_CPUTIME_ID : g_process_cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// The peak check's clock: thread CPU time when the rows it is quoted against are (one
/// thread without --wall), so that both are measured alike on a busy machine.
bool g_peak_cpu_clock = false;
/// FMA loop iterations per peak measurement: 20M at the start (0.1-0.2 s), 5M for the
/// samples interleaved with each shape's (10-20 ms each).
long g_peak_iters = 20'000'000;

// FMA throughput of one thread: 12 independent accumulator chains (enough to cover the
// FMA latency on every current x86 core). Function-level targets keep this building in
// the portable (x86-64-v2) configuration; main() only calls what the CPU supports.
__attribute__((target("avx2,fma"))) void fma_loop_avx2(double* gflops) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  const long iters = g_peak_iters;
  const double t0 = now_seconds(g_peak_cpu_clock);
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  const double s = now_seconds(g_peak_cpu_clock) - t0;
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, sum);
  *gflops = static_cast<double>(iters) * 12.0 * 16.0 / s / 1e9 + (out[0] == 12345.0f ? 1e-9 : 0.0);
}

__attribute__((target("avx512f"))) void fma_loop_avx512(double* gflops) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
  const long iters = g_peak_iters;
  const double t0 = now_seconds(g_peak_cpu_clock);
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  const double s = now_seconds(g_peak_cpu_clock) - t0;
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  *gflops = static_cast<double>(iters) * 12.0 * 32.0 / s / 1e9 +
            (_mm512_reduce_add_ps(sum) == 12345.0f ? 1e-9 : 0.0);
}

/// Sum over `threads` threads running `loop` at once.
double fma_peak(int threads, void (*loop)(double*)) {
  std::vector<double> r(static_cast<std::size_t>(threads));
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) ts.emplace_back(loop, &r[static_cast<std::size_t>(t)]);
  loop(&r[0]);
  for (auto& t : ts) t.join();
  double sum = 0;
  for (double x : r) sum += x;
  return sum;
}

struct Impl {
  std::string name;
  std::function<void()> run;
  std::vector<double> seconds;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
#if CONVGRAPH_HAVE_OPENMP
  // Idle OpenMP threads (Eigen's and oneDNN's) spin for milliseconds after each parallel
  // region and would steal the core from the next implementation's threads. libgomp reads
  // OMP_WAIT_POLICY when it loads, so set it and start over.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
  }
#endif
  std::vector<int> thread_counts = {1, 2};
  int samples = 7;
  std::string filter, isa_name;
  bool wall = false, no_eigen = false, best = false;
  CLI::App app{"bench_sgemm: convgraph's sgemm against Eigen (and oneDNN's dnnl_sgemm when built with it) on the "
               "GEMM shapes im2col makes of the standard conv layers; GFLOP/s medians.",
               "bench_sgemm"};
  convgraph::bench::setup_cli(app);
  app.add_option("--threads", thread_counts, "thread counts to time, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->type_name("N[,N...]");
  app.add_option("--samples", samples, "interleaved samples per implementation (median reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--filter", filter, "only shapes whose name contains this text");
  app.add_option("--isa", isa_name, "convgraph's kernel level: avx512, avx2 or baseline (default: the best)")
      ->check(CLI::IsMember({"avx512", "avx2", "baseline"}));
  app.add_flag("--wall", wall, "time one-thread rows in wall time instead of thread CPU time");
  app.add_flag("--best", best,
               "report each implementation's fastest sample instead of the median (a machine others use: "
               "the fastest is the one least disturbed)");
  app.add_flag("--cpu", g_process_cpu,
               "time multi-thread rows in process CPU time divided by the thread count (work, not waits: "
               "for a busy machine; load imbalance and hand-off waits do not show)");
  app.add_flag("--no-eigen", no_eigen, "leave Eigen out (it is the slowest, and timing it takes most of the run)");
  std::vector<std::string> shape_texts;
  app.add_option("--shape", shape_texts,
                 "time these shapes instead of the built-in ones: MxNxK, optionally :ta, :tb or :tatb (op(A) or "
                 "op(B) stored transposed); repeatable")
      ->type_name("MxNxK[:ta|:tb|:tatb]");
  if (const int status = convgraph::bench::parse_cli(app, argc, argv); status >= 0) return status;
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  if (!shape_texts.empty()) {
    shapes.clear();
    for (const std::string& text : shape_texts) {
      Shape sh{text.c_str(), false, false, 0, 0, 0};
      char flags[8] = "";
      const int got = std::sscanf(text.c_str(), "%" SCNd64 "x%" SCNd64 "x%" SCNd64 ":%7s", &sh.M, &sh.N, &sh.K, flags);
      const std::string f = flags;
      if (got < 3 || sh.M < 1 || sh.N < 1 || sh.K < 1 || (got == 4 && f != "ta" && f != "tb" && f != "tatb")) {
        std::fprintf(stderr, "bench_sgemm: error: --shape %s: expected MxNxK with positive sizes, then :ta, :tb or :tatb\n",
                     text.c_str());
        return 2;
      }
      sh.ta = f == "ta" || f == "tatb";
      sh.tb = f == "tb" || f == "tatb";
      shapes.push_back(sh);
    }
  }
  CpuIsa isa = active_cpu_isa();
  if (!isa_name.empty()) {
    const auto parsed = parse_cpu_isa(isa_name);
    if (!parsed || !cpu_isa_supported(*parsed)) {
      std::fprintf(stderr, "bench_sgemm: error: --isa %s: not a level this CPU runs (best: %s)\n", isa_name.c_str(),
                   cpu_isa_name(detected_cpu_isa()));
      return 2;
    }
    isa = *parsed;
  }

  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = __builtin_cpu_supports("avx512f");
  for (int t : thread_counts) {
    g_peak_cpu_clock = (t == 1 && !wall) || g_process_cpu;
    const double p2 = has_avx2 ? fma_peak(t, fma_loop_avx2) : 0.0;
    const double p512 = has_avx512 ? fma_peak(t, fma_loop_avx512) : 0.0;
    std::printf("FMA peak check, %d thread(s), %s time: AVX2 %.1f GFLOP/s, AVX-512 %.1f GFLOP/s\n", t,
                g_peak_cpu_clock ? "thread CPU" : "wall", p2, p512);
  }
  // The AVX-512 FMA loop where the CPU has it (else AVX2), sampled again in every shape's rounds:
  // these VMs' FMA rate moves by a third within minutes (turbo, neighbours), so each shape's
  // % of peak is taken against the peak measured in its own rounds.
  void (*peak_loop)(double*) = has_avx512 ? fma_loop_avx512 : fma_loop_avx2;
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("convgraph sgemm kernels: %s; OMP_WAIT_POLICY=%s; 1-thread rows in %s time\n\n",
              cpu_isa_name(isa), wait_policy ? wait_policy : "(unset)",
              wall ? "wall" : "thread CPU");
  if (g_process_cpu) std::printf("multi-thread rows in process CPU time / threads (--cpu)\n\n");
  std::printf("%-28s %5s %6s %6s %2s | %9s %9s %9s %9s | %5s %5s %5s | %s%s\n", "shape", "M", "N", "K", "T",
              "convgraph", "Eigen", "oneDNN", "OpenBLAS", "cg%", "dnn%", "obl%",
              best ? "GFLOP/s best of the samples; " : "GFLOP/s medians; ",
              "% of the FMA peak sampled in the same rounds (last column); ratios cg/Eigen cg/oneDNN cg/OpenBLAS");

  // Geometric means of the ratios cg/oneDNN and cg/OpenBLAS per thread count.
  std::vector<std::array<double, 2>> log_sum(thread_counts.size(), {0.0, 0.0});
  std::vector<std::array<int, 2>> rows(thread_counts.size(), {0, 0});
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    if (!filter.empty() && std::string(s.name).find(filter) == std::string::npos) continue;
    const std::int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N, ldc = s.N;
    const HostFloats A(static_cast<std::size_t>(s.M * s.K)), B(static_cast<std::size_t>(s.K * s.N));
    const HostFloats C(static_cast<std::size_t>(s.M * s.N));
    for (float& x : A) x = dist(rng);
    for (float& x : B) x = dist(rng);
    const double flop = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);

    for (std::size_t ti = 0; ti < thread_counts.size(); ++ti) {
      const int threads = thread_counts[ti];
      if (s.one_thread && threads != 1) continue;
      ThreadPool pool(threads);
      ThreadPool* pp = threads > 1 ? &pool : nullptr;
      Eigen::setNbThreads(threads);
#if CONVGRAPH_HAVE_OPENMP
      omp_set_num_threads(threads);
#endif
      std::vector<Impl> impls;
      impls.push_back({"convgraph", [&] {
                         cpu::sgemm_with_isa(isa, s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb,
                                             0.0f, C.data(), ldc, pp);
                       }, {}});
      if (!no_eigen) {
        impls.push_back({"Eigen", [&] {
                           using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
                           Eigen::Map<const RowMat> a(A.data(), s.ta ? s.K : s.M, s.ta ? s.M : s.K);
                           Eigen::Map<const RowMat> b(B.data(), s.tb ? s.N : s.K, s.tb ? s.K : s.N);
                           Eigen::Map<RowMat> c(C.data(), s.M, s.N);
                           if (s.ta && s.tb) c.noalias() = a.transpose() * b.transpose();
                           else if (s.ta) c.noalias() = a.transpose() * b;
                           else if (s.tb) c.noalias() = a * b.transpose();
                           else c.noalias() = a * b;
                         }, {}});
      }
#if CONVGRAPH_HAVE_DNNL
      impls.push_back({"oneDNN", [&] {
                         dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, A.data(), lda,
                                    B.data(), ldb, 0.0f, C.data(), ldc);
                       }, {}});
#endif
#if CONVGRAPH_HAVE_OPENBLAS
      openblas_set_num_threads(threads);
      impls.push_back({"OpenBLAS", [&] {
                         cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                                     static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K), 1.0f,
                                     A.data(), static_cast<int>(lda), B.data(), static_cast<int>(ldb), 0.0f, C.data(),
                                     static_cast<int>(ldc));
                       }, {}});
#endif
      // Iterations per sample: about 10 ms of the first implementation, after a warm-up.
      const bool cpu_clock = threads == 1 && !wall;
      for (auto& im : impls) im.run();
      const double t0 = now_seconds(cpu_clock);
      impls[0].run();
      const double once = now_seconds(cpu_clock) - t0;
      const int iters = std::max(1, static_cast<int>(0.01 / std::max(once, 1e-7)));
      std::vector<double> peak_samples;
      g_peak_cpu_clock = cpu_clock || g_process_cpu;
      g_peak_iters = 5'000'000;  // 10-20 ms
      for (int r = 0; r < samples; ++r) {
        peak_samples.push_back(fma_peak(threads, peak_loop));
        for (auto& im : impls) {
          const double a = now_seconds(cpu_clock);
          for (int it = 0; it < iters; ++it) im.run();
          const double s = (now_seconds(cpu_clock) - a) / iters;
          im.seconds.push_back(g_process_cpu && !cpu_clock ? s / threads : s);
        }
      }
      double g[4] = {0, 0, 0, 0};  // convgraph, Eigen, oneDNN, OpenBLAS (0: not built)
      const char* const columns[4] = {"convgraph", "Eigen", "oneDNN", "OpenBLAS"};
      for (const Impl& im : impls)
        for (int c = 0; c < 4; ++c)
          if (im.name == columns[c])
            g[c] = flop / (best ? *std::min_element(im.seconds.begin(), im.seconds.end()) : median(im.seconds)) / 1e9;
      const double peak = best ? *std::max_element(peak_samples.begin(), peak_samples.end()) : median(peak_samples);
      auto ratio = [&](double other) { return other > 0 ? g[0] / other : 0.0; };
      std::printf("%-28s %5lld %6lld %6lld %2d | %9.1f %9.1f %9.1f %9.1f | %5.0f %5.0f %5.0f | %5.2f %5.2f %5.2f | %6.1f\n",
                  s.name, static_cast<long long>(s.M), static_cast<long long>(s.N), static_cast<long long>(s.K),
                  threads, g[0], g[1], g[2], g[3], 100 * g[0] / peak, 100 * g[2] / peak, 100 * g[3] / peak,
                  ratio(g[1]), ratio(g[2]), ratio(g[3]), peak);
      std::fflush(stdout);
      for (int c = 0; c < 2; ++c)
        if (g[2 + c] > 0) {
          log_sum[ti][c] += std::log(ratio(g[2 + c]));
          ++rows[ti][c];
        }
    }
  }
  for (std::size_t ti = 0; ti < thread_counts.size(); ++ti)
    std::printf("\n%d thread(s): geomean cg/oneDNN %.2f over %d shapes, cg/OpenBLAS %.2f over %d\n",
                thread_counts[ti], rows[ti][0] ? std::exp(log_sum[ti][0] / rows[ti][0]) : 0.0, rows[ti][0],
                rows[ti][1] ? std::exp(log_sum[ti][1] / rows[ti][1]) : 0.0, rows[ti][1]);
  return 0;
}
