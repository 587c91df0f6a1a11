#pragma once
/// Every cuDNN 9 legacy convolution algorithm (cudnnConvolution{Fwd,BwdData,BwdFilter}
/// Algo_t) with the static limits its documentation states (docs/SEMANTICS.md 4.5). GPU-free:
/// the table and cudnn_static_check() run anywhere; at run time cuDNN's workspace query
/// has the last word (it returns NOT_SUPPORTED for what the table lets through).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "convgraph/conv/conv_problem.hpp"
#include "backends/cuda/cudnn_plan.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph::cuda {

/// Data configurations in cuDNN's documentation terms.
enum CudnnDataConfig : std::uint8_t {
  kTrueHalf = 1,    ///< float16 data, float16 compute
  kPseudoHalf = 2,  ///< float16 data, float32 compute
  kFloat = 4,       ///< float32 / float32
  kDouble = 8,      ///< float64 / float64
  kBfloat16 = 16,   ///< bfloat16 data, float32 compute
  kAllConfigs = 31,
};
/// The configuration a plan runs in.
CudnnDataConfig cudnn_data_config(const CudnnConvPlan& plan);

enum CudnnDims : std::uint8_t { kDims2 = 1, kDims3 = 2 };  ///< 1D problems count as 2D

struct CudnnAlgoInfo {
  ConvDirection direction;
  int algo;                  ///< the cuDNN enumerator value
  std::string_view suffix;   ///< "implicit_gemm", "algo_0", ...
  bool implemented = true;   ///< false: cuDNN lists it but never runs it
  bool deterministic = true; ///< false: uses atomics (bitwise results may vary run to run)
  std::uint8_t dims = kDims2 | kDims3;
  std::uint8_t configs = kAllConfigs;
  std::uint8_t configs_3d = kAllConfigs;  ///< further restriction for 3D problems
  bool stride1 = false;      ///< every stride must be 1
  bool dilation1 = false;    ///< every dilation must be 1
  int square_filters = 0;    ///< bitmask of allowed square 2D filter sizes (1 << k); 0 = any
  int max_filter_2d = 0;     ///< per-axis filter limit in 2D; 0 = none
  int max_filter_3d = 0;     ///< per-axis filter limit in 3D; 0 = none
  int max_padded_in = 0;     ///< per-axis limit on input + 2 * pad; 0 = none
  bool filter_gt_pad = false;  ///< filter extent must exceed the pad on every axis
  /// Square filter sizes excluded for true-half (winograd_nonfused: 5x5).
  int true_half_excluded_filters = 0;

  /// "cuda.cudnn.fwd.implicit_gemm".
  std::string name() const;
};

/// All 21 algorithms, grouped by direction, each group in default priority order
/// (the order register_cuda_conv_algorithms registers them in).
std::span<const CudnnAlgoInfo> cudnn_algorithm_table();

/// The documented limits of `algo` applied to `p` and its plan (pads, sizes as cuDNN sees
/// them after explicit padding). Also rejects float16 accumulation for backward
/// directions (inaccurate; Theano refused it too) and algorithms cuDNN does not implement.
Status cudnn_static_check(const CudnnAlgoInfo& algo, const ConvProblem& p, const CudnnConvPlan& plan);

}  // namespace convgraph::cuda
