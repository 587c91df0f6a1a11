// The convolution descriptors: BorderMode, ConvParams, the shape arithmetic (Theano's
// helpers) and the shape checks shared by AbstractConvOp::infer and ConvProblem::make.
#include "convgraph/conv/conv_params.hpp"

#include <sstream>

#include "convgraph/core/error.hpp"
#include "core/checked_math.hpp"

namespace convgraph {

namespace {
constexpr bool known(std::int64_t v) { return v >= 0; }

using detail::checked_add;
using detail::checked_mul;
using detail::checked_sub;

// Dilated kernel extent (k - 1) * d + 1, checked (d >= 1 here).
std::int64_t dilated(std::string_view who, std::int64_t k, std::int64_t d) {
  return checked_add(checked_mul(k - 1, d, who, "the dilated kernel size (k - 1) * dilation"), 1, who,
                     "the dilated kernel size");
}

std::string join(const std::vector<std::int64_t>& v) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ')';
  return os.str();
}

std::int64_t axis_value(const std::vector<std::int64_t>& v, std::size_t axis, const char* who,
                        const char* what) {
  if (v.empty()) return 1;
  if (axis >= v.size())
    throw ValueError(msg(who, ": ", what, " ", join(v), " has fewer entries than the ", axis + 1,
                         " spatial axes of the shapes"));
  return v[axis];
}

// Stride and dilation divide and multiply sizes: a value below 1 would divide by zero or
// silently produce nonsense, so every helper rejects it up front.
void check_factors(const char* who, std::int64_t subsample, std::int64_t dilation) {
  if (subsample < 1) throw ValueError(msg(who, ": subsample (stride) must be >= 1, got ", subsample));
  if (dilation < 1) throw ValueError(msg(who, ": filter_dilation must be >= 1, got ", dilation));
}

// Explicit pads of one axis, rejecting negative values (Theano: "border_mode must be >= 0").
std::pair<std::int64_t, std::int64_t> checked_pads(const char* who, const BorderMode& border, int axis,
                                                   std::int64_t dk) {
  auto pads = border.axis_pads(axis, dk);
  if (border.kind == BorderKind::explicit_pads && (pads.first < 0 || pads.second < 0))
    throw ValueError(msg(who, ": border_mode must be >= 0, got ", border.to_string()));
  return pads;
}
// Per-axis pads must match the number of spatial axes (a single pair applies to all).
void check_border_length(const char* who, const BorderMode& border, std::size_t nd) {
  if (border.kind == BorderKind::explicit_pads && border.pads.size() != 1 && border.pads.size() != nd)
    throw ValueError(msg(who, ": border_mode ", border.to_string(), " has ", border.pads.size(),
                         " entries but the shapes have ", nd, " spatial axes"));
}
}  // namespace

BorderMode::BorderMode(std::string_view mode) {
  if (mode == "valid") kind = BorderKind::valid;
  else if (mode == "full") kind = BorderKind::full;
  else if (mode == "half" || mode == "same") kind = BorderKind::half;
  else
    throw ValueError(msg("border_mode: unknown mode '", mode,
                         "'; valid: 'valid', 'full', 'half' (alias 'same'), an int, per-axis "
                         "ints or per-axis (pre, post) pairs"));
}

BorderMode::BorderMode(std::initializer_list<std::int64_t> per_axis)
    : kind(BorderKind::explicit_pads) {
  for (auto p : per_axis) pads.emplace_back(p, p);
}

std::pair<std::int64_t, std::int64_t> BorderMode::axis_pads(int axis, std::int64_t dk) const {
  switch (kind) {
    case BorderKind::valid: return {0, 0};
    case BorderKind::full: return known(dk) ? std::pair{dk - 1, dk - 1} : std::pair{kUnknown, kUnknown};
    case BorderKind::half: return known(dk) ? std::pair{dk / 2, dk / 2} : std::pair{kUnknown, kUnknown};
    case BorderKind::explicit_pads:
      if (pads.size() == 1) return pads[0];
      if (axis < 0 || static_cast<std::size_t>(axis) >= pads.size())
        throw ValueError(msg("border_mode ", to_string(), " has ", pads.size(),
                             " entries, but spatial axis ", axis, " was asked for"));
      return pads[static_cast<std::size_t>(axis)];
  }
  return {0, 0};
}

std::string BorderMode::to_string() const {
  switch (kind) {
    case BorderKind::valid: return "valid";
    case BorderKind::full: return "full";
    case BorderKind::half: return "half";
    case BorderKind::explicit_pads: break;
  }
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < pads.size(); ++i) {
    if (i) os << ", ";
    if (pads[i].first == pads[i].second) os << pads[i].first;
    else os << '(' << pads[i].first << ", " << pads[i].second << ')';
  }
  os << ')';
  return os.str();
}

