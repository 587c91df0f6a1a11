#pragma once
/// Dense algebra and the neural-network ops around convolutions.
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// Matrix product with numpy matmul rules: 1-D operands act as a row (a) or column (b)
/// vector and that axis is dropped from the result; for rank >= 3 the leading axes are a
/// batch that broadcasts. Operands share one dtype (float32/float64/int32/int64).
/// dot is the same op (numpy dot for 1-D/2-D; batched matmul for rank >= 3).
Var dot(const Var& a, const Var& b);
Var matmul(const Var& a, const Var& b);
/// Softmax / log-softmax over the last axis (float dtypes, rank >= 1; stable for large
/// inputs). Their gradients are single fused ops of the forward output.
Var softmax(const Var& x);
Var log_softmax(const Var& x);
/// -sum(targets * log(probs), last axis): targets one-hot/probabilities with probs' shape,
/// or int class indices of shape probs.shape[:-1] (an index outside [0, classes) is a
/// ValueError when the function runs).
Var categorical_crossentropy(const Var& probs, const Var& targets);

struct PoolOptions {
  std::vector<std::int64_t> window{2, 2};
  std::vector<std::int64_t> stride;   ///< empty = window
  std::vector<std::int64_t> padding{0, 0};
  bool ignore_border = true;          ///< Theano: true drops partial windows
  bool include_padding_in_average = false;
};
/// 2-D pooling over the last two axes of a (..., H, W) tensor. Output length per axis
/// (Theano's rule): ignore_border: (n + 2 pad - window) / stride + 1; otherwise partial
/// windows at the end are kept. Padding must be smaller than the window and needs
/// ignore_border. The average divides by the window clipped to the input, or to the padded
/// input with include_padding_in_average. max_pool2d also accepts int32/int64.
Var max_pool2d(const Var& x, const PoolOptions& options = {});
Var avg_pool2d(const Var& x, const PoolOptions& options = {});
/// The pooling gradients as ops: gx from the pooled output's gradient gy. max routes each
/// gy to its window's first maximum of x; avg spreads gy over the window (x only gives the
/// shape). Both are differentiable (second-order autodiff works).
Var max_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options = {});
Var avg_pool2d_grad(const Var& x, const Var& gy, const PoolOptions& options = {});

}  // namespace convgraph
