#pragma once
/// A forward convolution's epilogue (ConvEpilogue: y = act((y + bias[k]) + residual)) on
/// the GPU with cuDNN (private: includes cudnn.h). cuDNN's fused
/// cudnnConvolutionBiasActivationForward does it inside the convolution where it applies;
/// apply_epilogue_cudnn() is the separate pass for every other case (cudnnAddTensor for
/// the bias and the residual, cudnnActivationForward for relu, each in place on y).
#include <cudnn.h>

#include "backends/cuda/cudnn_descriptors.hpp"
#include "convgraph/backends/conv_algorithm.hpp"

namespace convgraph::cuda {

/// (1, K, 1, ...) with y's rank: the bias as cuDNN broadcasts it over y.
CudnnShape epilogue_bias_shape(const CudnnShape& y);

/// y = act((y + bias) + residual) in place, in the order of the unfused ops; y_desc
/// describes y (plan.y). float32 and float64 data.
void apply_epilogue_cudnn(cudnnHandle_t h, const CudnnConvPlan& plan, cudnnTensorDescriptor_t y_desc, void* y,
                          const ConvEpilogue& ep);

}  // namespace convgraph::cuda
