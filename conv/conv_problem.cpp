// ConvProblem::make: the concrete problem of a node, validated with the shape checks of
// conv_params.hpp plus the limits the algorithms rely on (per-axis sizes below 2^31,
// operands below 2^62 bytes).
#include "convgraph/conv/conv_problem.hpp"

#include <limits>
#include <sstream>

#include "convgraph/core/error.hpp"
#include "core/checked_math.hpp"

namespace convgraph {

namespace {
constexpr std::size_t kMaxConvOperandBytes = std::size_t{1} << 62;
// Per spatial axis, every size, step and padding (and the padded input and the dilated
// kernel) must be below 2^31, as in cuDNN. Index arithmetic in the kernels then sums and
// multiplies at most two such values, which cannot overflow int64 however extreme the
// padding, stride or dilation.
constexpr std::int64_t kMaxAxisValue = (std::int64_t{1} << 31) - 1;

}  // namespace

ConvProblem ConvProblem::make(ConvDirection dir, const ConvParams& params,
                              const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& w,
                              DType dtype, std::string_view op) {
  const ConvParams p = params.normalized(op);
  const auto rank = static_cast<std::size_t>(p.ndim + 2);
  if (x.size() != rank)
    throw ShapeError(msg(op, ": input must have rank ", rank, " (batch, channels, ", p.ndim,
                         " spatial), got shape ", shape_to_string(x)));
  if (w.size() != rank)
    throw ShapeError(msg(op, ": filters must have rank ", rank, " (out channels, in channels/groups, ",
                         p.ndim, " spatial), got shape ", shape_to_string(w)));
  for (std::size_t i = 0; i < rank; ++i) {
    if (x[i] < 1) throw ShapeError(msg(op, ": input shape ", shape_to_string(x), " must be fully known and positive"));
    if (w[i] < 1) throw ShapeError(msg(op, ": filter shape ", shape_to_string(w), " must be fully known and positive"));
  }
  check_conv_channels(x, w, p.groups, op);  // the same checks (and messages) as the op's infer()
  ConvProblem q;
  q.direction = dir;
  q.ndim = p.ndim;
  q.N = x[0];
  q.C = x[1];
  q.K = w[0];
  q.G = p.groups;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    q.in[ua] = x[ua + 2];
    q.kernel[ua] = w[ua + 2];
    q.stride[ua] = p.stride[ua];
    q.dilation[ua] = p.dilation[ua];
    const std::int64_t dk = detail::checked_add(
        detail::checked_mul(q.kernel[ua] - 1, q.dilation[ua], op, "the dilated kernel size (k - 1) * dilation"), 1, op,
        "the dilated kernel size");
    auto [p0, p1] = p.border.axis_pads(a, dk);
    q.pad_pre[ua] = p0;
    q.pad_post[ua] = p1;
    // The padded input bounds the input and the paddings, the dilated kernel bounds the
    // kernel: four values cover every per-axis quantity the kernels combine.
    std::int64_t padded = 0;
    if (!detail::try_add(q.in[ua], p0, padded) || !detail::try_add(padded, p1, padded))
      padded = std::numeric_limits<std::int64_t>::max();
    const std::pair<const char*, std::int64_t> axis_values[] = {
        {"padded input size", padded}, {"dilated kernel size", dk}, {"stride", q.stride[ua]},
        {"dilation", q.dilation[ua]}};
    for (const auto& [what, value] : axis_values)
      if (value > kMaxAxisValue)
        throw ShapeError(msg(op, ": the ", what, " of spatial axis ", a, " is ", value, ", above the limit of ",
                             kMaxAxisValue, " per axis (input ", shape_to_string(x), ", filters ", shape_to_string(w),
                             ", ", p.to_string(), ")"));
    q.out[ua] = conv_output_axis(p, a, x, w, op);
  }
  // x, w and y must each be below 2^62 bytes (no machine holds more): every per-tensor
  // product the algorithms form then fits int64, and a sum of three such sizes fits size_t.
  const std::pair<const char*, std::vector<std::int64_t>> operands[] = {
      {"input", q.x_shape()}, {"filters", q.w_shape()}, {"output", q.y_shape()}};
  for (const auto& [what, shape] : operands) {
    const std::size_t bytes = detail::checked_nbytes(shape, dtype, msg(op, ": the ", what));
    if (bytes > kMaxConvOperandBytes)
      throw ShapeError(msg(op, ": the ", what, " ", dtype_name(dtype), shape_to_string(shape), " needs ", bytes,
                           " bytes, more than the ", kMaxConvOperandBytes, " bytes a convolution operand may have"));
  }
  q.flip = p.filter_flip;
  q.dtype = dtype;
  q.compute = p.compute_dtype.value_or(dtype);
  return q;
}

std::vector<std::int64_t> ConvProblem::x_shape() const {
  std::vector<std::int64_t> s{N, C};
  for (int a = 0; a < ndim; ++a) s.push_back(in[static_cast<std::size_t>(a)]);
  return s;
}
std::vector<std::int64_t> ConvProblem::w_shape() const {
  std::vector<std::int64_t> s{K, C / G};
  for (int a = 0; a < ndim; ++a) s.push_back(kernel[static_cast<std::size_t>(a)]);
  return s;
}
std::vector<std::int64_t> ConvProblem::y_shape() const {
  std::vector<std::int64_t> s{N, K};
  for (int a = 0; a < ndim; ++a) s.push_back(out[static_cast<std::size_t>(a)]);
  return s;
}

namespace {
std::int64_t prod(const Axes3& v, int n) {
  std::int64_t r = 1;
  for (int a = 0; a < n; ++a) r *= v[static_cast<std::size_t>(a)];
  return r;
}
}  // namespace

std::int64_t ConvProblem::kernel_numel() const { return prod(kernel, ndim); }
std::int64_t ConvProblem::in_numel() const { return prod(in, ndim); }
std::int64_t ConvProblem::out_numel() const { return prod(out, ndim); }
std::int64_t ConvProblem::x_numel() const { return N * C * in_numel(); }
std::int64_t ConvProblem::w_numel() const { return K * (C / G) * kernel_numel(); }
std::int64_t ConvProblem::y_numel() const { return N * K * out_numel(); }

double ConvProblem::flops() const {
  return 2.0 * static_cast<double>(N) * static_cast<double>(K) * static_cast<double>(C / G) *
         static_cast<double>(kernel_numel()) * static_cast<double>(out_numel());
}

std::string ConvProblem::key() const {
  std::ostringstream os;
  auto axes = [&](const Axes3& v) {
    for (int a = 0; a < ndim; ++a) os << (a ? "x" : "") << v[static_cast<std::size_t>(a)];
  };
  os << direction_name(direction) << " nd" << ndim << " g" << G << " mb" << N << " ic" << C << " oc" << K
     << " i";
  axes(in);
  os << " k";
  axes(kernel);
  os << " s";
  axes(stride);
  os << " d";
  axes(dilation);
  os << " p";
  axes(pad_pre);
  os << "-";
  axes(pad_post);
  os << (flip ? " conv " : " xcorr ") << dtype_name(dtype) << "/" << dtype_name(compute);
  if (workspace_limit != std::numeric_limits<std::size_t>::max()) os << " ws" << workspace_limit;
  return os.str();
}

}  // namespace convgraph
