#pragma once
// Private helpers shared by the convolution DSL files (conv_api.cpp, conv_composite.cpp,
// conv_bilinear.cpp): the one place that turns options into abstract nodes.
#include <string_view>

#include "convgraph/ops/conv.hpp"

namespace convgraph::conv_detail {

/// ShapeError naming `fn` and `arg` unless `v` has rank ndim + 2.
void check_rank(const Var& v, int ndim, std::string_view fn, const char* arg);
/// `v` checked against a shape hint (see ConvOptions::input_shape); `v` when hint is empty.
Var with_hint(const Var& v, const Shape& hint, std::string_view fn, const char* what);
ConvParams params_from(const ConvOptions& options, int ndim);
/// apply() of an AbstractConvOp, the node named after p.name.
Var conv_node(ConvDirection dir, const ConvParams& p, const Var& a, const Var& b, Shape target);
Var conv_forward(std::string_view fn, int ndim, const Var& input, const Var& filters,
                 const ConvOptions& options, bool request_fft);
Var conv_grad_inputs(std::string_view fn, int ndim, const Var& output_grad, const Var& filters,
                     Shape input_shape, const ConvOptions& options);
Var conv_grad_weights(std::string_view fn, int ndim, const Var& input, const Var& output_grad,
                      Shape filter_shape, const ConvOptions& options);

}  // namespace convgraph::conv_detail
