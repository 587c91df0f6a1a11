// cuda.cudnn.<direction>.<algorithm>: one ConvAlgorithm per cuDNN legacy algorithm.
// applicable() = GPU present + plan (cudnn_plan.hpp) + documented limits
// (cudnn_algorithms.hpp) + cuDNN's own workspace query, whose NOT_SUPPORTED is a decline.
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/conv_drivers.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cudnn_descriptors.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/registration.hpp"
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"
#include "backends/cuda/cudnn_algorithms.hpp"

namespace convgraph::cuda {

// The table's enumerator values and counts are cuDNN 9's.
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM == 0 && CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM == 1 &&
              CUDNN_CONVOLUTION_FWD_ALGO_GEMM == 2 && CUDNN_CONVOLUTION_FWD_ALGO_DIRECT == 3 &&
              CUDNN_CONVOLUTION_FWD_ALGO_FFT == 4 && CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING == 5 &&
              CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD == 6 && CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED == 7 &&
              CUDNN_CONVOLUTION_FWD_ALGO_COUNT == 8);
static_assert(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 == 0 && CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 == 1 &&
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT == 2 && CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING == 3 &&
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD == 4 && CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED == 5 &&
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT == 6);
static_assert(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 == 0 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 == 1 &&
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT == 2 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 == 3 &&
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD == 4 &&
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED == 5 &&
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING == 6 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT == 7);

namespace {

struct Query {
  bool ok = false;
  std::size_t bytes = 0;  ///< cuDNN's own workspace
  std::string reason;
};

/// cuDNN's workspace answer for one (algorithm, plan), cached: the query can cost a
/// fraction of a millisecond and the meta-optimizer asks repeatedly. cuDNN's verdicts
/// are cached, failures to ask are not.
Query query_workspace(const CudnnAlgoInfo& a, const CudnnConvPlan& plan) {
  static std::mutex mu;
  static std::unordered_map<std::string, Query> cache;
  const std::string key = a.name() + "|" + plan.to_string();
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Query q;
  try {
    const CudnnDescriptors d(plan);
    const cudnnHandle_t h = cudnn_handle(as_stream(nullptr));
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (a.direction) {
      case ConvDirection::forward:
        st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), &q.bytes);
        break;
      case ConvDirection::grad_inputs:
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                                          &q.bytes);
        break;
      case ConvDirection::grad_weights:
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                                                            &q.bytes);
        break;
    }
    if (st == CUDNN_STATUS_SUCCESS) {
      q.ok = true;
    } else {
      const std::string detail = cudnn_error_detail(st);
      q.reason = msg(a.name(), ": cuDNN ", cudnn_not_supported(st) ? "does not support" : "rejects",
                     " this problem (", cudnnGetErrorString(st), detail.empty() ? "" : ": ", detail, ")");
    }
  } catch (const Error& e) {
    // Descriptor or handle trouble (e.g. out of memory) may pass: answer, do not cache.
    q.reason = msg(a.name(), ": ", e.what());
    return q;
  }
  std::lock_guard lock(mu);
  cache.emplace(key, q);
  return q;
}

kernels::Elem elem_of(DType t) {
  return t == DType::float64 ? kernels::Elem::f64 : t == DType::float32 ? kernels::Elem::f32 : kernels::Elem::raw16;
}

class CudnnConvAlgorithm final : public ConvAlgorithm {
 public:
  explicit CudnnConvAlgorithm(const CudnnAlgoInfo& info) : info_(info), name_(info.name()) {}

  std::string name() const override { return name_; }
  DeviceKind device() const override { return DeviceKind::cuda; }
  std::vector<std::string> tags() const override { return {"conv_dnn", "cudnn", "fast_run", "fast_compile"}; }

