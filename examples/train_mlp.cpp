// Trains a small MLP with SGD on generated data and prints the loss and the memory plan.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "mlp.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Trains a small MLP with SGD on generated data.", "train_mlp"};
  app.set_version_flag("--version", std::string("train_mlp ") + convgraph::version());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version exit 0, bad usage 2
  }
  const mlp::Result r = mlp::train(/*seed=*/42, /*steps=*/100, /*verbose=*/true);
  std::printf("loss %.4f -> %.4f\n", r.first_loss, r.last_loss);
  std::printf("training step: peak intermediate memory %zu bytes, %zu bytes without buffer reuse\n", r.peak_bytes,
              r.intermediate_bytes);
  return r.last_loss < r.first_loss / 2 ? 0 : 1;
}
