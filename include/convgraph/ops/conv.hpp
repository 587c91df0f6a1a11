#pragma once
/// The convolution DSL: Theano-style and cuDNN-style builders of the one abstract op family
/// (ops/abstract_conv.hpp), the composite forms Theano users rely on, and the older entry
/// points. Every function here only builds nodes; what runs is chosen at compile() time.
///
///   Var y  = conv2d(x, w, {.border_mode = "half", .subsample = {2, 2}, .filter_flip = false});
///   Var dx = conv2d_grad_wrt_inputs(dy, w, {8, 3, 32, 32}, {.subsample = {2, 2}});
///   Var z  = conv_fprop(x, w, ConvAttributes().set_padding({1, 1}).set_stride({1, 1}).set_name("c1"));
///
/// Layout: images (batch, channels, spatial...), filters (out channels, in channels/groups,
/// spatial...), 1 to 3 spatial axes.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convgraph/core/graph.hpp"
#include "convgraph/ops/abstract_conv.hpp"
#include "convgraph/ops/assert_shape.hpp"
#include "convgraph/conv/conv_params.hpp"

namespace convgraph {

// ---- Theano style ------------------------------------------------------------------

/// Keyword arguments of conv1d/2d/3d and their gradient forms, in Theano's order (designated
/// initializers must follow it). Per-axis vectors may be left empty (= all 1).
struct ConvOptions {
  /// Shape hints (kUnknown for unknown entries; empty = none). They must agree with the
  /// operands' static shapes (ShapeError now) and are checked at run time where those are
  /// unknown (an AssertShape node, which also lets inference use the hint).
  Shape input_shape{};
  Shape filter_shape{};
  BorderMode border_mode = "valid";
  std::vector<std::int64_t> subsample{};        ///< stride per spatial axis
  bool filter_flip = true;                    ///< true: convolution; false: cross-correlation
  std::vector<std::int64_t> filter_dilation{};  ///< per spatial axis
  std::int64_t num_groups = 1;
  std::string name{};                           ///< node label (debugprint, profile, errors)
  bool allow_fft = true;                      ///< false: Theano's version='no_fft' for this node
  std::optional<DType> compute_dtype{};         ///< accumulation type; default: storage dtype
};

Var conv1d(const Var& input, const Var& filters, const ConvOptions& options = {});
Var conv2d(const Var& input, const Var& filters, const ConvOptions& options = {});
Var conv3d(const Var& input, const Var& filters, const ConvOptions& options = {});

/// Gradient of convN(input, filters) w.r.t. input, from output_grad. `input_shape` is
/// mandatory, as in Theano: with stride > 1 several input sizes give one output size.
/// Entries may be kUnknown where output_grad/filters determine them (batch, channels,
/// spatial dims at stride 1).
Var conv1d_grad_wrt_inputs(const Var& output_grad, const Var& filters, Shape input_shape,
                           const ConvOptions& options = {});
Var conv2d_grad_wrt_inputs(const Var& output_grad, const Var& filters, Shape input_shape,
                           const ConvOptions& options = {});
Var conv3d_grad_wrt_inputs(const Var& output_grad, const Var& filters, Shape input_shape,
                           const ConvOptions& options = {});
/// Gradient of convN(input, filters) w.r.t. filters; `filter_shape` is mandatory likewise.
Var conv1d_grad_wrt_weights(const Var& input, const Var& output_grad, Shape filter_shape,
                            const ConvOptions& options = {});
Var conv2d_grad_wrt_weights(const Var& input, const Var& output_grad, Shape filter_shape,
                            const ConvOptions& options = {});
Var conv3d_grad_wrt_weights(const Var& input, const Var& output_grad, Shape filter_shape,
                            const ConvOptions& options = {});

// ---- cuDNN frontend style ------------------------------------------------------------

enum class ConvolutionMode { CONVOLUTION, CROSS_CORRELATION };

/// cudnn-frontend's Conv_{fprop,dgrad,wgrad}_attributes in one class, with chainable
/// setters. Unlike cuDNN, unset padding/stride/dilation default to 0/1/1 rather than
/// failing validation. Groups come from the filter, as in cuDNN: filter dim 1 = C/groups.
class ConvAttributes {
 public:
  ConvAttributes& set_padding(std::vector<std::int64_t> padding);  ///< pre and post
  ConvAttributes& set_pre_padding(std::vector<std::int64_t> padding);
  ConvAttributes& set_post_padding(std::vector<std::int64_t> padding);
  ConvAttributes& set_stride(std::vector<std::int64_t> stride);
  ConvAttributes& set_dilation(std::vector<std::int64_t> dilation);
  ConvAttributes& set_name(std::string name);
  ConvAttributes& set_compute_data_type(DType dtype);
  ConvAttributes& set_convolution_mode(ConvolutionMode mode);
  /// DX dims for conv_dgrad (cuDNN: "output dimension inferencing is not possible").
  ConvAttributes& set_input_dims(Shape dims);
  /// DW dims for conv_wgrad.
  ConvAttributes& set_filter_dims(Shape dims);
  /// Extension: the group count when the channel dims are unknown at build time.
  ConvAttributes& set_group_count(std::int64_t groups);
  ConvAttributes& set_allow_fft(bool allow);

