// cuda.corrmm: im2col / col2im (conv_corrmm.cu) + cuBLAS strided-batched GEMM over
// groups, for all three directions (plan in include/convgraph/backends/cuda/conv_cuda.hpp).
#include <climits>
#include <memory>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/registration.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/cuda/conv_cuda.hpp"

namespace convgraph::cuda {

namespace {
constexpr const char* kName = "cuda.corrmm";
}

Status corrmm_static_check(const ConvProblem& p) {
  const bool f32 = p.dtype == DType::float32 && p.compute == DType::float32;
  const bool f64 = p.dtype == DType::float64 && p.compute == DType::float64;
  if (!f32 && !f64)
    return Status::no(msg(kName, ": runs float32/float32 and float64/float64 only, got ", dtype_name(p.dtype), "/",
                          dtype_name(p.compute)));
  if (p.ndim < 1 || p.ndim > 3) return Status::no(msg(kName, ": ", p.ndim, " spatial dimensions (1-3 supported)"));
  // cuBLAS's GEMM sizes and leading dimensions are 32-bit ints.
  const std::int64_t rows = p.Cg() * p.kernel_numel();
  for (std::int64_t v : {p.Kg(), rows, p.out_numel(), p.G})
    if (v > INT_MAX) return Status::no(msg(kName, ": a GEMM dimension of ", p.key(), " exceeds 2^31 - 1"));
  return Status::ok();
}

std::size_t corrmm_workspace_bytes(const ConvProblem& p) {
  return static_cast<std::size_t>(p.C * p.kernel_numel() * p.out_numel()) * dtype_size(p.dtype);
}

namespace {

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const float* a, int lda, long long sa, const float* b, int ldb, long long sb, float beta, float* c,
                    int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, batch);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
                    const double* a, int lda, long long sa, const double* b, int ldb, long long sb, double beta,
                    double* c, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, batch);
}

// Row-major operands are passed to column-major cuBLAS as their transposes, so each
// call below computes the row-major product written in its comment.
template <class T>
void run_corrmm(const ConvProblem& p, const ConvTensors& t, T* col, cudaStream_t stream) {
  kernels::ColGeometry geo;
  geo.channels = p.C;
  for (int a = 0; a < 3; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const bool used = a < p.ndim;
    geo.in[a] = used ? p.in[ua] : 1;
    geo.kernel[a] = used ? p.kernel[ua] : 1;
    geo.out[a] = used ? p.out[ua] : 1;
    geo.stride[a] = used ? p.stride[ua] : 1;
    geo.dilation[a] = used ? p.dilation[ua] : 1;
    geo.pad[a] = used ? p.pad_pre[ua] : 0;
  }
  geo.flip = p.flip;
  const cublasHandle_t h = cublas_handle(stream);
  const int P = static_cast<int>(p.out_numel());
  const int Kg = static_cast<int>(p.Kg());
  const int R = static_cast<int>(p.Cg() * p.kernel_numel());  // rows of one group's col block
  const int G = static_cast<int>(p.G);
  const long long col_g = static_cast<long long>(R) * P, w_g = static_cast<long long>(Kg) * R,
                  y_g = static_cast<long long>(Kg) * P;
  const long long x_n = p.C * p.in_numel(), y_n = p.K * p.out_numel();
  T* x = static_cast<T*>(t.x);
  T* w = static_cast<T*>(t.w);
  T* y = static_cast<T*>(t.y);
  for (std::int64_t n = 0; n < p.N; ++n) {
    switch (p.direction) {
      case ConvDirection::forward:  // y[n]_g (Kg x P) = W_g (Kg x R) * col_g (R x P)
        kernels::im2col(x + n * x_n, col, geo, stream);
        CG_CUBLAS_CHECK(gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, P, Kg, R, T(1), col, P, col_g, w, R, w_g, T(0),
                             y + n * y_n, P, y_g, G));
        break;
      case ConvDirection::grad_inputs:  // col_g (R x P) = W_g^T (R x Kg) * dy[n]_g (Kg x P)
        CG_CUBLAS_CHECK(gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, P, R, Kg, T(1), y + n * y_n, P, y_g, w, R, w_g, T(0), col,
                             P, col_g, G));
        kernels::col2im(col, x + n * x_n, geo, stream);
        break;
      case ConvDirection::grad_weights:  // dW_g (Kg x R) += dy[n]_g (Kg x P) * col_g^T (P x R)
        kernels::im2col(x + n * x_n, col, geo, stream);
        CG_CUBLAS_CHECK(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, R, Kg, P, T(1), col, P, col_g, y + n * y_n, P, y_g,
                             n == 0 ? T(0) : T(1), w, R, w_g, G));
        break;
    }
  }
}

class CorrMM final : public ConvAlgorithm {
 public:
  std::string name() const override { return kName; }
  DeviceKind device() const override { return DeviceKind::cuda; }
  std::vector<std::string> tags() const override { return {"conv_gemm", "fast_run", "fast_compile"}; }

  Status applicable(const ConvProblem& p) const override {
    if (!cuda_info().available) return Status::no(msg(kName, ": no usable GPU: ", cuda_info().reason));
    if (Status s = corrmm_static_check(p); !s) return s;
    if (std::string why; !own_kernels_loadable(&why)) return Status::no(msg(kName, ": ", why));
    const std::size_t ws = corrmm_workspace_bytes(p);
    if (ws > p.workspace_limit)
      return Status::no(msg(kName, ": needs ", ws, " bytes of workspace (one sample's columns), the limit is ",
                            p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override { return corrmm_workspace_bytes(p); }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    require_gpu(kName);
    if (Status s = corrmm_static_check(p); !s) throw ValueError(msg("cannot run ", p.key(), ": ", s.reason()));
    check_workspace(kName, ctx, corrmm_workspace_bytes(p));
    const cudaStream_t stream = as_stream(ctx.stream);
    if (p.dtype == DType::float64)
      run_corrmm<double>(p, t, static_cast<double*>(ctx.workspace), stream);
    else
      run_corrmm<float>(p, t, static_cast<float*>(ctx.workspace), stream);
  }
};

}  // namespace

void register_corrmm_algorithm(AlgorithmRegistry& r) { r.add(std::make_shared<CorrMM>()); }

}  // namespace convgraph::cuda
