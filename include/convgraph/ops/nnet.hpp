#pragma once
/// Dense algebra and the neural-network ops around convolutions.
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"

namespace convgraph {

/// Matrix product of 1-D/2-D operands (numpy dot); batched matmul for rank >= 3.
Var dot(const Var& a, const Var& b);
Var matmul(const Var& a, const Var& b);
/// Softmax / log-softmax over the last axis.
Var softmax(const Var& x);
Var log_softmax(const Var& x);
/// -sum(targets * log(probs), last axis): targets one-hot/probabilities with probs' shape,
/// or int class indices of shape probs.shape[:-1].
Var categorical_crossentropy(const Var& probs, const Var& targets);

struct PoolOptions {
  std::vector<std::int64_t> window{2, 2};
  std::vector<std::int64_t> stride;   ///< empty = window
  std::vector<std::int64_t> padding{0, 0};
  bool ignore_border = true;          ///< Theano: true drops partial windows
  bool include_padding_in_average = false;
};
/// 2-D pooling over the last two axes of a (..., H, W) tensor.
Var max_pool2d(const Var& x, const PoolOptions& options = {});
Var avg_pool2d(const Var& x, const PoolOptions& options = {});

}  // namespace convgraph
