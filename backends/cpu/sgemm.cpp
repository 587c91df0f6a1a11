// sgemm entry point: argument checks, the trivial cases, the run-time choice of kernel
// family (the active CPU level), and the portable kernel family (plain C++, vectorised
// for the build target).
#include "backends/cpu/sgemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "backends/cpu/sgemm_driver.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph::cpu {

// Defined in sgemm_avx512.cpp and sgemm_avx2.cpp.
void sgemm_avx512(const sgemm_detail::GemmArgs& g, ThreadPool* pool);
void sgemm_avx2(const sgemm_detail::GemmArgs& g, ThreadPool* pool);

namespace {

using sgemm_detail::GemmArgs;

struct ScalarTraits : sgemm_detail::TraitsDefaults {
  static constexpr int kMR = 4;
  static constexpr int kNR = 16;
  static constexpr std::int64_t kKC = 256;
  static constexpr std::int64_t kABuf = kMR * kKC;
  static constexpr std::int64_t kAPanel = 1;
  static void pack_a(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                     float* dst) {
    sgemm_detail::pack_a_generic<kMR>(g, i0, m, p0, kc, dst);
  }
  static std::int64_t a_depth_offset(const GemmArgs&, std::int64_t k) { return k * kMR; }
  static void pack_b(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                     float* dst) {
    sgemm_detail::pack_b_generic<kNR>(g, p0, kc, j0, n, dst);
  }
  static void pack_b_panel(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                           std::int64_t n, float* dst) {
    sgemm_detail::pack_b_panel_by_sliver<ScalarTraits>(g, p0, kc, j0, n, dst);
  }
  static void kernel(const GemmArgs& g, std::int64_t kc, const float* __restrict a,
                     const float* __restrict b, float* c, int m, int n, bool first,
                     sgemm_detail::PrefetchRows* pf) {
    pf->some();
    const std::int64_t ldc = g.ldc;
    const float alpha = g.alpha, beta = g.beta;
    float acc[kMR][kNR] = {};
    for (std::int64_t k = 0; k < kc; ++k) {
      for (int i = 0; i < kMR; ++i)
        for (int j = 0; j < kNR; ++j) acc[i][j] += a[i] * b[j];
      a += kMR;
      b += kNR;
    }
    for (int i = 0; i < m; ++i) {
      float* cr = c + i * ldc;
      for (int j = 0; j < n; ++j) {
        const float r = alpha * acc[i][j];
        cr[j] = !first ? cr[j] + r : beta == 0.0f ? r : beta * cr[j] + r;
      }
    }
  }
};

// C = beta * C without reading C when beta == 0 (the BLAS rule: NaN in C is dropped).
void scale_c(std::int64_t M, std::int64_t N, float beta, float* C, std::int64_t ldc) {
  if (beta == 1.0f) return;
  for (std::int64_t i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    if (beta == 0.0f)
      std::memset(row, 0, static_cast<std::size_t>(N) * sizeof(float));
    else
      for (std::int64_t j = 0; j < N; ++j) row[j] *= beta;
  }
}

void check_args(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                const float* A, std::int64_t lda, const float* B, std::int64_t ldb, const float* C,
                std::int64_t ldc, const SgemmExt& ext = {}) {
  if (ext.batch < 0)
    throw ValueError(msg("sgemm: batch must be non-negative, got batch=", ext.batch));
  if (ext.b_source != nullptr) {  // no stored B to check
    tb = false;
    ldb = std::max<std::int64_t>(ldb, N);
    B = reinterpret_cast<const float*>(&ext);
  }
  if (M < 0 || N < 0 || K < 0)
    throw ValueError(msg("sgemm: sizes must be non-negative, got M=", M, " N=", N, " K=", K));
  const std::int64_t a_cols = ta ? M : K, b_cols = tb ? K : N;
  if (lda < std::max<std::int64_t>(1, a_cols))
    throw ValueError(msg("sgemm: lda=", lda, " is less than the ", a_cols, " columns of A",
                         ta ? " (transA)" : ""));
  if (ldb < std::max<std::int64_t>(1, b_cols))
    throw ValueError(msg("sgemm: ldb=", ldb, " is less than the ", b_cols, " columns of B",
                         tb ? " (transB)" : ""));
  if (ldc < std::max<std::int64_t>(1, N))
    throw ValueError(msg("sgemm: ldc=", ldc, " is less than N=", N));
  if (M > 0 && N > 0 && C == nullptr) throw ValueError("sgemm: C is null for a non-empty result");
  if (M > 0 && N > 0 && K > 0 && (A == nullptr || B == nullptr))
    throw ValueError(msg("sgemm: ", A == nullptr ? "A" : "B", " is null with M=", M, " N=", N,
                         " K=", K));
}

// The kernel family of `isa`. A build with one kernel level (CMake
// CONVGRAPH_CPU_LEVELS=HOST) has only its family; cpu_isa_supported() refuses the others.
void run_isa(CpuIsa isa, const GemmArgs& g, ThreadPool* pool) {
#if !defined(CONVGRAPH_ISA_ONLY_LEVEL) || CONVGRAPH_ISA_ONLY_LEVEL == 2
  if (isa == CpuIsa::avx512) return sgemm_avx512(g, pool);
#endif
#if !defined(CONVGRAPH_ISA_ONLY_LEVEL) || CONVGRAPH_ISA_ONLY_LEVEL == 1
  if (isa == CpuIsa::avx2) return sgemm_avx2(g, pool);
#endif
  (void)isa;
  sgemm_detail::run_sgemm<ScalarTraits>(g, pool);
}

/// Whether C^T = B A^T transposes fewer floats than C = A B^T: per depth step the
/// transposed side is packed in whole 32-column slivers (zero-padded), ceil32(N) floats as
/// stored and ceil32(M) swapped, for the same M N flops (64x81, c3d_conv1's grad weights:
/// 96 against 64; Zen 4, 1 thread, 94 -> 99 GFLOP/s).
bool transposes_less_swapped(std::int64_t M, std::int64_t N) {
  auto padded = [](std::int64_t n) { return (n + 31) / 32 * 32; };
  return padded(M) < padded(N);
}

/// C = A B^T with both operands stored along K (grad weights: K = pixels, long) transposes
/// op(B)'s N x K block by block as it packs it, while op(A) is a plain copy. When that is
/// the larger side (transposes_less_swapped), C^T = B A^T transposes the M x K side instead: computed
/// into a scratch N x M product whose tiles are added to C transposed as they finish (M x N
/// floats against 2 M N K flops). Zen 4, 1 thread, GFLOP/s: 128x1728x100352 (c3d_conv2's grad weights)
/// 91 -> 104, 128x576x50176 92 -> 101, 64x147x100352 76 -> 83. Below K = 8192 it measured no
/// better (256x2304x1568 3% slower), so short depths keep the direct order.
bool swap_pays(const GemmArgs& g) {
  return !g.ta && g.tb && g.bsrc == nullptr && g.hook == nullptr && g.batch == 1 && transposes_less_swapped(g.M, g.N) &&
         g.K >= 8192 && g.M * g.N <= (std::int64_t{1} << 22);
}

/// Adds the swapped product's finished tiles to C transposed (a TileHook: the driver calls
/// it on each tile as soon as it is final, in the thread that finished it, while the tile is
/// still in cache). Rows i0..i1 of the product are columns of C.
struct SwappedCombine {
  const GemmArgs* g;
  float* product;  ///< N x M, row stride M, alpha already applied
  static void tile(const void* ctx, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
    const auto& self = *static_cast<const SwappedCombine*>(ctx);
    const GemmArgs& g = *self.g;
    for (std::int64_t i = j0; i < j1; ++i) {
      float* c = g.C + i * g.ldc;
      for (std::int64_t j = i0; j < i1; ++j) {
        const float r = self.product[j * g.M + i];
        c[j] = g.beta == 0.0f ? r : g.beta * c[j] + r;
      }
    }
  }
};

void run_isa_or_swapped(CpuIsa isa, const GemmArgs& g, ThreadPool* pool) {
  if (!swap_pays(g)) return run_isa(isa, g, pool);
  const SwappedCombine combine{&g, sgemm_detail::scratch(5, g.N * g.M)};
  const TileHook hook{&SwappedCombine::tile, &combine};
  GemmArgs s = g;
  s.M = g.N, s.N = g.M;
  s.A = g.B, s.lda = g.ldb;
  s.B = g.A, s.ldb = g.lda;
  s.beta = 0.0f;
  s.C = combine.product, s.ldc = g.M;
  s.hook = &hook;
  run_isa(isa, s, pool);
}

/// sysconf's answer, or `fallback` when it has none (0 or -1: not reported).
std::int64_t cache_or(int name, std::int64_t fallback) {
  const long v = sysconf(name);
  return v > 0 ? static_cast<std::int64_t>(v) : fallback;
}

/// CPU 0's level-`level` data or unified cache in sysfs: its size in bytes and how many
/// logical CPUs share it (shared_cpu_list: "0", "0-1", "0,64"); 0 for what is not there to
/// read. (sysconf's L3 is glibc's reading of CPUID, which on AMD VMs can be a whole
/// socket's: 320 MiB where sysfs says each L3 is 32 MiB.)
struct SysfsCache {
  std::int64_t bytes = 0;
  int sharing = 0;
};
SysfsCache sysfs_cache(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size"),
        list_file(dir + "shared_cpu_list");
    int found = 0;
    std::string type, size, list;
    if (!(level_file >> found) || !(type_file >> type)) return {};
    if (found != level || type == "Instruction") continue;
    SysfsCache cache;
    if (size_file >> size) {  // "1024K", "32768K", "2M"
      char* unit = nullptr;
      const long n = std::strtol(size.c_str(), &unit, 10);
      const long scale = *unit == 'K' ? 1L << 10 : *unit == 'M' ? 1L << 20 : *unit == '\0' ? 1 : 0;
      if (n > 0) cache.bytes = static_cast<std::int64_t>(n) * scale;
    }
    if (list_file >> list) {
      // Comma-separated CPUs and ranges a-b (strtol: garbage reads as 0, never throws).
      long cpus = 0;
      std::istringstream ranges(list);
      for (std::string range; std::getline(ranges, range, ',');) {
        const auto dash = range.find('-');
        cpus += dash == std::string::npos
                    ? 1
                    : std::strtol(range.c_str() + dash + 1, nullptr, 10) - std::strtol(range.c_str(), nullptr, 10) + 1;
      }
      if (cpus > 0 && cpus < 1024) cache.sharing = static_cast<int>(cpus);
    }
    return cache;
  }
  return {};
}

}  // namespace

