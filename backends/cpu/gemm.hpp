#pragma once
// Private to backends/cpu: the one dense matrix product every CPU convolution calls.
// Row-major, BLAS-like: C = alpha * op(A) * op(B) + beta * C, with op(A) M x K and op(B)
// K x N. lda/ldb/ldc are the row strides of A, B and C *as stored* (A is K x M when
// trans_a). beta == 0 never reads C, so C may hold garbage (NaN) on entry.
// Single-threaded: callers split the work across the thread pool themselves.
// Eigen stays inside gemm.cpp; no other file includes an Eigen header.
#include <cstdint>

namespace convgraph::cpu {

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
          std::int64_t ldc);

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
          double* C, std::int64_t ldc);

}  // namespace convgraph::cpu
