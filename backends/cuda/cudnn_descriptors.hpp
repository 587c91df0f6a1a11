#pragma once
/// RAII cuDNN descriptors built from a CudnnConvPlan (private: includes cudnn.h).
/// The legacy descriptor API is deprecated in cuDNN 9 but still shipped and supported;
/// it only warns when CUDNN_WARN_DEPRECATED is defined, which this project never does.
#include <cudnn.h>

#include "backends/cuda/cudnn_plan.hpp"

namespace convgraph::cuda {

class TensorDesc {
 public:
  explicit TensorDesc(const CudnnShape& s, CudnnDataType t);
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  explicit FilterDesc(const CudnnShape& s, CudnnDataType t);  ///< NCHW-ordered (K, C/G, ...)
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  explicit ConvDesc(const CudnnConvPlan& plan);  ///< pads, strides, dilations, mode, groups, math
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// An activation (relu, or identity for the fused convolution) that maps NaN to 0, as the host relu does.
class ActivationDesc {
 public:
  explicit ActivationDesc(cudnnActivationMode_t mode);
  ~ActivationDesc();
  ActivationDesc(const ActivationDesc&) = delete;
  ActivationDesc& operator=(const ActivationDesc&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

/// The three operand descriptors and the convolution descriptor of one plan.
struct CudnnDescriptors {
  explicit CudnnDescriptors(const CudnnConvPlan& plan)
      : x(plan.x, plan.data_type), w(plan.w, plan.data_type), y(plan.y, plan.data_type), conv(plan) {}
  TensorDesc x;
  FilterDesc w;
  TensorDesc y;
  ConvDesc conv;
};

}  // namespace convgraph::cuda
