#pragma once
/// Single-precision GEMM for the CPU convolution paths (internal header).
///
///   C = alpha * op(A) * op(B) + beta * C, all matrices row-major,
///   op(A) is M x K (A is K x M when transA), op(B) is K x N (B is N x K when transB).
///
/// BLIS-style: A and B are packed into micro-panels and a register-blocked
/// micro-kernel (AVX-512 14x32, AVX2 6x16 or portable 4x16) runs over them; the
/// kernel set is the active CPU level (active_cpu_isa(), CONVGRAPH_CPU_ISA). beta == 0 never reads C
/// (NaN in C is overwritten), alpha == 0 or K == 0 never reads A or B.
#include <cstdint>

#include "convgraph/backends/cpu/cpu_isa.hpp"

namespace convgraph {
class ThreadPool;
}

namespace convgraph::cpu {

/// C = alpha * op(A) * op(B) + beta * C. Leading dimensions are row strides in elements
/// (lda >= K, or >= M when transA; ldb >= N, or >= K when transB; ldc >= N).
/// Splits the work over `pool` (may be null: single-threaded) when the problem is big
/// enough (~4 MFLOP); results are bitwise identical for any pool size. Safe to call from
/// several threads at once (packing buffers are per thread and reused across calls).
/// Throws ValueError for negative sizes, short leading dimensions or null data.
void sgemm(bool transA, bool transB, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc, ThreadPool* pool);

/// op(B) made on the fly instead of read from memory (im2col fused into the packing):
/// pack(ctx, b, k0, kc, j0, n, nr, dst) writes depth k0..k0+kc, columns j0..j0+n of op(B)
/// of batch element b as the driver's packed slivers: sliver q (columns j0 + q*nr ...) at
/// dst + q*kc*nr, its element (k, j) at [k*nr + j], zero for the columns past n.
/// A source whose natural order is by column gives `rows` instead (pack == nullptr): it
/// writes those n columns as rows of kc floats (dst[j*kc + k]), at most one sliver's worth
/// at a time, and the driver's own transposing packer makes the slivers from them.
struct PanelSource {
  void (*pack)(const void* ctx, std::int64_t b, std::int64_t k0, std::int64_t kc, std::int64_t j0,
               std::int64_t n, int nr, float* dst);
  const void* ctx;
  void (*rows)(const void* ctx, std::int64_t b, std::int64_t k0, std::int64_t kc, std::int64_t j0,
               std::int64_t n, float* dst) = nullptr;
};

/// fn(ctx, i0, i1, j0, j1): rows [i0, i1) x columns [j0, j1) of C are final. Called once per
/// tile by the thread that computed it, right after, while the tile is still in cache.
struct TileHook {
  void (*fn)(const void* ctx, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1);
  const void* ctx;
};

/// What sgemm_ex adds to sgemm; the defaults make it plain sgemm.
struct SgemmExt {
  /// Batch-reduce: C = alpha * sum over b < batch of op(A + b*a_stride) * op(B + b*b_stride)
  /// + beta * C, one GEMM whose depth runs over the whole batch (grad weights over images).
  std::int64_t batch = 1, a_stride = 0, b_stride = 0;
  const PanelSource* b_source = nullptr;  ///< replaces B (B may then be null; transB is ignored)
  const TileHook* tile_done = nullptr;
};

/// sgemm with the extensions above, at the active CPU level.
void sgemm_ex(bool transA, bool transB, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
              const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
              std::int64_t ldc, const SgemmExt& ext, ThreadPool* pool);

/// The data cache sizes the blocking is derived from, read once at run time (sysconf, which
/// glibc answers from CPUID leaf 4 on Intel and 0x8000001D on AMD); 32 KiB / 1 MiB when the
/// system does not say. l2_shared: logical CPUs that share one L2 (SMT siblings; Linux's
/// sysfs), 2 when the system does not say. l3: the size of CPU 0's L3 from sysfs (sysconf's
/// when sysfs has none, 32 MiB when neither says).
struct CacheSizes {
  std::int64_t l1d, l2;
  int l2_shared = 2;
  std::int64_t l3 = 32 << 20;  ///< the L3 CPU 0 is on (one of a socket's several on AMD)
};
CacheSizes cpu_cache_sizes();

/// The L3 size stream_destination compares against: cpu_cache_sizes().l3, or the stand-in
/// of a live ScopedStreamL3.
std::int64_t stream_l3_bytes();

/// Whether a convolution kernel stores a destination of `bytes`, written in one pass, past
/// the caches (cpu.direct, cpu.winograd): over half the L3 it would not stay cached for the
/// next op anyway, so reading its lines for ownership before overwriting them is pure cost.
inline bool stream_destination(std::int64_t bytes) { return 2 * bytes >= stream_l3_bytes(); }

/// Tests: stream_destination takes the L3 to be `bytes` for a scope, so the streamed stores
/// run on small layers (the host's L3 made them 16-240 MiB, minutes under the sanitizers).
class ScopedStreamL3 {
 public:
  explicit ScopedStreamL3(std::int64_t bytes);
  ~ScopedStreamL3();
  ScopedStreamL3(const ScopedStreamL3&) = delete;
  ScopedStreamL3& operator=(const ScopedStreamL3&) = delete;

 private:
  std::int64_t saved_;
};

/// Same, with an explicit CPU level (tests and benchmarks); throws ValueError if the CPU
/// cannot run it.
void sgemm_with_isa(CpuIsa isa, bool transA, bool transB, std::int64_t M, std::int64_t N,
                    std::int64_t K, float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc, ThreadPool* pool,
                    const SgemmExt& ext = {});

}  // namespace convgraph::cpu