CacheSizes cpu_cache_sizes() {
  // Clamped to what current x86 cores have: a strange report (a VM passing nonsense
  // through) must not make absurd blocks.
  static const CacheSizes sizes = [] {
    const SysfsCache l2 = sysfs_cache(2), l3 = sysfs_cache(3);
    return CacheSizes{
        std::clamp<std::int64_t>(cache_or(_SC_LEVEL1_DCACHE_SIZE, 32 << 10), 16 << 10, 128 << 10),
        std::clamp<std::int64_t>(cache_or(_SC_LEVEL2_CACHE_SIZE, 1 << 20), 256 << 10, 4 << 20),
        std::clamp(l2.sharing > 0 ? l2.sharing : 2, 1, 8),
        std::clamp<std::int64_t>(l3.bytes > 0 ? l3.bytes : cache_or(_SC_LEVEL3_CACHE_SIZE, 32 << 20), 1 << 20,
                                 512 << 20)};
  }();
  return sizes;
}

namespace {
std::atomic<std::int64_t> stream_l3_stand_in{0};  // 0: none
}  // namespace

std::int64_t stream_l3_bytes() {
  const std::int64_t stand_in = stream_l3_stand_in.load(std::memory_order_relaxed);
  return stand_in > 0 ? stand_in : cpu_cache_sizes().l3;
}

