// cuda.cudnn.<direction>.<algorithm>: one ConvAlgorithm per cuDNN legacy algorithm.
// applicable() = GPU present + plan (cudnn_plan.hpp) + documented limits
// (cudnn_algorithms.hpp) + cuDNN's enumeration (cudnnGetConvolution*Algorithm_v7 lists
// the algorithm with SUCCESS) + its workspace query. NOT_SUPPORTED anywhere, the
// convolution call included, is a decline that is remembered; a dead context is thrown.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backends/cuda/conv_drivers.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/cudnn_descriptors.hpp"
#include "backends/cuda/cudnn_epilogue.hpp"
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

/// cuDNN's verdicts by key, kept for the process: asking costs up to a millisecond and
/// the meta-optimizer asks repeatedly. Only verdicts are kept, never a failure to ask.
class VerdictCache {
 public:
  std::optional<Query> find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& key, const Query& q) {
    std::lock_guard lock(mu_);
    map_[key] = q;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, Query> map_;
};

VerdictCache& verdicts() {
  static auto* c = new VerdictCache;  // leaked, like every cache used from kernels
  return *c;
}

std::string verdict_key(const CudnnAlgoInfo& a, const CudnnConvPlan& plan) { return a.name() + "|" + plan.to_string(); }

/// A status that is cuDNN's answer about the problem (kept), not a failure to answer.
bool is_verdict(cudnnStatus_t st) {
  return cudnn_not_supported(st) || CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM;
}

std::string status_text(cudnnStatus_t st) {
  const std::string detail = cudnn_error_detail(st);
  return msg(cudnnGetErrorString(st), detail.empty() ? "" : ": ", detail);
}

/// The algorithms cudnnGetConvolution*Algorithm_v7 lists for the plan's direction, each
/// with its best status (SUCCESS when any of its entries, e.g. per math type, succeeds).
template <class Perf>
std::map<int, cudnnStatus_t> listing(const std::vector<Perf>& perf, int returned) {
  std::map<int, cudnnStatus_t> out;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[static_cast<std::size_t>(i)];
    auto [it, fresh] = out.emplace(static_cast<int>(r.algo), r.status);
    if (!fresh && r.status == CUDNN_STATUS_SUCCESS) it->second = r.status;
  }
  return out;
}

/// Throws DeviceError when cuDNN cannot answer; NOT_SUPPORTED / BAD_PARAM answers come
/// back as an empty listing.
std::map<int, cudnnStatus_t> enumerate(ConvDirection dir, cudnnHandle_t h, const CudnnDescriptors& d) {
  int max = 0, returned = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (dir) {
    case ConvDirection::forward: {
      CG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max, 1)));
      st = cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), max, &returned,
                                                  perf.data());
      if (st == CUDNN_STATUS_SUCCESS) return listing(perf, returned);
      break;
    }
    case ConvDirection::grad_inputs: {
      CG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max, 1)));
      st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), max,
                                                       &returned, perf.data());
      if (st == CUDNN_STATUS_SUCCESS) return listing(perf, returned);
      break;
    }
    case ConvDirection::grad_weights: {
      CG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max, 1)));
      st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), max,
                                                         &returned, perf.data());
      if (st == CUDNN_STATUS_SUCCESS) return listing(perf, returned);
      break;
    }
  }
  if (is_verdict(st)) return {};
  CG_CUDNN_CHECK(st);
  return {};
}

cudnnStatus_t workspace_size(const CudnnAlgoInfo& a, cudnnHandle_t h, const CudnnDescriptors& d, std::size_t* bytes) {
  switch (a.direction) {
    case ConvDirection::forward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), bytes);
    case ConvDirection::grad_inputs:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), bytes);
    case ConvDirection::grad_weights:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                                                            bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

/// cuDNN's answer for one (algorithm, plan): the algorithm must be listed with SUCCESS by
/// the _v7 query (cuDNN's enumeration of what it can run here) and its workspace query
/// must succeed. A dead context (DeviceContextError) propagates: it is no answer at all.
Query query_workspace(const CudnnAlgoInfo& a, const CudnnConvPlan& plan) {
  const std::string key = verdict_key(a, plan);
  if (std::optional<Query> q = verdicts().find(key)) return *q;
  Query q;
  try {
    const CudnnDescriptors d(plan);
    const cudnnHandle_t h = cudnn_handle(as_stream(nullptr));
    const std::map<int, cudnnStatus_t> listed = enumerate(a.direction, h, d);
    const auto it = listed.find(a.algo);
    if (it == listed.end()) {
      q.reason = msg(a.name(), ": cuDNN's algorithm query (_v7) does not list it for this problem");
    } else if (it->second != CUDNN_STATUS_SUCCESS) {
      q.reason = msg(a.name(), ": cuDNN's algorithm query (_v7) lists it as ", cudnnGetErrorString(it->second));
    } else {
      const cudnnStatus_t st = workspace_size(a, h, d, &q.bytes);
      if (st == CUDNN_STATUS_SUCCESS) {
        q.ok = true;
      } else if (is_verdict(st)) {
        q.reason = msg(a.name(), ": cuDNN ", cudnn_not_supported(st) ? "does not support" : "rejects",
                       " this problem (", status_text(st), ")");
      } else {
        CG_CUDNN_CHECK(st);  // throws: DeviceContextError on a dead context
      }
    }
  } catch (const DeviceContextError&) {
    throw;
  } catch (const Error& e) {
    // Descriptor or handle trouble (e.g. out of memory) may pass: answer, do not keep.
    q.reason = msg(a.name(), ": ", e.what());
    return q;
  }
  verdicts().put(key, q);
  return q;
}

