#pragma once
/// The ISA-neutral part of sgemm: blocking, packing order and threading. Each kernel
/// family (sgemm_avx512.cpp, sgemm_avx2.cpp, sgemm.cpp) instantiates run_sgemm with a
/// traits type that supplies the register block and its target-specific functions:
///
///   static constexpr int kMR, kNR;        register block: kMR rows x kNR columns of C
///   static constexpr std::int64_t kKC;    largest depth block (A sliver kKC*kMR in L1)
///   static constexpr std::int64_t kNC;    widest column block one task packs (kKC*kNC in L2)
///   static void pack_a(const GemmArgs&, i0, m, p0, kc, float* dst);  dst[k*kMR + i]
///   static void pack_b(const GemmArgs&, p0, kc, j0, n, float* dst);  dst[k*kNR + j]
///   static void kernel(kc, a, b, c, ldc, m, n, alpha, beta, first);
///
/// Packing pads a short sliver (m < kMR, n < kNR) with zeros, so the kernel always
/// runs the full block and only stores the m x n part. `first` is true for the first
/// depth block: the kernel then applies beta (beta == 0: C is not read); later depth
/// blocks accumulate into C.
///
/// Loop order, chosen so the kernel streams as little as possible from far away:
///   1. pack all of op(A), once, shared by every task (parallel over slivers);
///   2. tasks = column tiles of C (times row tiles when C has few columns, in which
///      case op(B) is also packed once up front instead of per task);
///   3. in a task, per depth block: pack the tile's B block (stays in L2), then for
///      each A sliver (stays in L1) run the kernel over the tile's B slivers.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "convgraph/runtime/thread_pool.hpp"

namespace convgraph::cpu::sgemm_detail {

struct GemmArgs {
  bool ta, tb;
  std::int64_t M, N, K;
  float alpha;
  const float* A;
  std::int64_t lda;
  const float* B;
  std::int64_t ldb;
  float beta;
  float* C;
  std::int64_t ldc;
  /// op(A)(i, k) and op(B)(k, j), for the generic packers.
  float a(std::int64_t i, std::int64_t k) const { return ta ? A[k * lda + i] : A[i * lda + k]; }
  float b(std::int64_t k, std::int64_t j) const { return tb ? B[j * ldb + k] : B[k * ldb + j]; }
};

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Below this many flops the thread hand-off costs more than it saves.
constexpr double kMinParallelFlops = 4.0e6;

/// A per-thread, 64-byte aligned buffer that only grows: the packed panels are reused
/// across calls, so a conv layer's GEMMs neither reallocate nor page-fault each time.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(ptr_); }
  float* get(std::int64_t floats) {
    const std::size_t bytes = (static_cast<std::size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    if (bytes > bytes_) {
      std::free(ptr_);
      ptr_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      bytes_ = ptr_ ? bytes : 0;
      if (!ptr_) throw std::bad_alloc();
    }
    return ptr_;
  }

 private:
  float* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Slot 0: a thread's A sliver; 1: a thread's B block; 2: the caller's fully packed B.
inline float* scratch(int slot, std::int64_t floats) {
  thread_local Scratch buffers[3];
  return buffers[slot].get(floats);
}

/// Generic packers (plain C++; the compiler vectorises what it can for the TU's target).
template <int MR>
void pack_a_generic(const GemmArgs& g, std::int64_t i0, int m, std::int64_t p0, std::int64_t kc,
                    float* dst) {
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < m; ++i) dst[k * MR + i] = g.a(i0 + i, p0 + k);
    for (int i = m; i < MR; ++i) dst[k * MR + i] = 0.0f;
  }
}
template <int NR>
void pack_b_generic(const GemmArgs& g, std::int64_t p0, std::int64_t kc, std::int64_t j0, int n,
                    float* dst) {
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int j = 0; j < n; ++j) dst[k * NR + j] = g.b(p0 + k, j0 + j);
    for (int j = n; j < NR; ++j) dst[k * NR + j] = 0.0f;
  }
}