ConvParams ConvParams::normalized(std::string_view op) const {
  ConvParams p = *this;
  if (ndim < 1 || ndim > 3)
    throw ValueError(msg(op, ": number of spatial dimensions must be 1, 2 or 3, got ", ndim));
  const auto n = static_cast<std::size_t>(ndim);
  auto fill = [&](std::vector<std::int64_t>& v, const char* what) {
    if (v.empty()) v.assign(n, 1);
    if (v.size() != n)
      throw ValueError(msg(op, ": ", what, " must have ", ndim, " entries (one per spatial axis), got ",
                           v.size(), " ", join(v)));
    for (auto x : v)
      if (x < 1) throw ValueError(msg(op, ": ", what, " must be >= 1 on every axis, got ", join(v)));
  };
  fill(p.stride, "subsample (stride)");
  fill(p.dilation, "filter_dilation");
  if (groups < 1) throw ValueError(msg(op, ": num_groups must be >= 1, got ", groups));
  if (p.border.kind == BorderKind::explicit_pads) {
    auto& pads = p.border.pads;
    if (pads.size() == 1) pads.assign(n, pads[0]);
    if (pads.size() != n)
      throw ValueError(msg(op, ": border_mode ", border.to_string(), " must have ", ndim,
                           " entries (one per spatial axis), got ", pads.size()));
    for (auto [a, b] : pads)
      if (a < 0 || b < 0)
        throw ValueError(msg(op, ": border_mode must be >= 0 on every axis, got ", border.to_string()));
    bool all_zero = true;
    for (auto [a, b] : pads) all_zero = all_zero && a == 0 && b == 0;
    if (all_zero) p.border = BorderMode("valid");  // Theano normalises (0, 0) to 'valid'
  }
  return p;
}

std::string ConvParams::to_string() const {
  std::ostringstream os;
  os << "border=" << border.to_string() << " subsample=" << join(stride)
     << " dilation=" << join(dilation) << " flip=" << (filter_flip ? "true" : "false")
     << " groups=" << groups;
  if (compute_dtype) os << " compute=" << dtype_name(*compute_dtype);
  if (!allow_fft) os << " no_fft";
  if (request_fft) os << " fft";
  return os.str();
}

std::int64_t conv_output_size(std::int64_t i, std::int64_t k, std::int64_t s, std::int64_t d,
                              std::int64_t p0, std::int64_t p1) {
  constexpr std::string_view who = "conv_output_size";
  check_factors("conv_output_size", s, d);
  if (!known(i) || !known(k) || !known(p0) || !known(p1)) return kUnknown;
  const std::int64_t dk = dilated(who, k, d);
  const std::int64_t padded = checked_add(checked_add(i, p0, who, "input size + padding"), p1, who, "input size + padding");
  // Python floor division: a negative numerator must round down.
  return checked_add(detail::floor_div(checked_sub(padded, dk, who, "padded input size - dilated kernel size"), s), 1,
                     who, "output size (padded input - dilated kernel) / stride + 1");
}

std::int64_t get_conv_shape_1axis(std::int64_t image, std::int64_t kernel, const BorderMode& border,
                                  int axis, std::int64_t subsample, std::int64_t dilation) {
  check_factors("get_conv_shape_1axis", subsample, dilation);
  if (!known(kernel) || !known(image)) return kUnknown;
  const std::int64_t dk = dilated("get_conv_shape_1axis", kernel, dilation);
  auto [p0, p1] = checked_pads("get_conv_shape_1axis", border, axis, dk);
  return conv_output_size(image, kernel, subsample, dilation, p0, p1);
}

std::vector<std::int64_t> get_conv_output_shape(const std::vector<std::int64_t>& image,
                                                const std::vector<std::int64_t>& kernel,
                                                const BorderMode& border,
                                                const std::vector<std::int64_t>& subsample,
                                                const std::vector<std::int64_t>& dilation) {
  if (image.size() < 3 || kernel.size() != image.size())
    throw ShapeError(msg("get_conv_output_shape: image ", join(image), " and kernel ", join(kernel),
                         " must have the same rank, 3 to 5"));
  const std::size_t nd = image.size() - 2;
  check_border_length("get_conv_output_shape", border, nd);
  std::vector<std::int64_t> out{image[0], kernel[0]};
  for (std::size_t a = 0; a < nd; ++a)
    out.push_back(get_conv_shape_1axis(image[a + 2], kernel[a + 2], border, static_cast<int>(a),
                                       axis_value(subsample, a, "get_conv_output_shape", "subsample"),
                                       axis_value(dilation, a, "get_conv_output_shape", "filter_dilation")));
  return out;
}