  Status applicable(const ConvProblem& p) const override {
    if (!cuda_info().available) return Status::no(msg(name_, ": no usable GPU: ", cuda_info().reason));
    CudnnConvPlan plan;
    if (Status s = prepare(p, plan); !s) return s;
    const Query q = query_workspace(info_, plan);
    if (!q.ok) return Status::no(q.reason);
    const std::size_t total = plan.cudnn_workspace_offset() + q.bytes;
    if (total > p.workspace_limit)
      return Status::no(msg(name_, ": needs ", total, " bytes of workspace, the limit is ", p.workspace_limit));
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    CudnnConvPlan plan;
    if (!cuda_info().available || !prepare(p, plan)) return 0;
    const Query q = query_workspace(info_, plan);
    return q.ok ? plan.cudnn_workspace_offset() + q.bytes : 0;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    require_gpu(name_.c_str());
    CudnnConvPlan plan;
    if (Status s = prepare(p, plan); !s) throw ValueError(msg(name_, ": cannot run ", p.key(), ": ", s.reason()));
    const Query q = query_workspace(info_, plan);
    if (!q.ok) throw ValueError(msg(name_, ": cannot run ", p.key(), ": ", q.reason));
    const std::size_t offset = plan.cudnn_workspace_offset();
    check_workspace(name_, ctx, offset + q.bytes);
    const cudaStream_t stream = as_stream(ctx.stream);
    const cudnnHandle_t h = cudnn_handle(stream);
    const CudnnDescriptors d(plan);
    char* ws = static_cast<char*>(ctx.workspace);
    void* cudnn_ws = q.bytes ? ws + offset : nullptr;
    const bool pad = plan.explicit_pad.needed;
    void* x = t.x;
    if (pad) {
      x = ws;  // xp: the zero-padded input (forward, grad_weights) or dxp (grad_inputs)
      if (p.direction != ConvDirection::grad_inputs)
        kernels::gather_nd(elem_of(p.dtype), t.x, x, cudnn_pad_spec(p, plan.explicit_pad, false), 1.0, stream);
    }
    // alpha/beta are double for double data and float otherwise (cuDNN's scaling rule);
    // beta = 0 means the output is overwritten without being read.
    const double one_d = 1.0, zero_d = 0.0;
    const float one_f = 1.f, zero_f = 0.f;
    const bool dbl = p.dtype == DType::float64;
    const void* alpha = dbl ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
    switch (p.direction) {
      case ConvDirection::forward:
        CG_CUDNN_CHECK(cudnnConvolutionForward(h, alpha, d.x.get(), x, d.w.get(), t.w, d.conv.get(),
                                               static_cast<cudnnConvolutionFwdAlgo_t>(info_.algo), cudnn_ws,
                                               q.bytes, beta, d.y.get(), t.y));
        break;
      case ConvDirection::grad_inputs:
        CG_CUDNN_CHECK(cudnnConvolutionBackwardData(h, alpha, d.w.get(), t.w, d.y.get(), t.y, d.conv.get(),
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(info_.algo),
                                                    cudnn_ws, q.bytes, beta, d.x.get(), x));
        if (pad) kernels::gather_nd(elem_of(p.dtype), x, t.x, cudnn_pad_spec(p, plan.explicit_pad, true), 1.0, stream);
        break;
      case ConvDirection::grad_weights:
        CG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, alpha, d.x.get(), x, d.y.get(), t.y, d.conv.get(),
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(info_.algo),
                                                      cudnn_ws, q.bytes, beta, d.w.get(), t.w));
        break;
    }
  }

 private:
  Status prepare(const ConvProblem& p, CudnnConvPlan& plan) const {
    if (p.direction != info_.direction)
      return Status::no(msg(name_, " computes ", direction_name(info_.direction), ", not ", direction_name(p.direction)));
    if (Status s = plan_cudnn_conv(p, plan); !s) return Status::no(msg(name_, ": ", s.reason()));
    return cudnn_static_check(info_, p, plan);
  }

  CudnnAlgoInfo info_;
  std::string name_;
};

}  // namespace

void register_cudnn_algorithms(AlgorithmRegistry& r) {
  for (const CudnnAlgoInfo& a : cudnn_algorithm_table()) r.add(std::make_shared<CudnnConvAlgorithm>(a));
}

}  // namespace convgraph::cuda
