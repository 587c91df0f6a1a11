// Bilinear kernels and upsampling built from the convolution ops (SEMANTICS 1.7).
#include <numeric>

#include "convgraph/core/error.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "ops/conv_builders.hpp"

namespace convgraph {

namespace {

void check_ratio(std::int64_t r, const char* fn, const char* what) {
  if (r < 1) throw ValueError(msg(fn, ": ", what, " must be >= 1, got ", r));
}

std::vector<double> kernel_1d(std::int64_t ratio, bool normalize) {
  std::vector<double> k;
  for (std::int64_t i = 1; i <= ratio; ++i) k.push_back(static_cast<double>(i));
  for (std::int64_t i = ratio - 1; i >= 1; --i) k.push_back(static_cast<double>(i));
  if (normalize)
    for (auto& v : k) v /= static_cast<double>(ratio);
  return k;
}

// (B, C, rows, cols) -> (B*C, 1, rows + 2, cols + 2): every image on its own, with the
// first and last row and column repeated once so interpolation near the border has a
// neighbour to blend with.
Var edge_padded(const Var& input, std::int64_t flat_batch, std::int64_t rows, std::int64_t cols) {
  const Var up = reshape(input, {flat_batch, 1, rows, cols});
  const Var r = concatenate({slice(up, 2, 0, 1), up, slice(up, 2, rows - 1, rows)}, 2);
  return concatenate({slice(r, 3, 0, 1), r, slice(r, 3, cols - 1, cols)}, 3);
}

struct Dims {
  std::int64_t batch, channels, rows, cols;
  std::int64_t flat() const { return batch >= 0 && channels >= 0 ? batch * channels : kUnknown; }
};

Dims upsampling_dims(const char* fn, const Var& input, std::int64_t batch_size, std::int64_t num_channels) {
  if (input.rank() != 4)
    throw ShapeError(msg(fn, ": input must have rank 4 (batch, channels, rows, cols), got ",
                         input.type().to_string()));
  const Shape& s = input.shape();
  if (s[2] < 1 || s[3] < 1)
    throw ValueError(msg(fn, ": rows and cols of the input must be known when the graph is built (the "
                         "transposed convolutions need the output size), got ", input.type().to_string()));
  auto pick = [&](std::int64_t given, std::int64_t stat, const char* what) {
    if (given >= 0 && stat >= 0 && given != stat)
      throw ShapeError(msg(fn, ": ", what, " ", given, " does not match the input ", input.type().to_string()));
    return given >= 0 ? given : stat;
  };
  return {pick(batch_size, s[0], "batch_size"), pick(num_channels, s[1], "num_input_channels"), s[2], s[3]};
}

// (B*C, 1, h, w) -> (B, C, h, w); at most one of B, C may be unknown.
Var unflatten(const char* fn, const Var& v, const Dims& d, std::int64_t h, std::int64_t w) {
  if (d.batch < 0 && d.channels < 0)
    throw ValueError(msg(fn, ": batch size and channel count are both unknown: pass batch_size or "
                         "num_input_channels"));
  return reshape(v, {d.batch, d.channels, h, w});
}

Tensor filter_of(const std::vector<double>& values, Shape shape, DType dtype) {
  return Tensor::from(values, std::move(shape), dtype);
}

}  // namespace

Tensor bilinear_kernel_1d(std::int64_t ratio, bool normalize, DType dtype) {
  check_ratio(ratio, "bilinear_kernel_1d", "ratio");
  auto k = kernel_1d(ratio, normalize);
  const auto n = static_cast<std::int64_t>(k.size());
  return Tensor::from(k, {n}, dtype);
}

Tensor bilinear_kernel_2d(std::array<std::int64_t, 2> ratio, bool normalize, DType dtype) {
  check_ratio(ratio[0], "bilinear_kernel_2d", "ratio (rows)");
  check_ratio(ratio[1], "bilinear_kernel_2d", "ratio (cols)");
  const auto v = kernel_1d(ratio[0], normalize);
  const auto h = kernel_1d(ratio[1], normalize);
  std::vector<double> k;
  for (double a : v)
    for (double b : h) k.push_back(a * b);
  return Tensor::from(k, {static_cast<std::int64_t>(v.size()), static_cast<std::int64_t>(h.size())}, dtype);
}

Tensor bilinear_kernel_2d(std::int64_t ratio, bool normalize, DType dtype) {
  return bilinear_kernel_2d({ratio, ratio}, normalize, dtype);
}

Var bilinear_upsampling(const Var& input, std::int64_t ratio, std::int64_t batch_size,
                        std::int64_t num_input_channels, bool use_1D_kernel) {
  constexpr const char* fn = "bilinear_upsampling";
  check_ratio(ratio, fn, "ratio");
  if (!is_float(input.dtype()))
    throw TypeError(msg(fn, ": input must be a float tensor, got ", input.type().to_string()));
  const Dims d = upsampling_dims(fn, input, batch_size, num_input_channels);
  const std::int64_t bc = d.flat();
  const Var padded = edge_padded(input, bc, d.rows, d.cols);
  // Output i of the transposed convolution samples the source at (i - (ratio-1)//2) / ratio.
  const std::int64_t pad = 2 * ratio - (ratio - 1) / 2 - 1;
  const std::int64_t klen = 2 * ratio - 1;
  const DType dt = input.dtype();
  const auto k = kernel_1d(ratio, true);
  Var up;
  if (use_1D_kernel) {
    const Var kv = constant(filter_of(k, {1, 1, klen, 1}, dt), "bilinear_kernel_v");
    const Var kh = constant(filter_of(k, {1, 1, 1, klen}, dt), "bilinear_kernel_h");
    const Var rows_up = conv2d_grad_wrt_inputs(
        padded, kv, {bc, 1, d.rows * ratio, d.cols + 2},
        {.border_mode = BorderMode({pad, 0}), .subsample = {ratio, 1}, .filter_flip = true});
    up = conv2d_grad_wrt_inputs(rows_up, kh, {bc, 1, d.rows * ratio, d.cols * ratio},
                                {.border_mode = BorderMode({0, pad}), .subsample = {1, ratio}, .filter_flip = true});
  } else {
    const Var k2 = constant(bilinear_kernel_2d(ratio, true, dt).reshape({1, 1, klen, klen}), "bilinear_kernel");
    up = conv2d_grad_wrt_inputs(padded, k2, {bc, 1, d.rows * ratio, d.cols * ratio},
                                {.border_mode = BorderMode({pad, pad}), .subsample = {ratio, ratio}, .filter_flip = true});
  }
  return unflatten(fn, up, d, d.rows * ratio, d.cols * ratio);
}

Var frac_bilinear_upsampling(const Var& input, std::pair<std::int64_t, std::int64_t> frac_ratio) {
  return frac_bilinear_upsampling(input, frac_ratio, frac_ratio);
}

Var frac_bilinear_upsampling(const Var& input, std::pair<std::int64_t, std::int64_t> rows_ratio,
                             std::pair<std::int64_t, std::int64_t> cols_ratio) {
  constexpr const char* fn = "frac_bilinear_upsampling";
  check_ratio(rows_ratio.first, fn, "rows ratio numerator");
  check_ratio(rows_ratio.second, fn, "rows ratio denominator");
  check_ratio(cols_ratio.first, fn, "cols ratio numerator");
  check_ratio(cols_ratio.second, fn, "cols ratio denominator");
  if (!is_float(input.dtype()))
    throw TypeError(msg(fn, ": input must be a float tensor, got ", input.type().to_string()));
  const Dims d = upsampling_dims(fn, input, kUnknown, kUnknown);
  const std::int64_t gr = std::gcd(rows_ratio.first, rows_ratio.second);
  const std::int64_t gc = std::gcd(cols_ratio.first, cols_ratio.second);
  const std::int64_t p[2] = {rows_ratio.first / gr, cols_ratio.first / gc};
  const std::int64_t q[2] = {rows_ratio.second / gr, cols_ratio.second / gc};
  const std::int64_t size[2] = {d.rows, d.cols};
  // The image (edge padded) becomes the filter, dilated by p; the bilinear kernel, zero
  // padded so that every output position finds its two neighbours, becomes the input.
  // Output j samples the source at (j*q - (p-1)//2) / p; there are ceil(size*p/q) of them.
  std::int64_t lead[2], len[2], klen[2];
  for (int a = 0; a < 2; ++a) {
    const std::int64_t double_pad = (2 * size[a] - 1) * p[a] + 1;
    lead[a] = double_pad / 2;
    klen[a] = 2 * p[a] - 1;
    len[a] = klen[a] + double_pad;
  }
  const Tensor k = bilinear_kernel_2d({p[0], p[1]}, true, DType::float64);
  std::vector<double> padded(static_cast<std::size_t>(len[0] * len[1]), 0.0);
  for (std::int64_t i = 0; i < klen[0]; ++i)
    for (std::int64_t j = 0; j < klen[1]; ++j)
      padded[static_cast<std::size_t>((lead[0] + i) * len[1] + lead[1] + j)] = k.get(i * klen[1] + j);
  const Var pad_kern = constant(Tensor::from(padded, {1, 1, len[0], len[1]}, input.dtype()), "bilinear_kernel_padded");
  const Var filters = edge_padded(input, d.flat(), d.rows, d.cols);
  const Var up = conv2d(pad_kern, filters,
                        {.border_mode = "valid", .subsample = {q[0], q[1]}, .filter_flip = true,
                         .filter_dilation = {p[0], p[1]}});
  const std::int64_t out_r = (size[0] * p[0] + q[0] - 1) / q[0];
  const std::int64_t out_c = (size[1] * p[1] + q[1] - 1) / q[1];
  return unflatten(fn, up, d, out_r, out_c);
}

}  // namespace convgraph
