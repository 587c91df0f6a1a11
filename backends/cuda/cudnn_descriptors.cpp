// RAII cuDNN descriptors (see cudnn_descriptors.hpp).
#include "backends/cuda/cudnn_descriptors.hpp"

#include "backends/cuda/cuda_check.hpp"

namespace convgraph::cuda {

// The plan's enums mirror cuDNN's so plans can be built and tested without cuDNN.
static_assert(static_cast<int>(CudnnDataType::float32) == CUDNN_DATA_FLOAT);
static_assert(static_cast<int>(CudnnDataType::float64) == CUDNN_DATA_DOUBLE);
static_assert(static_cast<int>(CudnnDataType::float16) == CUDNN_DATA_HALF);
static_assert(static_cast<int>(CudnnDataType::bfloat16) == CUDNN_DATA_BFLOAT16);
static_assert(static_cast<int>(CudnnConvMode::convolution) == CUDNN_CONVOLUTION);
static_assert(static_cast<int>(CudnnConvMode::cross_correlation) == CUDNN_CROSS_CORRELATION);
static_assert(static_cast<int>(CudnnMathType::default_math) == CUDNN_DEFAULT_MATH);
static_assert(static_cast<int>(CudnnMathType::tensor_op) == CUDNN_TENSOR_OP_MATH);
static_assert(static_cast<int>(CudnnMathType::tensor_op_allow_conversion) == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
static_assert(static_cast<int>(CudnnMathType::fma) == CUDNN_FMA_MATH);

namespace {
cudnnDataType_t dt(CudnnDataType t) { return static_cast<cudnnDataType_t>(static_cast<int>(t)); }
}  // namespace

TensorDesc::TensorDesc(const CudnnShape& s, CudnnDataType t) {
  CG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_));
  const cudnnStatus_t st = cudnnSetTensorNdDescriptor(d_, dt(t), s.nb_dims, s.dims.data(), s.strides.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroyTensorDescriptor(d_);
    d_ = nullptr;
    CG_CUDNN_CHECK(st);
  }
}
TensorDesc::~TensorDesc() {
  if (d_) cudnnDestroyTensorDescriptor(d_);
}

FilterDesc::FilterDesc(const CudnnShape& s, CudnnDataType t) {
  CG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_));
  const cudnnStatus_t st = cudnnSetFilterNdDescriptor(d_, dt(t), CUDNN_TENSOR_NCHW, s.nb_dims, s.dims.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroyFilterDescriptor(d_);
    d_ = nullptr;
    CG_CUDNN_CHECK(st);
  }
}
FilterDesc::~FilterDesc() {
  if (d_) cudnnDestroyFilterDescriptor(d_);
}

ConvDesc::ConvDesc(const CudnnConvPlan& plan) {
  CG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_));
  cudnnStatus_t st = cudnnSetConvolutionNdDescriptor(
      d_, plan.spatial_dims, plan.pad.data(), plan.stride.data(), plan.dilation.data(),
      static_cast<cudnnConvolutionMode_t>(static_cast<int>(plan.mode)), dt(plan.compute_type));
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetConvolutionGroupCount(d_, plan.groups);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetConvolutionMathType(d_, static_cast<cudnnMathType_t>(static_cast<int>(plan.math)));
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroyConvolutionDescriptor(d_);
    d_ = nullptr;
    CG_CUDNN_CHECK(st);
  }
}
ConvDesc::~ConvDesc() {
  if (d_) cudnnDestroyConvolutionDescriptor(d_);
}

ActivationDesc::ActivationDesc(cudnnActivationMode_t mode) {
  CG_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_));
  // NOT_PROPAGATE_NAN: relu(NaN) is 0, as max(x, 0) on the host gives for a NaN x.
  const cudnnStatus_t st = cudnnSetActivationDescriptor(d_, mode, CUDNN_NOT_PROPAGATE_NAN, 0.0);
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroyActivationDescriptor(d_);
    d_ = nullptr;
    CG_CUDNN_CHECK(st);
  }
}
ActivationDesc::~ActivationDesc() {
  if (d_) cudnnDestroyActivationDescriptor(d_);
}

}  // namespace convgraph::cuda
