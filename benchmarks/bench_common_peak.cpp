// The machine's FP32 peak and memory bandwidth, measured. Peak: independent FMA chains held
// in registers on every thread. Enough chains (16) to cover FMA latency x issue ports on current x86 cores, so the
// loop is bound by FMA throughput only. Functions carry their own target attribute, so the
// probe works whatever -march the rest of the build uses, and the CPU is asked at run time.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "benchmarks/bench_common.hpp"

namespace convgraph::bench {
namespace {

constexpr int kChains = 16;

__attribute__((target("avx512f"))) double fma_loop_avx512(std::int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-6f);
  for (std::int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  double r = 0;
  for (float v : lanes) r += v;
  return r;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(std::int64_t iters) {
  // 12 chains: AVX2 has 16 ymm registers, and the two constants need two.
  constexpr int kChains2 = 12;
  __m256 acc[kChains2];
  for (int i = 0; i < kChains2; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-6f);
  for (std::int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < kChains2; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  double r = 0;
  for (float v : lanes) r += v;
  return r;
}

struct Kernel {
  double (*fn)(std::int64_t);
  double flops_per_iter;
  const char* isa;
};

std::atomic<double> g_sink{0};

/// GFLOP/s of `threads` threads each running `iters` iterations, started together.
double run_threads(const Kernel& k, int threads, std::int64_t iters) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> results(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      results[static_cast<std::size_t>(t)] = k.fn(iters);
    });
  while (ready.load() < threads - 1) std::this_thread::yield();
  const double t0 = now_seconds();
  go.store(true, std::memory_order_release);
  results[0] = k.fn(iters);
  for (auto& th : pool) th.join();
  const double elapsed = now_seconds() - t0;
  double sum = 0;
  for (double r : results) sum += r;
  g_sink.store(sum);
  return k.flops_per_iter * static_cast<double>(iters) * threads / elapsed * 1e-9;
}

/// Best of three measurements of about `seconds` each (a slowed vCPU reads low, never high).
double measure(const Kernel& k, int threads, double seconds) {
  std::int64_t iters = 1 << 14;
  while (true) {  // calibrate on one thread
    const double t0 = now_seconds();
    g_sink.store(k.fn(iters));
    if (now_seconds() - t0 > 0.02 || iters > (std::int64_t{1} << 34)) break;
    iters *= 2;
  }
  const double rate_1t = run_threads(k, 1, iters);
  iters = std::max<std::int64_t>(1, static_cast<std::int64_t>(seconds * rate_1t * 1e9 / k.flops_per_iter));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, run_threads(k, threads, iters));
  return best;
}

}  // namespace

double measure_bandwidth(int threads, double seconds) {
  // 3 x 48 MiB: well beyond the last-level cache of current x86 parts (per socket/CCD).
  constexpr std::size_t kFloats = std::size_t{12} << 20;
  threads = std::max(1, threads);
  const Buffer a = alloc_buffer(kFloats), b = alloc_buffer(kFloats), c = alloc_buffer(kFloats);
  // Every thread touches (first: page faults land on its node) and runs its own slice.
  auto parallel = [&](auto&& body) {
    std::vector<std::thread> pool;
    const std::size_t per = (kFloats + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const std::size_t lo = std::min(kFloats, per * static_cast<std::size_t>(t)), hi = std::min(kFloats, lo + per);
        body(lo, hi);
      });
    for (auto& th : pool) th.join();
  };
  parallel([&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      a.data[i] = 0;
      b.data[i] = 1;
      c.data[i] = 2;
    }
  });
  double best = 0;
  const double start = now_seconds();
  for (int pass = 0; pass < 3 || (now_seconds() - start < seconds && pass < 50); ++pass) {
    const float s = 0.5f + static_cast<float>(pass);
    const double t0 = now_seconds();
    parallel([&](std::size_t lo, std::size_t hi) {
      float* __restrict__ pa = a.data;
      const float* __restrict__ pb = b.data;
      const float* __restrict__ pc = c.data;
      for (std::size_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    best = std::max(best, 3.0 * kFloats * sizeof(float) / (now_seconds() - t0) * 1e-9);
  }
  g_sink.store(a.data[kFloats / 2]);
  return best;
}

double core_round_trip_ns() {
  if (std::thread::hardware_concurrency() < 2) return NAN;
  constexpr int kTrips = 20000, kBatches = 5;
  alignas(64) std::atomic<int> flag{0};
  std::vector<double> ns;
  std::thread echo([&] {
    for (int i = 0; i < kTrips * kBatches; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {}
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  for (int b = 0; b < kBatches; ++b) {
    const double t0 = now_seconds();
    for (int i = b * kTrips; i < (b + 1) * kTrips; ++i) {
      flag.store(2 * i + 1, std::memory_order_release);
      while (flag.load(std::memory_order_acquire) != 2 * i + 2) {}
    }
    ns.push_back((now_seconds() - t0) / kTrips * 1e9);
  }
  echo.join();
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

PeakResult measure_peak(int threads, double seconds) {
  std::vector<Kernel> kernels;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) kernels.push_back({fma_loop_avx512, 2.0 * 16 * kChains, "avx512"});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    kernels.push_back({fma_loop_avx2, 2.0 * 8 * 12, "avx2"});
  PeakResult out;
  out.threads = std::max(1, threads);
  for (const auto& k : kernels) {
    const double one = measure(k, 1, seconds / 3);
    const double all = out.threads == 1 ? one : measure(k, out.threads, seconds / 3);
    if (all > out.gflops) {
      out.gflops = all;
      out.gflops_1t = one;
      out.isa = k.isa;
    }
  }
  if (kernels.empty()) out.isa = "none (no AVX2/FMA: peak unknown)";
  return out;
}

}  // namespace convgraph::bench
