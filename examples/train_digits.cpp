// Trains a small CNN on scikit-learn's handwritten digits (examples/data/digits.csv: 1797
// 8x8 images, a fixed 80/20 split) and prints the test accuracy as its last line.
//
//   x (N, 1, 8, 8) -> [conv 3x3 16, batch norm, relu, max pool 2]
//                  -> [conv 3x3 32, batch norm, relu, max pool 2] -> flatten -> dense 10
//
// Parameters and batch norm's running statistics are shared variables; one compiled
// training step computes the loss, the gradients, the SGD-with-momentum updates and the
// running averages, and applies them in place. Inference is a second Function over the
// same variables, with batch norm in inference form.
//
// usage: train_digits [--data FILE] [--epochs N] [--threads T] [--min-accuracy A] [--dot FILE]
//   exits 1 when the test accuracy is below --min-accuracy (default 0); --dot writes the
//   compiled training step as Graphviz DOT.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <convgraph/convgraph.hpp>
#include <convgraph/core/shared.hpp>
#include <convgraph/ops/batch_norm.hpp>
#include <convgraph/ops/pool.hpp>
#include <convgraph/ops/updates.hpp>

#ifndef CONVGRAPH_DIGITS_CSV
#define CONVGRAPH_DIGITS_CSV "examples/data/digits.csv"
#endif

using namespace convgraph;

namespace {

struct Split {
  std::vector<float> pixels;  // N x 64, scaled to [0, 1]
  std::vector<std::int64_t> labels;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

// The CSV written by scripts/export_digits.py: split,label,p0..p63.
void load(const std::string& path, Split& train, Split& test) {
  std::ifstream f(path);
  if (!f) throw ValueError(msg("train_digits: cannot open the data file '", path, "' (see --data)"));
  std::string line;
  std::getline(f, line);  // header
  for (int row = 2; std::getline(f, line); ++row) {
    std::stringstream ss(line);
    std::string split, cell;
    std::getline(ss, split, ',');
    Split& s = split == "train" ? train : test;
    if (split != "train" && split != "test")
      throw ValueError(msg("train_digits: ", path, " line ", row, ": split '", split, "' is not train or test"));
    std::getline(ss, cell, ',');
    s.labels.push_back(std::stoll(cell));
    for (int p = 0; p < 64; ++p) {
      if (!std::getline(ss, cell, ','))
        throw ValueError(msg("train_digits: ", path, " line ", row, ": ", p, " pixels, expected 64"));
      s.pixels.push_back(std::stof(cell) / 16.0f);
    }
  }
  if (train.size() == 0 || test.size() == 0) throw ValueError(msg("train_digits: ", path, " has no train or no test rows"));
}

class Model {
 public:
  explicit Model(std::uint64_t seed) : rng_(seed) {}

  /// The network's logits for x, with batch norm in training or inference form.
  Var logits(const Var& x, bool train) {
    layer_ = 0;
    Var h = block(x, 16, train);
    h = block(h, 32, train);
    h = flatten(h, 2);
    return dot(h, param("dense_w", {32 * 2 * 2, 10}, std::sqrt(2.0 / 128))) + param("dense_b", {10}, 0);
  }

  std::vector<SharedVar> params;
  Updates running;  // batch norm's running statistics, from the training graph

 private:
  Var block(const Var& x, std::int64_t k, bool train) {
    const std::int64_t c = x.shape()[1];
    const std::string id = std::to_string(layer_++);
    Var h = conv2d(x, param("conv" + id, {k, c, 3, 3}, std::sqrt(2.0 / static_cast<double>(9 * c))),
                   {.border_mode = "half", .filter_flip = false});
    SharedVar gamma = param("gamma" + id, {k}, -1), beta = param("beta" + id, {k}, 0);
    SharedVar mean = stat("running_mean" + id, k, 0), var = stat("running_var" + id, k, 1);
    if (train) {
      const BatchNormOutputs bn = batch_norm_train(h, gamma, beta);
      const RunningStats next = batch_norm_running_update(bn, mean, var);
      running.emplace_back(mean, next.mean);
      running.emplace_back(var, next.var);
      h = bn.y;
    } else {
      h = batch_norm_infer(h, gamma, beta, mean, var);
    }
    return max_pool2d(relu(h));
  }

