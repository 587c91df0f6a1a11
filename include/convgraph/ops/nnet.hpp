#pragma once
/// Dense algebra and the neural-network ops around convolutions.
#include <cstdint>
#include <vector>

#include "convgraph/core/graph.hpp"
#include "convgraph/ops/pool.hpp"  // pooling was declared here

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
/// When probs is softmax(z), the log is taken as log_softmax(z), so the loss stays finite
/// where a probability underflows to 0.
Var categorical_crossentropy(const Var& probs, const Var& targets);

/// x + b with b of shape (C,) added along axis 1 of x, shaped (N, C, ...) (rank >= 2):
/// the bias of a convolution or dense layer. x and b share a float dtype. The gradient for
/// b is one per-channel reduction op (bias_add_grad: sum over every axis but 1).
Var bias_add(const Var& x, const Var& b);

}  // namespace convgraph
