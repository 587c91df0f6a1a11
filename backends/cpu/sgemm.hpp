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

/// Same, with an explicit CPU level (tests and benchmarks); throws ValueError if the CPU
/// cannot run it.
void sgemm_with_isa(CpuIsa isa, bool transA, bool transB, std::int64_t M, std::int64_t N,
                    std::int64_t K, float alpha, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float beta, float* C, std::int64_t ldc, ThreadPool* pool);

}  // namespace convgraph::cpu