template <class Isa>
void run_sgemm(const GemmArgs& g, ThreadPool* pool) {
  constexpr int MR = Isa::kMR;
  constexpr int NR = Isa::kNR;
  const std::int64_t M = g.M, N = g.N, K = g.K;

  // Depth blocks of equal size (a short last block would waste a C pass).
  const std::int64_t nkb = ceil_div(K, Isa::kKC);
  const std::int64_t kcb = ceil_div(K, nkb);
  const std::int64_t msl = ceil_div(M, MR), nsl = ceil_div(N, NR);
  const std::int64_t Np = nsl * NR;

  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const std::int64_t threads = (pool && flops >= kMinParallelFlops) ? pool->size() : 1;

  // Column tiles: at most kNC wide; with several threads, about 4 tiles per thread so a
  // slow core takes fewer. Few columns (conv layers at 7x7) -> split rows as well.
  const std::int64_t max_tile = std::max<std::int64_t>(1, Isa::kNC / NR);
  std::int64_t tile_ns = std::min(nsl, max_tile);
  std::int64_t mtiles = 1;
  if (threads > 1) {
    tile_ns = std::clamp<std::int64_t>(ceil_div(nsl, 4 * threads), 1, max_tile);
    const std::int64_t ntiles = ceil_div(nsl, tile_ns);
    if (ntiles < 3 * threads) mtiles = std::min(msl, ceil_div(4 * threads, ntiles));
  }
  const std::int64_t ntiles = ceil_div(nsl, tile_ns);
  const std::int64_t tile_ms = ceil_div(msl, mtiles);
  mtiles = ceil_div(msl, tile_ms);
  const bool shared_b = mtiles > 1;

  auto run = [&](std::int64_t n, auto&& fn) {
    if (threads > 1 && n > 1)
      pool->parallel_for(n, fn);
    else
      fn(0, n);
  };

  // op(B) packed once up front when several row tiles would otherwise each pack it:
  // depth block p at p*kcb*Np, its sliver j at j*kc*NR within.
  float* bpk = nullptr;
  if (shared_b) {
    bpk = scratch(2, kcb * nkb * Np);
    run(nkb * nsl, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t p = t / nsl, j = t % nsl;
        const std::int64_t p0 = p * kcb, kc = std::min(kcb, K - p0);
        Isa::pack_b(g, p0, kc, j * NR, static_cast<int>(std::min<std::int64_t>(NR, N - j * NR)),
                    bpk + p * kcb * Np + j * kc * NR);
      }
    });
  }

  // Tiles of C. Per depth block: the tile's B block is packed (or taken from the shared
  // copy) and stays in L2; each A sliver is packed right before use into a small buffer
  // that stays in L1 while the kernel runs over the tile's B slivers.
  run(mtiles * ntiles, [&](std::int64_t begin, std::int64_t end) {
    float* abuf = scratch(0, Isa::kABuf);
    float* local_b = shared_b ? nullptr : scratch(1, kcb * tile_ns * NR);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t mt = t / ntiles, nt = t % ntiles;
      const std::int64_t s0 = mt * tile_ms, s1 = std::min(msl, s0 + tile_ms);
      const std::int64_t j0 = nt * tile_ns, j1 = std::min(nsl, j0 + tile_ns);
      for (std::int64_t p = 0; p < nkb; ++p) {
        const std::int64_t p0 = p * kcb, kc = std::min(kcb, K - p0);
        const float* bp;
        if (shared_b) {
          bp = bpk + p * kcb * Np + j0 * kc * NR;
        } else {
          for (std::int64_t j = j0; j < j1; ++j)
            Isa::pack_b(g, p0, kc, j * NR, static_cast<int>(std::min<std::int64_t>(NR, N - j * NR)),
                        local_b + (j - j0) * kc * NR);
          bp = local_b;
        }
        for (std::int64_t s = s0; s < s1; ++s) {
          const int m = static_cast<int>(std::min<std::int64_t>(MR, M - s * MR));
          Isa::pack_a(g, s * MR, m, p0, kc, abuf);
          float* crow = g.C + s * MR * g.ldc;
          for (std::int64_t j = j0; j < j1; ++j) {
            const int n = static_cast<int>(std::min<std::int64_t>(NR, N - j * NR));
            Isa::kernel(g, kc, abuf, bp + (j - j0) * kc * NR, crow + j * NR, m, n, p == 0);
          }
        }
      }
    }
  });
}

}  // namespace convgraph::cpu::sgemm_detail
