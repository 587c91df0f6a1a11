// Composite convolution forms and older entry points: thin builders over the abstract nodes.
#include "convgraph/core/error.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "ops/conv_builders.hpp"

namespace convgraph {

using namespace conv_detail;

namespace {

std::string suffixed(const std::string& name, const char* suffix) {
  return name.empty() ? name : name + suffix;
}

Var conv_transpose(std::string_view fn, int ndim, const Var& input, const Var& filters, Shape output_shape,
                   const ConvTransposeOptions& o) {
  // The transpose of a strided convolution is its gradient w.r.t. inputs: the stride of
  // that convolution is the "input dilation" of the transposed one.
  ConvOptions c{.filter_shape = o.filter_shape,
                .border_mode = o.border_mode,
                .subsample = o.input_dilation,
                .filter_flip = o.filter_flip,
                .filter_dilation = o.filter_dilation,
                .num_groups = o.num_groups,
                .name = o.name};
  return conv_grad_inputs(fn, ndim, input, filters, std::move(output_shape), c);
}

Var separable(std::string_view fn, int ndim, const Var& input, const Var& depthwise, const Var& pointwise,
              std::int64_t num_channels, const SeparableConvOptions& o) {
  check_rank(input, ndim, fn, "input");
  if (num_channels < 1)
    throw ValueError(msg(fn, ": num_channels must be >= 1, got ", num_channels));
  if (input.shape()[1] >= 0 && input.shape()[1] != num_channels)
    throw ShapeError(msg(fn, ": num_channels ", num_channels, " does not match the input ",
                         input.type().to_string()));
  ConvOptions dw{.input_shape = o.input_shape,
                 .filter_shape = o.depthwise_filter_shape,
                 .border_mode = o.border_mode,
                 .subsample = o.subsample,
                 .filter_flip = o.filter_flip,
                 .filter_dilation = o.filter_dilation,
                 .num_groups = num_channels,
                 .name = suffixed(o.name, ".depthwise")};
  const Var mid = conv_forward(fn, ndim, input, depthwise, dw, false);
  ConvOptions pw{.filter_shape = o.pointwise_filter_shape,
                 .filter_flip = o.filter_flip,
                 .name = suffixed(o.name, ".pointwise")};
  const Var out = conv_forward(fn, ndim, mid, pointwise, pw, false);
  return out;
}

}  // namespace

Var conv2d_transpose(const Var& input, const Var& filters, Shape output_shape, const ConvTransposeOptions& o) {
  return conv_transpose("conv2d_transpose", 2, input, filters, std::move(output_shape), o);
}
Var conv3d_transpose(const Var& input, const Var& filters, Shape output_shape, const ConvTransposeOptions& o) {
  return conv_transpose("conv3d_transpose", 3, input, filters, std::move(output_shape), o);
}

Var separable_conv2d(const Var& input, const Var& depthwise, const Var& pointwise, std::int64_t num_channels,
                     const SeparableConvOptions& o) {
  return separable("separable_conv2d", 2, input, depthwise, pointwise, num_channels, o);
}
Var separable_conv3d(const Var& input, const Var& depthwise, const Var& pointwise, std::int64_t num_channels,
                     const SeparableConvOptions& o) {
  return separable("separable_conv3d", 3, input, depthwise, pointwise, num_channels, o);
}

Var causal_conv1d(const Var& input, const Var& filters, Shape filter_shape, const CausalConvOptions& o) {
  constexpr std::string_view fn = "causal_conv1d";
  check_rank(input, 1, fn, "input");
  check_rank(filters, 1, fn, "filters");
  if (!filter_shape.empty() && filter_shape.size() != 3)
    throw ValueError(msg(fn, ": filter_shape ", shape_to_string(filter_shape), " must have 3 entries, got ",
                         filter_shape.size()));
  if (o.filter_dilation < 1)
    throw ValueError(msg(fn, ": filter_dilation must be >= 1, got ", o.filter_dilation));
  // The left padding depends on the kernel length, so it must be known now.
  std::int64_t k = filter_shape.empty() ? kUnknown : filter_shape[2];
  if (k < 0) k = filters.shape()[2];
  if (k < 1)
    throw ValueError(msg(fn, ": the kernel length must be known when the graph is built (the padding ",
                         "depends on it): pass filter_shape; filters are ", filters.type().to_string()));
  const std::int64_t left = o.filter_dilation * (k - 1);
  ConvOptions c{.input_shape = o.input_shape,
                .filter_shape = filter_shape,
                .border_mode = BorderMode(std::vector<std::pair<std::int64_t, std::int64_t>>{{left, 0}}),
                .subsample = {o.subsample},
                .filter_flip = o.filter_flip,
                .filter_dilation = {o.filter_dilation},
                .num_groups = o.num_groups,
                .name = o.name};
  return conv_forward(fn, 1, input, filters, c, false);
}

Var conv3D(const Var& V, const Var& W, const Var& b, std::vector<std::int64_t> d) {
  constexpr std::string_view fn = "conv3D";
  check_rank(V, 3, fn, "V");
  check_rank(W, 3, fn, "W");
  if (b.rank() != 1)
    throw ShapeError(msg(fn, ": bias 'b' must have rank 1 (out channels), got ", b.type().to_string()));
  if (d.size() != 3)
    throw ValueError(msg(fn, ": strides d must have 3 entries (row, column, time), got ", d.size()));
  const std::int64_t K = W.shape()[0];
  if (K >= 0 && b.shape()[0] >= 0 && b.shape()[0] != K)
    throw ShapeError(msg(fn, ": bias length ", b.shape()[0], " does not match the ", K,
                         " output channels of W ", W.type().to_string()));
  if (V.dtype() != b.dtype())
    throw TypeError(msg(fn, ": dtype mismatch: V is ", dtype_name(V.dtype()), " but b is ", dtype_name(b.dtype())));
  // (batch, row, col, time, channel) -> (batch, channel, row, col, time) and back: the
  // abstract op has one layout; conv3D computed a valid cross-correlation.
  const Var x = dimshuffle(V, {0, 4, 1, 2, 3});
  const Var w = dimshuffle(W, {0, 4, 1, 2, 3});
  const Var y = conv3d(x, w, {.subsample = std::move(d), .filter_flip = false});
  const Var biased = y + dimshuffle(b, {-1, 0, -1, -1, -1});
  return dimshuffle(biased, {0, 2, 3, 4, 1});
}

}  // namespace convgraph
