// ConvProblem -> cuDNN descriptor parameters (GPU-free; rules in backends/cuda/cudnn_plan.hpp).
// Compiled in every build, CUDA or not, so the mapping is tested without a GPU.
#include "backends/cuda/cudnn_plan.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

namespace convgraph::cuda {

std::string_view cudnn_data_type_name(CudnnDataType t) {
  switch (t) {
    case CudnnDataType::float32: return "CUDNN_DATA_FLOAT";
    case CudnnDataType::float64: return "CUDNN_DATA_DOUBLE";
    case CudnnDataType::float16: return "CUDNN_DATA_HALF";
    case CudnnDataType::bfloat16: return "CUDNN_DATA_BFLOAT16";
  }
  return "?";
}

std::int64_t CudnnShape::numel() const {
  std::int64_t n = nb_dims > 0 ? 1 : 0;
  for (int i = 0; i < nb_dims; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

/// Fills a packed NC[D]HW shape; false when a dim or stride does not fit in int, or the
/// tensor has 2^31 elements or more (the legacy API indexes with 32-bit integers).
bool make_shape(CudnnShape& s, std::int64_t n, std::int64_t c, const std::array<std::int64_t, 3>& sp,
                int nsp) {
  s.nb_dims = 2 + nsp;
  std::int64_t dims[5] = {n, c, sp[0], sp[1], sp[2]};
  std::int64_t stride = 1;
  for (int i = s.nb_dims - 1; i >= 0; --i) {
    if (dims[i] > kIntMax || stride > kIntMax) return false;
    s.dims[static_cast<std::size_t>(i)] = static_cast<int>(dims[i]);
    s.strides[static_cast<std::size_t>(i)] = static_cast<int>(stride);
    stride *= dims[i];
  }
  return stride <= kIntMax;
}

Status map_types(const ConvProblem& p, CudnnConvPlan& out) {
  const auto bad = [&] {
    return Status::no(msg("cuDNN cannot run ", dtype_name(p.dtype), " data with ", dtype_name(p.compute),
                          " accumulation (supported: float32/float32, float64/float64, "
                          "float16/float32, float16/float16, bfloat16/float32)"));
  };
  switch (p.dtype) {
    case DType::float32:
      if (p.compute != DType::float32) return bad();
      out.data_type = out.compute_type = CudnnDataType::float32;
      out.math = CudnnMathType::fma;  // exact fp32: DEFAULT would allow TF32 on sm_80+
      return Status::ok();
    case DType::float64:
      if (p.compute != DType::float64) return bad();
      out.data_type = out.compute_type = CudnnDataType::float64;
      out.math = CudnnMathType::default_math;
      return Status::ok();
    case DType::float16:
      if (p.compute != DType::float32 && p.compute != DType::float16) return bad();
      out.data_type = CudnnDataType::float16;
      out.compute_type = p.compute == DType::float16 ? CudnnDataType::float16 : CudnnDataType::float32;
      out.math = CudnnMathType::tensor_op;
      return Status::ok();
    case DType::bfloat16:
      if (p.compute != DType::float32 && p.compute != DType::bfloat16) return bad();
      out.data_type = CudnnDataType::bfloat16;
      out.compute_type = CudnnDataType::float32;
      out.math = CudnnMathType::tensor_op;
      return Status::ok();
    default:
      return Status::no(msg("cuDNN convolutions need floating-point data, got ", dtype_name(p.dtype)));
  }
}

}  // namespace

Status plan_cudnn_conv(const ConvProblem& p, CudnnConvPlan& out) {
  out = CudnnConvPlan{};
  if (p.ndim < 1 || p.ndim > 3) return Status::no(msg("cuDNN: ", p.ndim, " spatial dimensions (1-3 supported)"));
  if (Status s = map_types(p, out); !s) return s;

  // Problem axis a sits at cuDNN spatial slot a + shift: 1D goes to the last slot of 2D
  // (x is N C 1 W), so slot 0 is the unit axis.
  const int nsp = p.ndim == 3 ? 3 : 2;
  const int shift = nsp - p.ndim;
  out.spatial_dims = nsp;
  std::array<std::int64_t, 3> xin{1, 1, 1}, kin{1, 1, 1}, yout{1, 1, 1};
  CudnnPadPlan& pad = out.explicit_pad;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const auto slot = static_cast<std::size_t>(a + shift);
    const std::int64_t m = std::min(p.pad_pre[ua], p.pad_post[ua]);
    pad.extra_pre[ua] = p.pad_pre[ua] - m;
    pad.extra_post[ua] = p.pad_post[ua] - m;
    pad.padded_in[ua] = p.in[ua] + pad.extra_pre[ua] + pad.extra_post[ua];
    if (pad.extra_pre[ua] != 0 || pad.extra_post[ua] != 0) pad.needed = true;
    if (m > kIntMax || p.stride[ua] > kIntMax || p.dilation[ua] > kIntMax)
      return Status::no("cuDNN: padding, stride or dilation does not fit in a 32-bit int");
    out.pad[slot] = static_cast<int>(m);
    out.stride[slot] = static_cast<int>(p.stride[ua]);
    out.dilation[slot] = static_cast<int>(p.dilation[ua]);
    xin[slot] = pad.padded_in[ua];
    kin[slot] = p.kernel[ua];
    yout[slot] = p.out[ua];
  }
  if (p.G > kIntMax) return Status::no("cuDNN: group count does not fit in a 32-bit int");
  out.groups = static_cast<int>(p.G);
  out.mode = p.flip ? CudnnConvMode::convolution : CudnnConvMode::cross_correlation;
  if (!make_shape(out.x, p.N, p.C, xin, nsp) || !make_shape(out.w, p.K, p.Cg(), kin, nsp) ||
      !make_shape(out.y, p.N, p.K, yout, nsp))
    return Status::no(msg("cuDNN: a tensor of ", p.key(), " has 2^31 elements or more (legacy API limit)"));
  if (pad.needed) pad.bytes = static_cast<std::size_t>(out.x.numel()) * dtype_size(p.dtype);
  return Status::ok();
}

std::size_t CudnnConvPlan::cudnn_workspace_offset() const {
  return explicit_pad.needed ? align_up(explicit_pad.bytes, kCudnnWorkspaceAlign) : 0;
}

std::string CudnnConvPlan::to_string() const {
  std::ostringstream os;
  auto dims = [&](const CudnnShape& s) {
    for (int i = 0; i < s.nb_dims; ++i) os << (i ? "x" : "") << s.dims[static_cast<std::size_t>(i)];
  };
  auto axes = [&](const std::array<int, 3>& v) {
    for (int i = 0; i < spatial_dims; ++i) os << (i ? "," : "") << v[static_cast<std::size_t>(i)];
  };
  os << "x ";
  dims(x);
  os << " w ";
  dims(w);
  os << " y ";
  dims(y);
  os << " pad ";
  axes(pad);
  os << " stride ";
  axes(stride);
  os << " dil ";
  axes(dilation);
  os << " g" << groups << (mode == CudnnConvMode::convolution ? " conv " : " xcorr ")
     << cudnn_data_type_name(data_type) << "/" << cudnn_data_type_name(compute_type) << " math"
     << static_cast<int>(math);
  if (explicit_pad.needed) os << " xpad " << explicit_pad.bytes << "B";
  return os.str();
}

}  // namespace convgraph::cuda
