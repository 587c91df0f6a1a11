#pragma once
/// How a ConvProblem is expressed through cuDNN's legacy descriptor API, as plain data.
/// plan_cudnn_conv() needs neither a GPU nor cuDNN headers, so the mapping is unit-tested
/// on machines without a GPU; backends/cuda/cudnn_descriptors.cpp turns a plan into
/// cudnnTensor/Filter/ConvolutionDescriptor objects.
///
/// Mapping rules:
/// - 1D runs as 2D with a unit height: x (N, C, 1, W), w (K, C/G, 1, kW), pad/stride/
///   dilation 0/1/1 on the unit axis. 2D and 3D map directly (4-d and 5-d tensors).
/// - Tensors are packed NC[D]HW (row-major strides); filters K C/G [T]RS.
/// - groups: cudnnSetConvolutionGroupCount(G), filter dim 1 = C/G.
/// - filter_flip = true -> CUDNN_CONVOLUTION, false -> CUDNN_CROSS_CORRELATION.
/// - dtype / compute: float32/float32 -> FLOAT/FLOAT (FMA math: no TF32 rounding);
///   float64/float64 -> DOUBLE/DOUBLE; float16/float32 -> HALF/FLOAT ("pseudo half");
///   float16/float16 -> HALF/HALF ("true half"); bfloat16/any -> BFLOAT16/FLOAT (cuDNN
///   has no bf16 accumulation; float32 accumulation is strictly more accurate than asked).
///   Half types use tensor-op math. Any other combination is declined with a reason.
/// - Asymmetric padding: cuDNN takes one symmetric pad per axis. Per axis we give cuDNN
///   m = min(pre, post) and make the rest explicit: the input is copied into a zero-padded
///   buffer xp of extent in + (pre - m) + (post - m), placed at the start of the workspace.
///   forward and grad_weights read xp instead of x (same output size, same result);
///   grad_inputs lets cuDNN write dxp into that buffer and crops dx = dxp[pre - m : ...]
///   out of it (the gradient of zero-padding is a crop). `x` in the plan describes xp.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "convgraph/conv/conv_problem.hpp"
#include "convgraph/core/error.hpp"

namespace convgraph::cuda {

// Values equal cuDNN's enumerators (static_assert-ed in cudnn_descriptors.cpp).
enum class CudnnDataType : int { float32 = 0, float64 = 1, float16 = 2, bfloat16 = 9 };
enum class CudnnConvMode : int { convolution = 0, cross_correlation = 1 };
enum class CudnnMathType : int { default_math = 0, tensor_op = 1, tensor_op_allow_conversion = 2, fma = 3 };

std::string_view cudnn_data_type_name(CudnnDataType t);  ///< "CUDNN_DATA_FLOAT", ...

/// Dims and element strides of a packed tensor as handed to cudnnSet*NdDescriptor.
struct CudnnShape {
  int nb_dims = 0;
  std::array<int, 5> dims{};
  std::array<int, 5> strides{};
  std::int64_t numel() const;
  bool operator==(const CudnnShape&) const = default;
};

/// The explicit zero-padding that makes asymmetric padding symmetric (see above).
struct CudnnPadPlan {
  bool needed = false;
  Axes3 extra_pre{0, 0, 0};   ///< per problem axis: pre - min(pre, post)
  Axes3 extra_post{0, 0, 0};  ///< per problem axis: post - min(pre, post)
  Axes3 padded_in{1, 1, 1};   ///< per problem axis: input extent of xp
  std::size_t bytes = 0;      ///< size of xp (0 when not needed)
};

struct CudnnConvPlan {
  int spatial_dims = 2;                ///< as cuDNN sees it: 2 (also for 1D) or 3
  CudnnShape x, w, y;                  ///< x describes xp when pad.needed
  std::array<int, 3> pad{0, 0, 0};     ///< symmetric, first spatial_dims entries used
  std::array<int, 3> stride{1, 1, 1};
  std::array<int, 3> dilation{1, 1, 1};
  int groups = 1;
  CudnnConvMode mode = CudnnConvMode::cross_correlation;
  CudnnDataType data_type = CudnnDataType::float32;
  CudnnDataType compute_type = CudnnDataType::float32;
  CudnnMathType math = CudnnMathType::fma;
  CudnnPadPlan explicit_pad;
  /// The workspace offset where cuDNN's own workspace starts (xp sits before it).
  std::size_t cudnn_workspace_offset() const;
  /// "x 8x64x56x56 w 64x64x3x3 y 8x64x56x56 pad 1,1 ..." for messages and cache keys.
  std::string to_string() const;
};

/// Alignment of every buffer carved out of a cuDNN workspace.
inline constexpr std::size_t kCudnnWorkspaceAlign = 256;

/// Maps `p` onto cuDNN's descriptors. Returns a reason instead when cuDNN's legacy API
/// cannot express it (dtype/compute combination, sizes beyond 32-bit descriptors).
Status plan_cudnn_conv(const ConvProblem& p, CudnnConvPlan& out);

}  // namespace convgraph::cuda
