#pragma once
/// The convolution descriptors, below both the ops and the backends: the parameters of a
/// convolution for 1-3 spatial axes, its direction, and the shape arithmetic and shape
/// checks every implementation agrees on (docs/DESIGN.md, "Semantics"), written once. The op
/// (AbstractConvOp::infer, with unknown dims) and the concrete problem (ConvProblem::make)
/// both validate through the functions at the end of this header.
/// Dilation is the actual factor (1 = dense), never oneDNN's d-1.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "convgraph/core/dtype.hpp"
#include "convgraph/core/tensor.hpp"  // Shape, kUnknown

namespace convgraph {

/// Forward, or the gradient w.r.t. the inputs or the weights (cuDNN's and oneDNN's fwd,
/// bwd_data, bwd_filter).
enum class ConvDirection : std::uint8_t { forward, grad_inputs, grad_weights };
std::string_view direction_name(ConvDirection d);  ///< "fwd", "bwd_data", "bwd_filter"

enum class BorderKind : std::uint8_t { valid, full, half, explicit_pads };

/// Theano's border_mode: "valid", "full", "half" (alias "same"), an int (symmetric on
/// every axis), per-axis ints, or per-axis (pre, post) pairs as cuDNN's pre/post padding.
struct BorderMode {
  BorderKind kind = BorderKind::valid;
  /// explicit_pads only: one (pre, post) pair per axis; a single pair applies to all axes.
  std::vector<std::pair<std::int64_t, std::int64_t>> pads;

  BorderMode() = default;
  BorderMode(const char* mode) : BorderMode(std::string_view(mode)) {}
  BorderMode(std::string_view mode);  ///< throws ValueError for an unknown name
  BorderMode(std::int64_t pad) : kind(BorderKind::explicit_pads), pads{{pad, pad}} {}
  BorderMode(int pad) : BorderMode(std::int64_t{pad}) {}
  BorderMode(std::initializer_list<std::int64_t> per_axis);
  BorderMode(std::vector<std::pair<std::int64_t, std::int64_t>> per_axis_pairs)
      : kind(BorderKind::explicit_pads), pads(std::move(per_axis_pairs)) {}

  /// (pre, post) padding of `axis` for a dilated kernel extent `dk` (kUnknown allowed:
  /// full/half then give kUnknown).
  std::pair<std::int64_t, std::int64_t> axis_pads(int axis, std::int64_t dk) const;
  std::string to_string() const;
  bool operator==(const BorderMode&) const = default;
};

/// Everything that says *what* a convolution computes, besides its operands.
struct ConvParams {
  int ndim = 2;                        ///< spatial axes: 1, 2 or 3
  BorderMode border;                   ///< padding
  std::vector<std::int64_t> stride;    ///< per axis; empty = all 1 (Theano's subsample)
  std::vector<std::int64_t> dilation;  ///< per axis; empty = all 1
  bool filter_flip = true;             ///< true: convolution; false: cross-correlation
  std::int64_t groups = 1;
  std::optional<DType> compute_dtype;  ///< accumulate type; default: the storage dtype
  std::string name;                    ///< user label shown in debugprint and profiles
  bool allow_fft = true;               ///< false: this node refuses FFT (Theano's version='no_fft')
  bool request_fft = false;            ///< conv2d_fft/conv3d_fft: try FFT first for this node

  /// Fills defaulted per-axis vectors and checks every value; throws ValueError naming
  /// `op` and the bad argument.
  ConvParams normalized(std::string_view op) const;
  /// Canonical text of the parameters (equality, hashing, printing, cache keys).
  std::string to_string() const;
  bool operator==(const ConvParams&) const = default;
};

/// Output size of one axis: floor((i + p0 + p1 - dk) / s) + 1 with dk = (k-1)d+1.
/// Any unknown operand gives kUnknown. Does not check that the result is >= 1 (a real
/// result of -1 reads as kUnknown: callers that must tell them apart look at the operands).
/// Arithmetic that overflows int64 is a ShapeError.
std::int64_t conv_output_size(std::int64_t i, std::int64_t k, std::int64_t s, std::int64_t d,
                              std::int64_t p0, std::int64_t p1);

// ---- Theano's shape helpers (kUnknown plays the role of None) -------------------

std::int64_t get_conv_shape_1axis(std::int64_t image, std::int64_t kernel, const BorderMode& border,
                                  int axis, std::int64_t subsample, std::int64_t dilation = 1);
/// (batch, nkern, spatial...) from image (batch, C, spatial...) and kernel (K, C/G, spatial...).
std::vector<std::int64_t> get_conv_output_shape(const std::vector<std::int64_t>& image,
                                                const std::vector<std::int64_t>& kernel,
                                                const BorderMode& border,
                                                const std::vector<std::int64_t>& subsample,
                                                const std::vector<std::int64_t>& dilation = {});
/// Input size of one axis given the output size; kUnknown when ambiguous (stride > 1).
std::int64_t get_conv_gradinputs_shape_1axis(std::int64_t kernel, std::int64_t top,
                                             const BorderMode& border, int axis,
                                             std::int64_t subsample, std::int64_t dilation = 1);
std::vector<std::int64_t> get_conv_gradinputs_shape(const std::vector<std::int64_t>& kernel,
                                                    const std::vector<std::int64_t>& top,
                                                    const BorderMode& border,
                                                    const std::vector<std::int64_t>& subsample,
                                                    const std::vector<std::int64_t>& dilation = {},
                                                    std::int64_t groups = 1);
/// Kernel size of one axis given input and output sizes; kUnknown when ambiguous
/// (stride > 1, or "half", or a dilation that does not divide evenly).
std::int64_t get_conv_gradweights_shape_1axis(std::int64_t image, std::int64_t top,
                                              const BorderMode& border, int axis,
                                              std::int64_t subsample, std::int64_t dilation = 1);
std::vector<std::int64_t> get_conv_gradweights_shape(const std::vector<std::int64_t>& image,
                                                     const std::vector<std::int64_t>& top,
                                                     const BorderMode& border,
                                                     const std::vector<std::int64_t>& subsample,
                                                     const std::vector<std::int64_t>& dilation = {},
                                                     std::int64_t groups = 1);
/// False iff a known dimension of `output` differs from the forward output of image/kernel.
bool check_conv_gradinputs_shape(const std::vector<std::int64_t>& image,
                                 const std::vector<std::int64_t>& kernel,
                                 const std::vector<std::int64_t>& output, const BorderMode& border,
                                 const std::vector<std::int64_t>& subsample,
                                 const std::vector<std::int64_t>& dilation = {});
/// Throws ShapeError if a known dim is invalid: batch/channels < 0, spatial <= 0.
void assert_conv_shape(const std::vector<std::int64_t>& shape, std::string_view op = "conv");

// ---- shape checks of the forward geometry, shared by the op and ConvProblem -------------
// x is (N, C, spatial...), w is (K, C/G, spatial...), params normalized; kUnknown dims are
// skipped. Errors are ShapeErrors that start with `op` and show the shapes involved.

/// C and K divisible by the groups, and C == (C/G) * G.
void check_conv_channels(const Shape& x, const Shape& w, std::int64_t groups, std::string_view op);
/// The output size of spatial axis `axis` (kUnknown when an operand is unknown); an
/// overflow, or a known size below 1, is a ShapeError naming the sizes.
std::int64_t conv_output_axis(const ConvParams& p, int axis, const Shape& x, const Shape& w, std::string_view op);

}  // namespace convgraph
