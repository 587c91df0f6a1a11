// Theano-style and cuDNN-style builders of the abstract convolution nodes.
#include <memory>

#include "convgraph/core/error.hpp"
#include "convgraph/ops/conv.hpp"
#include "ops/conv_builders.hpp"

namespace convgraph {

namespace conv_detail {

void check_rank(const Var& v, int ndim, std::string_view fn, const char* arg) {
  if (v.rank() != ndim + 2)
    throw ShapeError(msg(fn, ": argument '", arg, "' must have rank ", ndim + 2, " (2 + ", ndim,
                         " spatial dims), got ", v.type().to_string()));
}

Var with_hint(const Var& v, const Shape& hint, std::string_view fn, const char* what) {
  if (hint.empty()) return v;
  if (static_cast<int>(hint.size()) != v.rank())
    throw ValueError(msg(fn, ": ", what, " ", shape_to_string(hint), " must have ", v.rank(),
                         " entries (the rank of the operand, ", v.type().to_string(), "), got ", hint.size()));
  return assert_shape(v, hint, msg(fn, ": shape of the operand does not match the given ", what));
}

ConvParams params_from(const ConvOptions& o, int ndim) {
  ConvParams p;
  p.ndim = ndim;
  p.border = o.border_mode;
  p.stride = o.subsample;
  p.dilation = o.filter_dilation;
  p.filter_flip = o.filter_flip;
  p.groups = o.num_groups;
  p.compute_dtype = o.compute_dtype;
  p.name = o.name;
  p.allow_fft = o.allow_fft;
  return p;
}

Var conv_node(ConvDirection dir, const ConvParams& p, const Var& a, const Var& b, Shape target) {
  return apply(std::make_shared<AbstractConvOp>(dir, p, std::move(target)), {a, b}, p.name);
}

Var conv_forward(std::string_view fn, int ndim, const Var& input, const Var& filters, const ConvOptions& o,
                 bool request_fft) {
  check_rank(input, ndim, fn, "input");
  check_rank(filters, ndim, fn, "filters");
  ConvParams p = params_from(o, ndim);
  if (request_fft && !o.allow_fft)
    throw ValueError(msg(fn, ": allow_fft=false contradicts the FFT request of this entry point"));
  p.request_fft = request_fft;
  return conv_node(ConvDirection::forward, p, with_hint(input, o.input_shape, fn, "input_shape"),
                   with_hint(filters, o.filter_shape, fn, "filter_shape"), {});
}

namespace {
// A mandatory target shape given twice (argument and options) must agree.
Shape merged_target(std::string_view fn, const char* what, Shape target, const Shape& hint) {
  if (hint.empty()) return target;
  if (hint.size() != target.size())
    throw ValueError(msg(fn, ": options.", what, " ", shape_to_string(hint), " and the ", what,
                         " argument ", shape_to_string(target), " differ in length"));
  for (std::size_t i = 0; i < hint.size(); ++i) {
    if (target[i] < 0) target[i] = hint[i];
    else if (hint[i] >= 0 && hint[i] != target[i])
      throw ValueError(msg(fn, ": options.", what, " ", shape_to_string(hint), " disagrees with the ",
                           what, " argument ", shape_to_string(target), " at dim ", i));
  }
  return target;
}

void check_target_length(std::string_view fn, const char* what, const Shape& target, int ndim) {
  if (static_cast<int>(target.size()) != ndim + 2)
    throw ValueError(msg(fn, ": ", what, " ", shape_to_string(target), " must have ", ndim + 2,
                         " entries (2 + ", ndim, " spatial dims), got ", target.size()));
}
}  // namespace

Var conv_grad_inputs(std::string_view fn, int ndim, const Var& output_grad, const Var& filters,
                     Shape input_shape, const ConvOptions& o) {
  check_rank(output_grad, ndim, fn, "output_grad");
  check_rank(filters, ndim, fn, "filters");
  check_target_length(fn, "input_shape", input_shape, ndim);
  input_shape = merged_target(fn, "input_shape", std::move(input_shape), o.input_shape);
  return conv_node(ConvDirection::grad_inputs, params_from(o, ndim), with_hint(filters, o.filter_shape, fn, "filter_shape"),
                   output_grad, std::move(input_shape));
}

Var conv_grad_weights(std::string_view fn, int ndim, const Var& input, const Var& output_grad,
                      Shape filter_shape, const ConvOptions& o) {
  check_rank(input, ndim, fn, "input");
  check_rank(output_grad, ndim, fn, "output_grad");
  check_target_length(fn, "filter_shape", filter_shape, ndim);
  filter_shape = merged_target(fn, "filter_shape", std::move(filter_shape), o.filter_shape);
  return conv_node(ConvDirection::grad_weights, params_from(o, ndim), with_hint(input, o.input_shape, fn, "input_shape"),
                   output_grad, std::move(filter_shape));
}

}  // namespace conv_detail

using namespace conv_detail;

Var conv1d(const Var& x, const Var& w, const ConvOptions& o) { return conv_forward("conv1d", 1, x, w, o, false); }
Var conv2d(const Var& x, const Var& w, const ConvOptions& o) { return conv_forward("conv2d", 2, x, w, o, false); }
Var conv3d(const Var& x, const Var& w, const ConvOptions& o) { return conv_forward("conv3d", 3, x, w, o, false); }
Var conv2d_fft(const Var& x, const Var& w, const ConvOptions& o) { return conv_forward("conv2d_fft", 2, x, w, o, true); }
Var conv3d_fft(const Var& x, const Var& w, const ConvOptions& o) { return conv_forward("conv3d_fft", 3, x, w, o, true); }

Var conv1d_grad_wrt_inputs(const Var& gy, const Var& w, Shape s, const ConvOptions& o) {
  return conv_grad_inputs("conv1d_grad_wrt_inputs", 1, gy, w, std::move(s), o);
}
Var conv2d_grad_wrt_inputs(const Var& gy, const Var& w, Shape s, const ConvOptions& o) {
  return conv_grad_inputs("conv2d_grad_wrt_inputs", 2, gy, w, std::move(s), o);
}
Var conv3d_grad_wrt_inputs(const Var& gy, const Var& w, Shape s, const ConvOptions& o) {
  return conv_grad_inputs("conv3d_grad_wrt_inputs", 3, gy, w, std::move(s), o);
}
Var conv1d_grad_wrt_weights(const Var& x, const Var& gy, Shape s, const ConvOptions& o) {
  return conv_grad_weights("conv1d_grad_wrt_weights", 1, x, gy, std::move(s), o);
}
Var conv2d_grad_wrt_weights(const Var& x, const Var& gy, Shape s, const ConvOptions& o) {
  return conv_grad_weights("conv2d_grad_wrt_weights", 2, x, gy, std::move(s), o);
}
Var conv3d_grad_wrt_weights(const Var& x, const Var& gy, Shape s, const ConvOptions& o) {
  return conv_grad_weights("conv3d_grad_wrt_weights", 3, x, gy, std::move(s), o);
}

// ---- cuDNN style ---------------------------------------------------------------------

ConvAttributes& ConvAttributes::set_padding(std::vector<std::int64_t> p) {
  pre_ = p;
  post_ = std::move(p);
  return *this;
}
ConvAttributes& ConvAttributes::set_pre_padding(std::vector<std::int64_t> p) { pre_ = std::move(p); return *this; }
ConvAttributes& ConvAttributes::set_post_padding(std::vector<std::int64_t> p) { post_ = std::move(p); return *this; }
ConvAttributes& ConvAttributes::set_stride(std::vector<std::int64_t> s) { stride_ = std::move(s); return *this; }
ConvAttributes& ConvAttributes::set_dilation(std::vector<std::int64_t> d) { dilation_ = std::move(d); return *this; }
ConvAttributes& ConvAttributes::set_name(std::string n) { name_ = std::move(n); return *this; }
ConvAttributes& ConvAttributes::set_compute_data_type(DType t) { compute_ = t; return *this; }
ConvAttributes& ConvAttributes::set_convolution_mode(ConvolutionMode m) { mode_ = m; return *this; }
ConvAttributes& ConvAttributes::set_input_dims(Shape d) { input_dims_ = std::move(d); return *this; }
ConvAttributes& ConvAttributes::set_filter_dims(Shape d) { filter_dims_ = std::move(d); return *this; }
ConvAttributes& ConvAttributes::set_allow_fft(bool a) { allow_fft_ = a; return *this; }
ConvAttributes& ConvAttributes::set_group_count(std::int64_t g) {
  if (g < 1) throw ValueError(msg("ConvAttributes::set_group_count: groups must be >= 1, got ", g));
  groups_ = g;
  return *this;
}

namespace {
std::string ints_text(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}
}  // namespace

ConvParams ConvAttributes::to_params(int ndim, std::int64_t groups, std::string_view op) const {
  const auto n = static_cast<std::size_t>(ndim);
  auto sized = [&](const std::vector<std::int64_t>& v, std::int64_t fill, const char* what) {
    if (v.empty()) return std::vector<std::int64_t>(n, fill);
    if (v.size() != n)
      throw ValueError(msg(op, ": ", what, " ", ints_text(v), " has ", v.size(), " entries but the tensors have ",
                           ndim, " spatial dims"));
    return v;
  };
  const auto pre = sized(pre_, 0, "pre_padding");
  const auto post = sized(post_, 0, "post_padding");
  std::vector<std::pair<std::int64_t, std::int64_t>> pads;
  for (std::size_t a = 0; a < n; ++a) pads.emplace_back(pre[a], post[a]);
  ConvParams p;
  p.ndim = ndim;
  p.border = BorderMode(std::move(pads));
  p.stride = sized(stride_, 1, "stride");
  p.dilation = sized(dilation_, 1, "dilation");
  p.filter_flip = mode_ == ConvolutionMode::CONVOLUTION;
  p.groups = groups;
  p.compute_dtype = compute_;
  p.name = name_;
  p.allow_fft = allow_fft_;
  return p;
}

std::int64_t ConvAttributes::groups_for(std::int64_t channels, std::int64_t per_group, std::string_view op) const {
  if (channels < 0 || per_group < 0) return groups_ > 0 ? groups_ : 1;
  if (per_group == 0 || channels % per_group != 0)
    throw ShapeError(msg(op, ": the image has ", channels, " channels, not a multiple of the filter's ",
                         per_group, " channels per group (filter dim 1)"));
  const std::int64_t g = channels / per_group;
  if (groups_ > 0 && groups_ != g)
    throw ValueError(msg(op, ": set_group_count(", groups_, ") disagrees with the shapes: ", channels,
                         " channels / ", per_group, " per group = ", g, " groups"));
  return g;
}

namespace {
int spatial_dims(const Var& v, std::string_view op, const char* arg) {
  const int nd = v.rank() - 2;
  if (nd < 1 || nd > 3)
    throw ShapeError(msg(op, ": '", arg, "' must have rank 3, 4 or 5 (batch, channels, 1-3 spatial dims), got ",
                         v.type().to_string()));
  return nd;
}
}  // namespace

Var conv_fprop(const Var& image, const Var& filter, const ConvAttributes& a) {
  const int nd = spatial_dims(image, "conv_fprop", "image");
  check_rank(filter, nd, "conv_fprop", "filter");
  const auto g = a.groups_for(image.shape()[1], filter.shape()[1], "conv_fprop");
  return conv_node(ConvDirection::forward, a.to_params(nd, g, "conv_fprop"), image, filter, {});
}

Var conv_dgrad(const Var& loss, const Var& filter, const ConvAttributes& a) {
  if (a.input_dims().empty())
    throw ValueError("conv_dgrad: the DX dims are not set (set_input_dims): output dimension "
                     "inferencing is not possible, several input sizes give the same output size");
  return conv_dgrad(loss, filter, a.input_dims(), a);
}

Var conv_dgrad(const Var& loss, const Var& filter, Shape dx, const ConvAttributes& a) {
  const int nd = spatial_dims(loss, "conv_dgrad", "loss");
  check_rank(filter, nd, "conv_dgrad", "filter");
  if (static_cast<int>(dx.size()) != nd + 2)
    throw ValueError(msg("conv_dgrad: DX dims ", shape_to_string(dx), " must have ", nd + 2, " entries, got ",
                         dx.size()));
  const auto g = a.groups_for(dx[1], filter.shape()[1], "conv_dgrad");
  return conv_node(ConvDirection::grad_inputs, a.to_params(nd, g, "conv_dgrad"), filter, loss, std::move(dx));
}

Var conv_wgrad(const Var& image, const Var& loss, const ConvAttributes& a) {
  if (a.filter_dims().empty())
    throw ValueError("conv_wgrad: the DW dims are not set (set_filter_dims): the filter size cannot be "
                     "inferred in general");
  return conv_wgrad(image, loss, a.filter_dims(), a);
}

Var conv_wgrad(const Var& image, const Var& loss, Shape dw, const ConvAttributes& a) {
  const int nd = spatial_dims(image, "conv_wgrad", "image");
  check_rank(loss, nd, "conv_wgrad", "loss");
  if (static_cast<int>(dw.size()) != nd + 2)
    throw ValueError(msg("conv_wgrad: DW dims ", shape_to_string(dw), " must have ", nd + 2, " entries, got ",
                         dw.size()));
  const auto g = a.groups_for(image.shape()[1], dw[1], "conv_wgrad");
  return conv_node(ConvDirection::grad_weights, a.to_params(nd, g, "conv_wgrad"), image, loss, std::move(dw));
}

}  // namespace convgraph
