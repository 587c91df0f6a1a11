// The cuDNN algorithm table and its documented static limits (GPU-free).
#include "backends/cuda/cudnn_algorithms.hpp"

#include <array>

namespace convgraph::cuda {

std::string CudnnAlgoInfo::name() const { return msg("cuda.cudnn.", direction_name(direction), ".", suffix); }

CudnnDataConfig cudnn_data_config(const CudnnConvPlan& plan) {
  switch (plan.data_type) {
    case CudnnDataType::float16: return plan.compute_type == CudnnDataType::float16 ? kTrueHalf : kPseudoHalf;
    case CudnnDataType::float32: return kFloat;
    case CudnnDataType::float64: return kDouble;
    case CudnnDataType::bfloat16: return kBfloat16;
  }
  return kFloat;
}

namespace {

using D = ConvDirection;
constexpr std::uint8_t kNoTrueHalf = kAllConfigs & ~kTrueHalf;
constexpr std::uint8_t kFloatOrPseudoHalf = kFloat | kPseudoHalf;
constexpr int k3x3 = 1 << 3;
constexpr int k5x5 = 1 << 5;

// Enumerator values are cuDNN 9's (cudnn_ops_v9.h); conv_cudnn.cpp static_asserts them.
// Limits: cuDNN's "supported configurations" tables as summarised in docs/SEMANTICS.md 4.5
// (FFT: 2D, stride 1, in + 2 pad <= 256, filter > pad; FFT_TILING: filter <= 32 (2D) /
// 16 (3D), filter > pad; WINOGRAD: 3x3; WINOGRAD_NONFUSED: 3x3 or 5x5, 5x5 not true-half;
// 3D: fwd implicit/precomp/fft_tiling, bwd data algo_0/1/fft_tiling, bwd filter
// algo_0/1/3). Every FFT and Winograd variant needs dilation 1.
// Within a direction the order is the default priority: robust general algorithms first.
CudnnAlgoInfo make(D dir, int algo, std::string_view suffix) {
  CudnnAlgoInfo a{};
  a.direction = dir;
  a.algo = algo;
  a.suffix = suffix;
  return a;
}

std::array<CudnnAlgoInfo, 21> build_table() {
  std::array<CudnnAlgoInfo, 21> t{};
  std::size_t i = 0;
  auto add = [&](CudnnAlgoInfo a) { t[i++] = a; };
  auto fft = [](CudnnAlgoInfo a) {
    a.dims = kDims2;
    a.configs = kFloatOrPseudoHalf;
    a.stride1 = a.dilation1 = a.filter_gt_pad = true;
    a.max_padded_in = 256;
    return a;
  };
  auto fft_tiling = [](CudnnAlgoInfo a, std::uint8_t dims) {
    a.dims = dims;
    a.configs = kFloatOrPseudoHalf;
    a.stride1 = a.dilation1 = a.filter_gt_pad = true;
    a.max_filter_2d = 32;
    a.max_filter_3d = 16;
    return a;
  };
  auto winograd = [](CudnnAlgoInfo a, int filters, std::uint8_t configs) {
    a.dims = kDims2;
    a.configs = configs;
    a.stride1 = a.dilation1 = true;
    a.square_filters = filters;
    return a;
  };
  auto nondet = [](CudnnAlgoInfo a) {
    a.deterministic = false;
    return a;
  };
  auto unimplemented = [](CudnnAlgoInfo a) {
    a.implemented = false;
    return a;
  };

  // forward (cudnnConvolutionFwdAlgo_t)
  CudnnAlgoInfo precomp = make(D::forward, 1, "implicit_precomp_gemm");
  precomp.configs_3d = kNoTrueHalf;
  add(precomp);
  CudnnAlgoInfo implicit = make(D::forward, 0, "implicit_gemm");
  implicit.configs = kNoTrueHalf;
  add(implicit);
  CudnnAlgoInfo gemm = make(D::forward, 2, "gemm");
  gemm.dims = kDims2;
  gemm.configs = kNoTrueHalf;
  add(gemm);
  add(winograd(make(D::forward, 6, "winograd"), k3x3, kFloatOrPseudoHalf));
  CudnnAlgoInfo wnf = winograd(make(D::forward, 7, "winograd_nonfused"), k3x3 | k5x5,
                               kTrueHalf | kPseudoHalf | kFloat);
  wnf.true_half_excluded_filters = k5x5;
  add(wnf);
  add(fft_tiling(make(D::forward, 5, "fft_tiling"), kDims2 | kDims3));
  add(fft(make(D::forward, 4, "fft")));
  add(unimplemented(make(D::forward, 3, "direct")));

  // backward data (cudnnConvolutionBwdDataAlgo_t)
  add(make(D::grad_inputs, 1, "algo_1"));
  add(nondet(make(D::grad_inputs, 0, "algo_0")));
  add(winograd(make(D::grad_inputs, 4, "winograd"), k3x3, kFloatOrPseudoHalf));
  add(winograd(make(D::grad_inputs, 5, "winograd_nonfused"), k3x3 | k5x5, kFloatOrPseudoHalf));
  add(fft_tiling(make(D::grad_inputs, 3, "fft_tiling"), kDims2 | kDims3));
  add(fft(make(D::grad_inputs, 2, "fft")));

  // backward filter (cudnnConvolutionBwdFilterAlgo_t)
  add(make(D::grad_weights, 1, "algo_1"));
  add(nondet(make(D::grad_weights, 0, "algo_0")));
  add(nondet(make(D::grad_weights, 3, "algo_3")));
  add(winograd(make(D::grad_weights, 5, "winograd_nonfused"), k3x3 | k5x5, kFloatOrPseudoHalf));
  add(fft_tiling(make(D::grad_weights, 6, "fft_tiling"), kDims2));
  add(fft(make(D::grad_weights, 2, "fft")));
  add(unimplemented(make(D::grad_weights, 4, "winograd")));
  return t;
}

std::string config_name(CudnnDataConfig c) {
  switch (c) {
    case kTrueHalf: return "float16 data with float16 accumulation";
    case kPseudoHalf: return "float16 data with float32 accumulation";
    case kFloat: return "float32";
    case kDouble: return "float64";
    case kBfloat16: return "bfloat16";
    default: return "?";
  }
}

}  // namespace

std::span<const CudnnAlgoInfo> cudnn_algorithm_table() {
  static const std::array<CudnnAlgoInfo, 21> table = build_table();
  return table;
}

Status cudnn_static_check(const CudnnAlgoInfo& a, const ConvProblem& p, const CudnnConvPlan& plan) {
  const std::string who = a.name();
  if (p.direction != a.direction)
    return Status::no(msg(who, " computes ", direction_name(a.direction), ", not ", direction_name(p.direction)));
  if (!a.implemented) return Status::no(msg(who, ": cuDNN lists this algorithm but does not implement it"));
  const bool is3d = plan.spatial_dims == 3;
  if (!(a.dims & (is3d ? kDims3 : kDims2)))
    return Status::no(msg(who, ": not available for ", p.ndim, "D convolutions"));
  const CudnnDataConfig cfg = cudnn_data_config(plan);
  if (cfg == kTrueHalf && p.direction != ConvDirection::forward)
    return Status::no(msg(who, ": float16 accumulation is refused for backward convolutions (inaccurate); "
                               "use compute=float32"));
  if (!(a.configs & cfg) || (is3d && !(a.configs_3d & cfg)))
    return Status::no(msg(who, ": ", config_name(cfg), " is not a supported data configuration",
                          is3d ? " in 3D" : ""));
  const int n = plan.spatial_dims;
  const std::size_t wdim = 2;  // first spatial dim in plan.w / plan.x
  for (int s = 0; s < n; ++s) {
    const auto us = static_cast<std::size_t>(s);
    const int k = plan.w.dims[wdim + us];
    if (a.stride1 && plan.stride[us] != 1) return Status::no(msg(who, ": needs stride 1 on every axis"));
    if (a.dilation1 && plan.dilation[us] != 1) return Status::no(msg(who, ": needs dilation 1 on every axis"));
    const int max_filter = is3d ? a.max_filter_3d : a.max_filter_2d;
    if (max_filter && k > max_filter)
      return Status::no(msg(who, ": filter extent ", k, " exceeds ", max_filter));
    if (a.max_padded_in && plan.x.dims[wdim + us] + 2 * plan.pad[us] > a.max_padded_in)
      return Status::no(msg(who, ": input + 2 * padding = ", plan.x.dims[wdim + us] + 2 * plan.pad[us],
                            " exceeds ", a.max_padded_in));
    if (a.filter_gt_pad && k <= plan.pad[us])
      return Status::no(msg(who, ": filter extent ", k, " must exceed the padding ", plan.pad[us]));
  }
  if (a.square_filters) {
    const int kh = plan.w.dims[2], kw = plan.w.dims[3];
    const bool square_ok = kh == kw && kh < 31 && ((a.square_filters >> kh) & 1);
    if (!square_ok) return Status::no(msg(who, ": filter ", kh, "x", kw, " is not one of its supported sizes"));
    if (cfg == kTrueHalf && kh < 31 && ((a.true_half_excluded_filters >> kh) & 1))
      return Status::no(msg(who, ": ", kh, "x", kw, " filters need float32 accumulation"));
  }
  return Status::ok();
}

}  // namespace convgraph::cuda
