// The only translation unit that includes Eigen (the build links Eigen3::Eigen privately).
#include "backends/cpu/gemm.hpp"

#include "backends/cpu/sgemm.hpp"

// GCC 12's AVX-512 intrinsic headers, pulled in by Eigen, raise false -Wuninitialized
// warnings (GCC bug 105593); silence them for the include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

namespace convgraph::cpu {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void gemm_eigen(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
                std::int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  MutMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  if (K <= 0) {
    // An empty sum: C = beta * C, without reading C when beta is zero.
    if (beta == T(0)) c.setZero();
    else c *= beta;
    return;
  }
  const ConstMap<T> a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  const ConstMap<T> b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  // Four explicit cases keep Eigen on its GEMM kernel with transposed views, no copies.
  auto product = [&](const auto& lhs, const auto& rhs) {
    if (beta == T(0)) {
      c.noalias() = alpha * (lhs * rhs);
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * (lhs * rhs);
    }
  };
  if (!trans_a && !trans_b) product(a, b);
  else if (!trans_a && trans_b) product(a, b.transpose());
  else if (trans_a && !trans_b) product(a.transpose(), b);
  else product(a.transpose(), b.transpose());
}

}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
          std::int64_t ldc) {
  // convgraph's packed AVX-512/AVX2 sgemm (backends/cpu/sgemm.hpp); single-threaded here
  // because the callers already run one GEMM per pool thread.
  sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
          double* C, std::int64_t ldc) {
  gemm_eigen<double>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace convgraph::cpu