  const std::vector<std::int64_t>& pre_padding() const { return pre_; }
  const std::vector<std::int64_t>& post_padding() const { return post_; }
  const std::vector<std::int64_t>& stride() const { return stride_; }
  const std::vector<std::int64_t>& dilation() const { return dilation_; }
  const std::string& name() const { return name_; }
  std::optional<DType> compute_data_type() const { return compute_; }
  ConvolutionMode convolution_mode() const { return mode_; }
  const Shape& input_dims() const { return input_dims_; }
  const Shape& filter_dims() const { return filter_dims_; }

  /// The equivalent ConvParams for `ndim` spatial axes and `groups`; throws ValueError
  /// naming `op` when a vector has the wrong length.
  ConvParams to_params(int ndim, std::int64_t groups, std::string_view op) const;
  /// The group count given the channels of the full operand and the filter's dim 1.
  std::int64_t groups_for(std::int64_t channels, std::int64_t channels_per_group, std::string_view op) const;

 private:
  std::vector<std::int64_t> pre_, post_, stride_, dilation_;
  std::string name_;
  std::optional<DType> compute_;
  ConvolutionMode mode_ = ConvolutionMode::CROSS_CORRELATION;
  Shape input_dims_, filter_dims_;
  std::int64_t groups_ = 0;  // 0: from the shapes
  bool allow_fft_ = true;
};

Var conv_fprop(const Var& image, const Var& filter, const ConvAttributes& attributes = {});
/// DX from DY and W; the DX dims come from `attributes.input_dims()` or the overload.
Var conv_dgrad(const Var& loss, const Var& filter, const ConvAttributes& attributes);
Var conv_dgrad(const Var& loss, const Var& filter, Shape dx_dims, const ConvAttributes& attributes = {});
/// DW from X and DY; the DW dims come from `attributes.filter_dims()` or the overload.
Var conv_wgrad(const Var& image, const Var& loss, const ConvAttributes& attributes);
Var conv_wgrad(const Var& image, const Var& loss, Shape dw_dims, const ConvAttributes& attributes = {});

// ---- composite forms ---------------------------------------------------------------

struct ConvTransposeOptions {
  Shape filter_shape{};
  BorderMode border_mode = "valid";
  std::vector<std::int64_t> input_dilation{};  ///< the stride of the convolution transposed
  bool filter_flip = true;
  std::vector<std::int64_t> filter_dilation{};
  std::int64_t num_groups = 1;
  std::string name{};
};
/// Transposed convolution = conv2d_grad_wrt_inputs(input, filters, output_shape,
/// subsample = input_dilation): `output_shape` is the full shape of the result.
Var conv2d_transpose(const Var& input, const Var& filters, Shape output_shape,
                     const ConvTransposeOptions& options = {});
Var conv3d_transpose(const Var& input, const Var& filters, Shape output_shape,
                     const ConvTransposeOptions& options = {});

struct CausalConvOptions {
  Shape input_shape{};
  std::int64_t subsample = 1;
  bool filter_flip = true;
  std::int64_t filter_dilation = 1;
  std::int64_t num_groups = 1;
  std::string name{};
};
/// 1-D causal convolution of (B, C, L) by (K, C/G, k): padding dilation*(k-1) on the left
/// only, so output t sees inputs <= t. `filter_shape` may be empty when the filters' static
/// shape gives k (the padding must be known when the graph is built).
Var causal_conv1d(const Var& input, const Var& filters, Shape filter_shape = {},
                  const CausalConvOptions& options = {});

struct SeparableConvOptions {
  Shape input_shape{};
  Shape depthwise_filter_shape{};
  Shape pointwise_filter_shape{};
  BorderMode border_mode = "valid";          ///< depthwise step only
  std::vector<std::int64_t> subsample{};       ///< depthwise step only
  bool filter_flip = true;
  std::vector<std::int64_t> filter_dilation{}; ///< depthwise step only
  std::string name{};
};
/// Depthwise convolution (num_groups = num_channels, filters (C*mult, 1, k...)) followed by
/// a 1x1 convolution with pointwise_filters (K, C*mult, 1...).
Var separable_conv2d(const Var& input, const Var& depthwise_filters, const Var& pointwise_filters,
                     std::int64_t num_channels, const SeparableConvOptions& options = {});
Var separable_conv3d(const Var& input, const Var& depthwise_filters, const Var& pointwise_filters,
                     std::int64_t num_channels, const SeparableConvOptions& options = {});

// ---- bilinear upsampling (SEMANTICS 1.7) ----------------------------------------------

/// [1, 2, ..., ratio, ..., 2, 1] (length 2*ratio-1), divided by ratio when normalize.
Tensor bilinear_kernel_1d(std::int64_t ratio, bool normalize = true, DType dtype = DType::float32);
/// Outer product of the 1-D kernels of (ratio_rows, ratio_cols).
Tensor bilinear_kernel_2d(std::array<std::int64_t, 2> ratio, bool normalize = true,
                          DType dtype = DType::float32);
Tensor bilinear_kernel_2d(std::int64_t ratio, bool normalize = true, DType dtype = DType::float32);
/// Upsamples (B, C, rows, cols) by an integer ratio with transposed convolutions, as
/// Theano does (edge replication by one pixel; even ratios keep Theano's half-pixel shift).
/// rows and cols must be known when the graph is built; batch_size/num_input_channels
/// stand in for unknown batch/channel dims (kUnknown: take the static shape).
Var bilinear_upsampling(const Var& input, std::int64_t ratio, std::int64_t batch_size = kUnknown,
                        std::int64_t num_input_channels = kUnknown, bool use_1D_kernel = true);
/// Fractional ratio p/q per axis ((p, q) for both axes, or one pair per axis); output
/// size ceil(size * p / q). Implemented as a valid convolution of the zero-padded bilinear
/// kernel by the edge-padded image (dilation p, stride q).
Var frac_bilinear_upsampling(const Var& input, std::pair<std::int64_t, std::int64_t> frac_ratio);
Var frac_bilinear_upsampling(const Var& input, std::pair<std::int64_t, std::int64_t> rows_ratio,
                             std::pair<std::int64_t, std::int64_t> cols_ratio);

// ---- older entry points ------------------------------------------------------------

/// Theano's conv3D: V (batch, row, column, time, in channel), W (out channel, row, column,
/// time, in channel), b (out channel), strides d (3); valid cross-correlation plus bias,
/// result (batch, row, column, time, out channel).
Var conv3D(const Var& V, const Var& W, const Var& b, std::vector<std::int64_t> d = {1, 1, 1});
/// conv2d/conv3d that ask for the FFT implementation for this node.
Var conv2d_fft(const Var& input, const Var& filters, const ConvOptions& options = {});
Var conv3d_fft(const Var& input, const Var& filters, const ConvOptions& options = {});

}  // namespace convgraph