  // Parameters are created on the first (training) graph and reused by the second.
  SharedVar param(const std::string& name, Shape shape, double scale) {
    for (const auto& p : params)
      if (p.name() == name) return p;
    Tensor t = scale < 0 ? Tensor::full(DType::float32, shape, 1.0) : Tensor::zeros(DType::float32, shape);
    std::normal_distribution<double> n(0, scale > 0 ? scale : 1);
    if (scale > 0)
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, n(rng_));
    params.push_back(shared(t, name));
    return params.back();
  }
  SharedVar stat(const std::string& name, std::int64_t k, double value) {
    for (const auto& s : stats_)
      if (s.name() == name) return s;
    stats_.push_back(shared(Tensor::full(DType::float32, {k}, value), name));
    return stats_.back();
  }

  std::mt19937_64 rng_;
  std::vector<SharedVar> stats_;
  int layer_ = 0;
};

Tensor batch_of(const Split& s, const std::vector<std::int64_t>& idx, std::int64_t begin, std::int64_t n,
                Tensor* labels) {
  Tensor x(DType::float32, {n, 1, 8, 8});
  auto* px = static_cast<float*>(x.raw());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = idx[static_cast<std::size_t>(begin + i)];
    std::memcpy(px + i * 64, s.pixels.data() + r * 64, 64 * sizeof(float));
    if (labels) labels->set(i, static_cast<double>(s.labels[static_cast<std::size_t>(r)]));
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = CONVGRAPH_DIGITS_CSV, dot_file;
  int epochs = 30, threads = 2;
  double min_accuracy = 0;
  CLI::App app{"Trains a small CNN on scikit-learn's handwritten digits and prints the test accuracy.",
               "train_digits"};
  app.set_version_flag("--version", std::string("train_digits ") + convgraph::version());
  app.add_option("--data", data, "the digits CSV (examples/data/digits.csv)")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training images")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--min-accuracy", min_accuracy, "exit 1 when the test accuracy is below this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--dot", dot_file, "write the compiled training step as Graphviz DOT (dot -Tsvg renders it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version exit 0, bad usage 2
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    Split train, test;
    load(data, train, test);
    constexpr std::int64_t kBatch = 32;
    Mode mode = Mode::fast_run();
    mode.threads = threads;

    Model model(/*seed=*/7);
    Var x = input(DType::float32, {kBatch, 1, 8, 8}, "x");
    Var y = input(DType::int64, {kBatch}, "labels");
    Var loss = mean(categorical_crossentropy(softmax(model.logits(x, /*train=*/true)), y));
    const std::vector<Var> wrt(model.params.begin(), model.params.end());
    Updates updates = sgd(model.params, grad(loss, wrt), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
    updates.insert(updates.end(), model.running.begin(), model.running.end());
    Function step = compile({x, y}, {loss}, mode, updates);
    if (!dot_file.empty()) {
      std::ofstream(dot_file) << to_dot(step.graph());
      std::printf("wrote the training step's graph to %s\n", dot_file.c_str());
    }

    Var xi = input(DType::float32, {kUnknown, 1, 8, 8}, "x");
    Function predict = compile({xi}, {model.logits(xi, /*train=*/false)}, mode);

    std::mt19937_64 rng(2026);
    std::vector<std::int64_t> order(static_cast<std::size_t>(train.size()));
    std::iota(order.begin(), order.end(), 0);
    Tensor labels(DType::int64, {kBatch});
    for (int e = 0; e < epochs; ++e) {
      std::shuffle(order.begin(), order.end(), rng);
      double total = 0;
      std::int64_t steps = 0;
      for (std::int64_t b = 0; b + kBatch <= train.size(); b += kBatch, ++steps)  // full batches only
        total += step({batch_of(train, order, b, kBatch, &labels), labels})[0].get(0);
      if (e % 5 == 0 || e == epochs - 1) std::printf("epoch %2d  loss %.4f\n", e, total / static_cast<double>(steps));
    }

    std::vector<std::int64_t> all(static_cast<std::size_t>(test.size()));
    std::iota(all.begin(), all.end(), 0);
    const Tensor logits = predict({batch_of(test, all, 0, test.size(), nullptr)})[0];
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < test.size(); ++i) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < 10; ++c)
        if (logits.get(i * 10 + c) > logits.get(i * 10 + best)) best = c;
      correct += best == test.labels[static_cast<std::size_t>(i)];
    }
    const double accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d epochs, %lld training images, %lld test images, %.2f s, %d threads\n", epochs,
                static_cast<long long>(train.size()), static_cast<long long>(test.size()), seconds, threads);
    std::printf("test accuracy %.4f\n", accuracy);
    return accuracy >= min_accuracy ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
}