/// A NOT_SUPPORTED status from the convolution call itself: kept as the verdict, so
/// applicable() declines the problem from now on, and thrown.
[[noreturn]] void decline_at_run_time(const CudnnAlgoInfo& a, const CudnnConvPlan& plan, const ConvProblem& p,
                                      cudnnStatus_t st) {
  Query q;
  q.reason = msg(a.name(), ": cuDNN declined this problem at run time (", status_text(st), ")");
  verdicts().put(verdict_key(a, plan), q);
  throw DeviceError(msg(q.reason, " for ", p.key(), "; applicable() declines it from now on"));
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
  /// Forward applies the epilogue itself: in cuDNN's fused call where it applies, else in
  /// cuDNN tensor ops right after the convolution on the same stream.
  bool fuses_epilogue() const override { return info_.direction == ConvDirection::forward; }

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
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (p.direction) {
      case ConvDirection::forward:
        if (fused_call_applies(t.epilogue)) {
          st = run_fused_forward(h, plan, d, x, t, cudnn_ws, q.bytes, alpha, beta);
          if (st == CUDNN_STATUS_SUCCESS) return;  // conv, bias, residual and relu in one call
          if (!cudnn_not_supported(st)) CG_CUDNN_CHECK(st);
        }
        st = cudnnConvolutionForward(h, alpha, d.x.get(), x, d.w.get(), t.w, d.conv.get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(info_.algo), cudnn_ws, q.bytes, beta,
                                     d.y.get(), t.y);
        if (st == CUDNN_STATUS_SUCCESS) apply_epilogue_cudnn(h, plan, d.y.get(), t.y, t.epilogue);
        break;
      case ConvDirection::grad_inputs:
        st = cudnnConvolutionBackwardData(h, alpha, d.w.get(), t.w, d.y.get(), t.y, d.conv.get(),
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(info_.algo), cudnn_ws, q.bytes,
                                          beta, d.x.get(), x);
        break;
      case ConvDirection::grad_weights:
        st = cudnnConvolutionBackwardFilter(h, alpha, d.x.get(), x, d.y.get(), t.y, d.conv.get(),
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(info_.algo), cudnn_ws,
                                            q.bytes, beta, d.w.get(), t.w);
        break;
    }
    // The _v7 listing and the workspace query are heuristics: the call may still refuse.
    if (cudnn_not_supported(st)) decline_at_run_time(info_, plan, p, st);
    CG_CUDNN_CHECK(st);
    if (pad && p.direction == ConvDirection::grad_inputs)
      kernels::gather_nd(elem_of(p.dtype), x, t.x, cudnn_pad_spec(p, plan.explicit_pad, true), 1.0, stream);
  }

 private:
  Status prepare(const ConvProblem& p, CudnnConvPlan& plan) const {
    if (p.direction != info_.direction)
      return Status::no(msg(name_, " computes ", direction_name(info_.direction), ", not ", direction_name(p.direction)));
    if (Status s = plan_cudnn_conv(p, plan); !s) return Status::no(msg(name_, ": ", s.reason()));
    return cudnn_static_check(info_, p, plan);
  }

  /// cudnnConvolutionBiasActivationForward computes act(conv(x, w) + alpha2 z + bias): it
  /// needs a bias, and cuDNN documents it for every algorithm only with relu (identity is
  /// IMPLICIT_PRECOMP_GEMM only), so the fused call is made for IMPLICIT_PRECOMP_GEMM with a
  /// bias; anything it declines at run time falls back to the separate epilogue pass.
  /// The fused call adds the residual before the bias (the separate pass after it): the
  /// results differ by rounding only.
  bool fused_call_applies(const ConvEpilogue& ep) const {
    return ep.bias && info_.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  }

  static cudnnStatus_t run_fused_forward(cudnnHandle_t h, const CudnnConvPlan& plan, const CudnnDescriptors& d,
                                         const void* x, const ConvTensors& t, void* ws, std::size_t ws_bytes,
                                         const void* one, const void* zero) {
    const TensorDesc bias(epilogue_bias_shape(plan.y), plan.data_type);
    const ActivationDesc act(t.epilogue.activation == ConvActivation::relu ? CUDNN_ACTIVATION_RELU
                                                                           : CUDNN_ACTIVATION_IDENTITY);
    // Without a residual z is y itself, scaled by 0 (cuDNN does not read it then).
    const void* z = t.epilogue.residual ? t.epilogue.residual : t.y;
    return cudnnConvolutionBiasActivationForward(
        h, one, d.x.get(), x, d.w.get(), t.w, d.conv.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ws,
        ws_bytes, t.epilogue.residual ? one : zero, d.y.get(), z, bias.get(), t.epilogue.bias, act.get(), d.y.get(),
        t.y);
  }

  CudnnAlgoInfo info_;
  std::string name_;
};

}  // namespace

void register_cudnn_algorithms(AlgorithmRegistry& r) {
  for (const CudnnAlgoInfo& a : cudnn_algorithm_table()) r.add(std::make_shared<CudnnConvAlgorithm>(a));
}

}  // namespace convgraph::cuda
