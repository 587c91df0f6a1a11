#pragma once
// A small multi-layer perceptron trained with SGD on three Gaussian blobs it generates.
// Shared by examples/train_mlp.cpp and the test that checks the loss falls. The weights
// are shared variables and sgd() builds their updates, so a training step takes only the
// data and returns only the loss: the weights are updated in place inside the function.
#include <convgraph/convgraph.hpp>
#include <random>
#include <string>

namespace mlp {

struct Result {
  double first_loss = 0, last_loss = 0;
  std::size_t peak_bytes = 0;        // arena of the compiled training step
  std::size_t intermediate_bytes = 0;  // sum of its intermediate tensors, without reuse
  int in_place_updates = 0;            // weight updates computed into the weights' storage
};

inline convgraph::Tensor gaussian(convgraph::Shape shape, double scale, std::mt19937& rng) {
  std::normal_distribution<double> n(0, scale);
  convgraph::Tensor t(convgraph::DType::float32, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, n(rng));
  return t;
}

inline Result train(unsigned seed, int steps, bool verbose = false) {
  using namespace convgraph;
  constexpr int kSamples = 300, kFeatures = 2, kHidden = 32, kClasses = 3;
  std::mt19937 rng(seed);
  // Data: one blob per class around well separated centres; one-hot targets.
  Tensor X(DType::float32, {kSamples, kFeatures}), Y = Tensor::zeros(DType::float32, {kSamples, kClasses});
  std::normal_distribution<double> noise(0, 0.5);
  const double centres[kClasses][2] = {{2, 0}, {-1, 1.7}, {-1, -1.7}};
  for (int i = 0; i < kSamples; ++i) {
    const int c = i % kClasses;
    X.set(i * kFeatures, centres[c][0] + noise(rng));
    X.set(i * kFeatures + 1, centres[c][1] + noise(rng));
    Y.set(i * kClasses + c, 1);
  }
  // Model: x -> relu(x W1 + b1) W2 + b2 -> softmax -> cross-entropy.
  Var x = input(DType::float32, {kUnknown, kFeatures}, "x"), y = input(DType::float32, {kUnknown, kClasses}, "y");
  SharedVar W1 = shared(gaussian({kFeatures, kHidden}, 0.5, rng), "W1");
  SharedVar b1 = shared(Tensor::zeros(DType::float32, {kHidden}), "b1");
  SharedVar W2 = shared(gaussian({kHidden, kClasses}, 0.5, rng), "W2");
  SharedVar b2 = shared(Tensor::zeros(DType::float32, {kClasses}), "b2");
  Var h = relu(dot(x, W1) + b1).named("hidden");
  Var p = softmax(dot(h, W2) + b2).named("probs");
  Var loss = mean(categorical_crossentropy(p, y)).named("loss");
  const std::vector<SharedVar> params{W1, b1, W2, b2};
  const std::vector<Var> grads = grad(loss, {W1, b1, W2, b2});
  Function step = compile({x, y}, {loss}, Mode::from_env(), sgd(params, grads, {.lr = 0.5}));

  Result r;
  for (int s = 0; s < steps; ++s) {
    const double l = step({X, Y})[0].get(0);
    if (s == 0) r.first_loss = l;
    r.last_loss = l;
    if (verbose && (s % 10 == 0 || s == steps - 1)) std::printf("step %3d  loss %.4f\n", s, l);
  }
  r.peak_bytes = step.peak_bytes();
  r.intermediate_bytes = step.total_intermediate_bytes();
  const std::string plan = step.describe();
  for (auto at = plan.find("[in place]"); at != std::string::npos; at = plan.find("[in place]", at + 1)) ++r.in_place_updates;
  return r;
}

}  // namespace mlp
