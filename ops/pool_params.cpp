// Pooling parameter checks and output-size rules (Theano's Pool.out_shape), for 1 to 3
// pooled axes. The kernels (keys "pool", "pool_grad", "max_pool_grad_grad") are in
// backends/cpu/pool_kernels.cpp.
#include "ops/pool_internal.hpp"

namespace convgraph::detail {

namespace {

const char* const kAxisNames[] = {"(..., columns)", "(..., rows, columns)", "(..., depth, rows, columns)"};

}  // namespace

PoolParams PoolParams::from(const char* op, const PoolOptions& o, PoolMode mode, int dims) {
  if (dims == 0 && (o.window.empty() || o.window.size() > 3))
    throw ValueError(msg(op, ": window ", ints_to_string(o.window),
                         " must have 1, 2 or 3 entries (the number of pooled trailing axes)"));
  const int d = dims ? dims : static_cast<int>(o.window.size());
  auto need = [&](const std::vector<std::int64_t>& v, const char* what) {
    if (v.size() != static_cast<std::size_t>(d))
      throw ValueError(msg(op, ": ", what, " ", ints_to_string(v), " must have ", d, " entries (one per pooled axis)"));
  };
  need(o.window, "window");
  if (!o.stride.empty()) need(o.stride, "stride");
  if (!o.padding.empty()) need(o.padding, "padding");
  PoolParams p;
  p.dims = d;
  p.mode = mode;
  p.ignore_border = o.ignore_border;
  p.inc_pad = o.include_padding_in_average;
  for (int a = 3 - d; a < 3; ++a) {
    const auto i = static_cast<std::size_t>(a - (3 - d));
    p.window[a] = o.window[i];
    p.stride[a] = o.stride.empty() ? o.window[i] : o.stride[i];
    p.pad[a] = o.padding.empty() ? 0 : o.padding[i];
    if (p.window[a] < 1) throw ValueError(msg(op, ": window ", ints_to_string(o.window), " must be >= 1"));
    if (p.stride[a] < 1) throw ValueError(msg(op, ": stride ", ints_to_string(o.stride), " must be >= 1"));
    if (p.pad[a] < 0) throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " must be >= 0"));
    if (p.pad[a] >= p.window[a])
      throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " must be smaller than the window ",
                           ints_to_string(o.window), " (a window would see only padding)"));
    if (!p.ignore_border && p.pad[a] != 0)
      throw ValueError(msg(op, ": padding ", ints_to_string(o.padding), " requires ignore_border=true"));
  }
  return p;
}

std::string PoolParams::op_name() const { return msg(mode == PoolMode::max ? "max" : "avg", "_pool", dims, "d"); }

std::string PoolParams::text() const {
  auto list = [&](const std::int64_t* v) { return ints_to_string(std::vector<std::int64_t>(v + 3 - dims, v + 3)); };
  return msg("window=", list(window), ",stride=", list(stride), ",padding=", list(pad),
             ",ignore_border=", ignore_border, ",include_padding_in_average=", inc_pad);
}

std::int64_t PoolParams::out_size(int a, std::int64_t n) const {
  if (n < 0) return kUnknown;
  const std::int64_t w = window[a], s = stride[a];
  if (ignore_border) {
    const std::int64_t span = n + 2 * pad[a] - w;
    return span < 0 ? 0 : span / s + 1;
  }
  // Partial windows at the end are kept (no padding in this mode).
  if (n == 0) return 0;
  if (s >= w) return (n - 1) / s + 1;
  const std::int64_t extra = n - 1 - w + s;
  return (extra < 0 ? 0 : extra / s) + 1;
}

TensorType PoolParams::output_type(const std::string& op, const TensorType& x) const {
  if (x.rank() < dims)
    throw ShapeError(msg(op, ": input must have rank >= ", dims, " ", kAxisNames[dims - 1], ", got shape ",
                         shape_to_string(x.shape)));
  if (mode == PoolMode::max)
    check_dtype(op, "input", x.dtype, {DType::float32, DType::float64, DType::int32, DType::int64});
  else
    check_dtype(op, "input", x.dtype, {DType::float32, DType::float64});
  TensorType out = x;
  for (int a = 3 - dims; a < 3; ++a) {
    const std::size_t i = x.shape.size() - static_cast<std::size_t>(3 - a);
    const std::int64_t o = out_size(a, x.shape[i]);
    if (o == 0)
      throw ShapeError(msg(op, ": input of shape ", shape_to_string(x.shape), " is too small for window ",
                           ints_to_string(std::vector<std::int64_t>(window + 3 - dims, window + 3)), ", stride ",
                           ints_to_string(std::vector<std::int64_t>(stride + 3 - dims, stride + 3)), ", padding ",
                           ints_to_string(std::vector<std::int64_t>(pad + 3 - dims, pad + 3)),
                           " (output length 0 along axis ", i, ")"));
    out.shape[i] = o;
  }
  return out;
}

void check_pool_gradient(const std::string& op, const PoolParams& p, const TensorType& x, const TensorType& g,
                         const char* what) {
  const TensorType y = p.output_type(op, x);
  bool ok = g.dtype == x.dtype && g.rank() == y.rank();
  for (std::size_t i = 0; ok && i < y.shape.size(); ++i) ok = dims_compatible(g.shape[i], y.shape[i]);
  if (!ok)
    throw ShapeError(msg(op, ": ", what, " ", g.to_string(), " does not match the pooled output ", y.to_string(),
                         " of the input ", x.to_string()));
}

TensorType MaxPoolGradGradOp::infer(const std::vector<TensorType>& in) const {
  check_arity(*this, in.size(), 2);
  bool ok = in[0].dtype == in[1].dtype && in[0].rank() == in[1].rank();
  for (std::size_t i = 0; ok && i < in[0].shape.size(); ++i) ok = dims_compatible(in[0].shape[i], in[1].shape[i]);
  if (!ok)
    throw ShapeError(msg(name(), ": gradient ", in[1].to_string(), " does not match the input ", in[0].to_string()));
  return p_.output_type(name(), in[0]);
}

}  // namespace convgraph::detail