std::int64_t get_conv_gradinputs_shape_1axis(std::int64_t kernel, std::int64_t top,
                                             const BorderMode& border, int axis,
                                             std::int64_t subsample, std::int64_t dilation) {
  check_factors("get_conv_gradinputs_shape_1axis", subsample, dilation);
  if (!known(kernel) || !known(top) || subsample != 1) return kUnknown;
  constexpr std::string_view who = "get_conv_gradinputs_shape_1axis";
  const std::int64_t dk = dilated(who, kernel, dilation);
  auto [p0, p1] = checked_pads("get_conv_gradinputs_shape_1axis", border, axis, dk);
  if (!known(p0) || !known(p1)) return kUnknown;
  // top + dk - 1 - p0 - p1, every step checked.
  const std::int64_t grown = checked_add(top, dk - 1, who, "output size + dilated kernel size - 1");
  return checked_sub(checked_sub(grown, p0, who, "output size + dilated kernel size - 1 - padding"), p1, who,
                     "output size + dilated kernel size - 1 - padding");
}

std::vector<std::int64_t> get_conv_gradinputs_shape(const std::vector<std::int64_t>& kernel,
                                                    const std::vector<std::int64_t>& top,
                                                    const BorderMode& border,
                                                    const std::vector<std::int64_t>& subsample,
                                                    const std::vector<std::int64_t>& dilation,
                                                    std::int64_t groups) {
  if (top.size() < 3 || kernel.size() != top.size())
    throw ShapeError(msg("get_conv_gradinputs_shape: kernel ", join(kernel), " and top ", join(top),
                         " must have the same rank, 3 to 5"));
  if (groups < 1) throw ValueError(msg("get_conv_gradinputs_shape: num_groups must be >= 1, got ", groups));
  const std::size_t nd = top.size() - 2;
  check_border_length("get_conv_gradinputs_shape", border, nd);
  std::vector<std::int64_t> out{
      top[0], known(kernel[1]) ? checked_mul(kernel[1], groups, "get_conv_gradinputs_shape", "kernel channels * num_groups")
                               : kUnknown};
  for (std::size_t a = 0; a < nd; ++a)
    out.push_back(get_conv_gradinputs_shape_1axis(
        kernel[a + 2], top[a + 2], border, static_cast<int>(a),
        axis_value(subsample, a, "get_conv_gradinputs_shape", "subsample"),
        axis_value(dilation, a, "get_conv_gradinputs_shape", "filter_dilation")));
  return out;
}

std::int64_t get_conv_gradweights_shape_1axis(std::int64_t image, std::int64_t top,
                                              const BorderMode& border, int axis,
                                              std::int64_t subsample, std::int64_t dilation) {
  check_factors("get_conv_gradweights_shape_1axis", subsample, dilation);
  if (border.kind == BorderKind::explicit_pads) (void)checked_pads("get_conv_gradweights_shape_1axis", border, axis, 0);
  if (!known(image) || !known(top) || subsample != 1 || border.kind == BorderKind::half)
    return kUnknown;
  std::int64_t k;  // dilated extent minus one
  if (border.kind == BorderKind::full) {
    // o = i + dk - 1  =>  dk - 1 = o - i
    k = top - image;
  } else {
    auto [p0, p1] = border.axis_pads(axis, 0);
    constexpr std::string_view who = "get_conv_gradweights_shape_1axis";
    k = checked_add(checked_add(image, p0, who, "input size + padding"), p1, who, "input size + padding") - top;
  }
  if (k < 0 || k % dilation != 0) return kUnknown;
  return checked_add(k / dilation, 1, "get_conv_gradweights_shape_1axis", "filter size (extent - 1) / dilation + 1");
}

