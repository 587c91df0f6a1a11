// Trains a small MLP with SGD on generated data and prints the loss and the memory plan.
#include <cstdio>

#include "mlp.hpp"

int main() {
  const mlp::Result r = mlp::train(/*seed=*/42, /*steps=*/100, /*verbose=*/true);
  std::printf("loss %.4f -> %.4f\n", r.first_loss, r.last_loss);
  std::printf("training step: peak intermediate memory %zu bytes, %zu bytes without buffer reuse\n", r.peak_bytes,
              r.intermediate_bytes);
  return r.last_loss < r.first_loss / 2 ? 0 : 1;
}
