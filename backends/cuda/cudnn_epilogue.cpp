// The forward epilogue on the GPU (see cudnn_epilogue.hpp), and apply_conv_epilogue_gpu()
// for the CUDA algorithms that do not fuse it (conv_cuda.hpp).
#include "backends/cuda/cudnn_epilogue.hpp"

#include "backends/cuda/conv_cuda.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"

namespace convgraph::cuda {

CudnnShape epilogue_bias_shape(const CudnnShape& y) {
  CudnnShape b = y;
  for (int i = 0; i < b.nb_dims; ++i) b.dims[static_cast<std::size_t>(i)] = i == 1 ? y.dims[1] : 1;
  int stride = 1;
  for (int i = b.nb_dims - 1; i >= 0; --i) {
    b.strides[static_cast<std::size_t>(i)] = stride;
    stride *= b.dims[static_cast<std::size_t>(i)];
  }
  return b;
}

void apply_epilogue_cudnn(cudnnHandle_t h, const CudnnConvPlan& plan, cudnnTensorDescriptor_t y_desc, void* y,
                          const ConvEpilogue& ep) {
  if (ep.empty()) return;
  // cuDNN's scaling factors are double for double data and float otherwise.
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.f, zero_f = 0.f;
  const bool dbl = plan.data_type == CudnnDataType::float64;
  const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  if (ep.bias) {
    const TensorDesc b(epilogue_bias_shape(plan.y), plan.data_type);
    CG_CUDNN_CHECK(cudnnAddTensor(h, one, b.get(), ep.bias, one, y_desc, y));
  }
  if (ep.residual) CG_CUDNN_CHECK(cudnnAddTensor(h, one, y_desc, ep.residual, one, y_desc, y));
  if (ep.activation == ConvActivation::relu) {
    const ActivationDesc relu(CUDNN_ACTIVATION_RELU);
    CG_CUDNN_CHECK(cudnnActivationForward(h, relu.get(), one, y_desc, y, zero, y_desc, y));
  }
}

void apply_conv_epilogue_gpu(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) {
  if (t.epilogue.empty()) return;
  if (p.direction != ConvDirection::forward)
    throw ValueError(msg("conv epilogue: only a forward convolution has one, not ", p.key()));
  require_gpu("conv epilogue");
  CudnnConvPlan plan;
  if (Status s = plan_cudnn_conv(p, plan); !s)
    throw DeviceError(msg("conv epilogue on the GPU: cannot describe the output of ", p.key(), ": ", s.reason()));
  const TensorDesc y(plan.y, plan.data_type);
  apply_epilogue_cudnn(cudnn_handle(as_stream(ctx.stream)), plan, y.get(), t.y, t.epilogue);
}

}  // namespace convgraph::cuda
