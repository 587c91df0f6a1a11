// cuda.corrmm: im2col / col2im (conv_corrmm.cu) + cuBLAS strided-batched GEMM over
// groups, for all three directions. The step sequence is corrmm_run (conv_drivers.hpp).
#include <climits>
#include <memory>

#include "backends/cuda/conv_drivers.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/registration.hpp"
#include "convgraph/backends/cuda.hpp"
#include "backends/cuda/conv_cuda.hpp"

namespace convgraph::cuda {

namespace {

constexpr const char* kCorrmmName = "cuda.corrmm";

// cuBLAS's strided-batched GEMM for float and double under one name.
cublasStatus_t cublas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float* a, int lda, long long sa, const float* b, int ldb, long long sb,
                           float beta, float* c, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, batch);
}
cublasStatus_t cublas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           double alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                           long long sb, double beta, double* c, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc, batch);
}

/// The driver's steps on the GPU: kernels on `stream`, cuBLAS on its handle for `stream`.
template <class T>
struct GpuCorrOps {
  cudaStream_t stream;
  cublasHandle_t handle;
  void im2col(const T* x, T* col, const kernels::ColGeometry& g) { kernels::im2col(x, col, g, stream); }
  void col2im(const T* col, T* x, const kernels::ColGeometry& g) { kernels::col2im(col, x, g, stream); }
  void gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, long long sa, const T* b, int ldb,
            long long sb, T beta, T* c, int ldc, long long sc, int batch) {
    CG_CUBLAS_CHECK(cublas_gemm(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, alpha,
                               a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch));
  }
};

template <class T>
void run_corrmm(const ConvProblem& p, const ConvTensors& t, T* col, cudaStream_t stream) {
  GpuCorrOps<T> ops{stream, cublas_handle(stream)};
  corrmm_run<T>(p, static_cast<T*>(t.x), static_cast<T*>(t.w), static_cast<T*>(t.y), col, ops);
}

class CorrMM final : public ConvAlgorithm {
 public:
  std::string name() const override { return kCorrmmName; }
  DeviceKind device() const override { return DeviceKind::cuda; }
  std::vector<std::string> tags() const override { return {"conv_gemm", "fast_run", "fast_compile"}; }

  Status applicable(const ConvProblem& p) const override {
    if (!cuda_info().available) return Status::no(msg(kCorrmmName, ": no usable GPU: ", cuda_info().reason));
    if (Status s = corrmm_static_check(p); !s) return s;
    if (std::string why; !own_kernels_loadable(&why)) return Status::no(msg(kCorrmmName, ": ", why));
    const std::size_t ws = corrmm_workspace_bytes(p);
    if (ws > p.workspace_limit)
      return Status::no(msg(kCorrmmName, ": needs ", ws, " bytes of workspace (one sample's columns), the limit is ",
                            p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override { return corrmm_workspace_bytes(p); }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    require_gpu(kCorrmmName);
    if (Status s = corrmm_static_check(p); !s) throw ValueError(msg("cannot run ", p.key(), ": ", s.reason()));
    check_workspace(kCorrmmName, ctx, corrmm_workspace_bytes(p));
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