std::vector<std::int64_t> get_conv_gradweights_shape(const std::vector<std::int64_t>& image,
                                                     const std::vector<std::int64_t>& top,
                                                     const BorderMode& border,
                                                     const std::vector<std::int64_t>& subsample,
                                                     const std::vector<std::int64_t>& dilation,
                                                     std::int64_t groups) {
  if (top.size() < 3 || image.size() != top.size())
    throw ShapeError(msg("get_conv_gradweights_shape: image ", join(image), " and top ", join(top),
                         " must have the same rank, 3 to 5"));
  if (groups < 1) throw ValueError(msg("get_conv_gradweights_shape: num_groups must be >= 1, got ", groups));
  const std::size_t nd = top.size() - 2;
  check_border_length("get_conv_gradweights_shape", border, nd);
  std::vector<std::int64_t> out{top[1], known(image[1]) ? image[1] / groups : kUnknown};
  for (std::size_t a = 0; a < nd; ++a)
    out.push_back(get_conv_gradweights_shape_1axis(
        image[a + 2], top[a + 2], border, static_cast<int>(a),
        axis_value(subsample, a, "get_conv_gradweights_shape", "subsample"),
        axis_value(dilation, a, "get_conv_gradweights_shape", "filter_dilation")));
  return out;
}

bool check_conv_gradinputs_shape(const std::vector<std::int64_t>& image,
                                 const std::vector<std::int64_t>& kernel,
                                 const std::vector<std::int64_t>& output, const BorderMode& border,
                                 const std::vector<std::int64_t>& subsample,
                                 const std::vector<std::int64_t>& dilation) {
  // Theano answers False (rather than raising) for shapes of different ranks.
  if (image.size() != kernel.size() || image.size() != output.size() || image.size() < 3) return false;
  const auto computed = get_conv_output_shape(image, kernel, border, subsample, dilation);
  for (std::size_t i = 0; i < output.size(); ++i)
    if (known(output[i]) && known(computed[i]) && output[i] != computed[i]) return false;
  return true;
}

void assert_conv_shape(const std::vector<std::int64_t>& shape, std::string_view op) {
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == kUnknown) continue;
    if (i < 2 && shape[i] < 0)
      throw ShapeError(msg(op, ": the convolution would produce an invalid shape (dim[", i, "]: ",
                           shape[i], " < 0) in ", join(shape)));
    if (i >= 2 && shape[i] <= 0)
      throw ShapeError(msg(op, ": the convolution would produce an invalid shape (dim[", i, "]: ",
                           shape[i], " <= 0) in ", join(shape)));
  }
}

std::string_view direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::forward: return "fwd";
    case ConvDirection::grad_inputs: return "bwd_data";
    case ConvDirection::grad_weights: return "bwd_filter";
  }
  return "?";
}

void check_conv_channels(const Shape& x, const Shape& w, std::int64_t G, std::string_view op) {
  if (known(x[1]) && x[1] % G != 0)
    throw ShapeError(msg(op, ": input channels ", x[1], " (input ", shape_to_string(x),
                         ") are not divisible by num_groups ", G));
  if (known(w[0]) && w[0] % G != 0)
    throw ShapeError(msg(op, ": filter count ", w[0], " (filters ", shape_to_string(w),
                         ") is not divisible by num_groups ", G));
  if (known(x[1]) && known(w[1]) && x[1] != checked_mul(w[1], G, op, "filter channels * num_groups"))
    throw ShapeError(msg(op, ": channels mismatch: input ", shape_to_string(x), " has ", x[1],
                         " channels but filters ", shape_to_string(w), " expect ", w[1], " per group x num_groups ",
                         G, " = ", w[1] * G));
}

std::int64_t conv_output_axis(const ConvParams& p, int axis, const Shape& x, const Shape& w, std::string_view op) {
  const auto a = static_cast<std::size_t>(axis);
  const std::int64_t i = x[a + 2], k = w[a + 2];
  const std::int64_t dk = known(k) ? dilated(op, k, p.dilation[a]) : kUnknown;
  const auto [p0, p1] = p.border.axis_pads(axis, dk);
  std::int64_t o;
  try {
    o = conv_output_size(i, k, p.stride[a], p.dilation[a], p0, p1);
  } catch (const ShapeError& e) {  // an overflow: name the op and the geometry too
    throw ShapeError(msg(op, ": spatial axis ", a, ": ", e.what(), " (input ", shape_to_string(x), ", filters ",
                         shape_to_string(w), ", ", p.to_string(), ")"));
  }
  // conv_output_size says kUnknown (-1) for unknown operands, but -1 is also a real
  // (invalid) size: decide from the operands.
  if (known(i) && known(k) && known(p0) && known(p1) && o < 1)
    throw ShapeError(msg(op, ": output size of spatial axis ", a, " would be ", o, " (below 1): input size ", i,
                         " + padding ", p0, "+", p1, " is smaller than the dilated kernel ", dk, " (input ",
                         shape_to_string(x), ", filters ", shape_to_string(w), ", ", p.to_string(), ")"));
  return o;
}

}  // namespace convgraph