ScopedStreamL3::ScopedStreamL3(std::int64_t bytes) : saved_(stream_l3_stand_in.exchange(bytes)) {}
ScopedStreamL3::~ScopedStreamL3() { stream_l3_stand_in.store(saved_); }

void sgemm_ex(bool transA, bool transB, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
              const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
              std::int64_t ldc, const SgemmExt& ext, ThreadPool* pool) {
  sgemm_with_isa(active_cpu_isa(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pool, ext);
}

void sgemm_with_isa(CpuIsa isa, bool transA, bool transB, std::int64_t M, std::int64_t N,
                    std::int64_t K, float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc, ThreadPool* pool,
                    const SgemmExt& ext) {
  check_args(transA, transB, M, N, K, A, lda, B, ldb, C, ldc, ext);
  if (!cpu_isa_supported(isa))
    throw ValueError(msg("sgemm: this CPU cannot run the ", cpu_isa_name(isa), " kernels"));
  if (M == 0 || N == 0) return;
  if (K == 0 || ext.batch == 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    if (ext.tile_done != nullptr) ext.tile_done->fn(ext.tile_done->ctx, 0, M, 0, N);
    return;
  }
  GemmArgs g{transA, transB && ext.b_source == nullptr, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  g.batch = ext.batch;
  g.a_stride = ext.a_stride;
  g.b_stride = ext.b_stride;
  g.bsrc = ext.b_source;
  g.hook = ext.tile_done;
  run_isa_or_swapped(isa, g, pool);
}

void sgemm(bool transA, bool transB, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc, ThreadPool* pool) {
  sgemm_with_isa(active_cpu_isa(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                 pool);
}

}  // namespace convgraph::cpu
