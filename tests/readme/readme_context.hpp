#pragma once
// What the README's code fragments take from their surroundings, with real values, so the
// generated test can compile and run each fragment (tests/readme/readme_examples.cmake).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <convgraph/convgraph.hpp>

namespace convgraph::readme_context {

/// A batch of 4 flattened 28x28 images and one-hot labels (the SGD example).
inline const Tensor X = Tensor::full(DType::float32, {4, 784}, 0.5);
inline const Tensor Y = [] {
  Tensor y = Tensor::zeros(DType::float32, {4, 10});
  for (std::int64_t i = 0; i < 4; ++i) y.at<float>({i, i}) = 1.0f;
  return y;
}();

/// A convolution's output and batch-norm parameters over its 16 channels.
inline const Var conv_out = input(DType::float32, {2, 16, 6, 6}, "conv_out");
inline const Var gamma = input(DType::float32, {16}, "gamma");
inline const Var beta = input(DType::float32, {16}, "beta");

}  // namespace convgraph::readme_context
