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
// Under `mpirun -np N` it trains data-parallel (convgraph/dist/mpi.hpp): every global batch
// of 32 (rounded down to a multiple of N) is split into N shards, rank r computes the
// gradients of shard r, the allreduce nodes average them (and batch norm's running
// statistics), and every rank applies the same update. With --check, rank 0 also trains
// a second copy of the model in this one process on the same global batches (shard by
// shard, averaging as the ranks do) and prints the largest difference of any parameter
// or statistic as its last line; exit 1 when it exceeds 1e-4.
//
// usage: train_digits [--data FILE] [--epochs N] [--threads T] [--min-accuracy A] [--dot FILE]
//                     [--check]
//   exits 1 when the test accuracy is below --min-accuracy (default 0); --dot writes the
//   compiled training step as Graphviz DOT.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <convgraph/convgraph.hpp>
#include <convgraph/core/shared.hpp>
#include <convgraph/dist/mpi.hpp>
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
  /// Every variable: the parameters, then the running statistics.
  std::vector<SharedVar> variables() const {
    std::vector<SharedVar> all = params;
    all.insert(all.end(), stats_.begin(), stats_.end());
    return all;
  }

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

const SgdOptions kSgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};

/// The --check reference: the model trained in this process alone. A step computes each
/// shard's gradients and batch-norm statistics, averages them in shard order as the ranks'
/// allreduce does (float sums, then / N), and applies SGD with the averages.
class OneProcess {
 public:
  OneProcess(std::int64_t shard, const Mode& mode) : model_(/*seed=*/7) {
    Var x = input(DType::float32, {shard, 1, 8, 8}, "x");
    Var y = input(DType::int64, {shard}, "labels");
    Var loss = mean(categorical_crossentropy(softmax(model_.logits(x, /*train=*/true)), y));
    std::vector<Var> outs = grad(loss, std::vector<Var>(model_.params.begin(), model_.params.end()));
    std::vector<Var> averaged;  // inputs of the update: one per gradient, then per statistic
    for (const auto& p : model_.params) averaged.push_back(input(DType::float32, p.shape()));
    Updates updates = sgd(model_.params, std::vector<Var>(averaged.begin(), averaged.end()), kSgd);
    for (const auto& [var, next] : model_.running) {
      outs.push_back(next);
      averaged.push_back(input(DType::float32, var.shape()));
      updates.emplace_back(var, averaged.back());
    }
    shard_step_ = std::make_unique<Function>(compile({x, y}, outs, mode));
    apply_ = std::make_unique<Function>(compile(averaged, {}, mode, updates));
  }

  void step(const std::vector<std::pair<Tensor, Tensor>>& shards) {
    std::vector<Tensor> sum;
    for (const auto& [x, y] : shards) {
      const std::vector<Tensor> got = (*shard_step_)({x, y});
      if (sum.empty()) {
        for (const auto& t : got) sum.push_back(t.clone());
        continue;
      }
      for (std::size_t k = 0; k < got.size(); ++k)
        for (std::int64_t i = 0; i < got[k].numel(); ++i) sum[k].data<float>()[i] += got[k].data<float>()[i];
    }
    const auto n = static_cast<float>(shards.size());
    for (auto& t : sum)
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] /= n;
    (*apply_)(sum);
  }

  /// Largest |difference| between the two models' parameters and statistics.
  double max_diff(const Model& other) const {
    double d = 0;
    const auto mine = model_.variables(), theirs = other.variables();
    for (std::size_t i = 0; i < mine.size(); ++i) d = std::max(d, max_abs_diff(mine[i].get_value(), theirs[i].get_value()));
    return d;
  }

 private:
  Model model_;
  std::unique_ptr<Function> shard_step_, apply_;
};

}  // namespace

int main(int argc, char** argv) {
  dist::Session mpi(&argc, &argv);  // MPI when mpirun started us; else a job of one process
  std::string data = CONVGRAPH_DIGITS_CSV, dot_file;
  int epochs = 30, threads = 2;
  double min_accuracy = 0;
  bool check = false;
  CLI::App app{"Trains a small CNN on scikit-learn's handwritten digits and prints the test accuracy.",
               "train_digits"};
  app.set_version_flag("--version", std::string("train_digits ") + convgraph::version());
  app.add_option("--data", data, "the digits CSV (examples/data/digits.csv)")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training images")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--min-accuracy", min_accuracy, "exit 1 when the test accuracy is below this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--check", check,
               "also train in one process on the same global batches; print the largest parameter "
               "difference last, exit 1 above 1e-4");
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
    const int rank = dist::rank(), ranks = dist::size();
    const bool distributed = dist::initialized();
    if (ranks > 32) throw ValueError(msg("train_digits: ", ranks, " ranks; at most 32 (one image each per batch)"));
    const std::int64_t kBatch = 32 - 32 % ranks, shard = kBatch / ranks;  // global batch, per rank
    Mode mode = Mode::fast_run();
    mode.threads = threads;

    Model model(/*seed=*/7);
    Var x = input(DType::float32, {shard, 1, 8, 8}, "x");
    Var y = input(DType::int64, {shard}, "labels");
    Var loss = mean(categorical_crossentropy(softmax(model.logits(x, /*train=*/true)), y));
    const std::vector<Var> wrt(model.params.begin(), model.params.end());
    const std::vector<Var> grads = grad(loss, wrt);
    Updates updates = sgd(model.params, grads, kSgd);
    updates.insert(updates.end(), model.running.begin(), model.running.end());
    if (distributed) {  // average the gradients (and statistics); start from rank 0's values
      updates = dist::data_parallel(updates, grads);
      loss = dist::allreduce(loss, dist::ReduceOp::mean);
      dist::broadcast(model.variables());
    }
    Function step = compile({x, y}, {loss}, mode, updates);
    if (!dot_file.empty()) {
      std::ofstream(dot_file) << to_dot(step.graph());
      std::printf("wrote the training step's graph to %s\n", dot_file.c_str());
    }
    std::unique_ptr<OneProcess> reference;  // every rank compiles it (compile may be collective)
    if (check) reference = std::make_unique<OneProcess>(shard, mode);

    Var xi = input(DType::float32, {kUnknown, 1, 8, 8}, "x");
    Function predict = compile({xi}, {model.logits(xi, /*train=*/false)}, mode);

    std::mt19937_64 rng(2026);
    std::vector<std::int64_t> order(static_cast<std::size_t>(train.size()));
    std::iota(order.begin(), order.end(), 0);
    Tensor labels(DType::int64, {shard});
    for (int e = 0; e < epochs; ++e) {
      std::shuffle(order.begin(), order.end(), rng);
      double total = 0;
      std::int64_t steps = 0;
      for (std::int64_t b = 0; b + kBatch <= train.size(); b += kBatch, ++steps) {  // full batches only
        total += step({batch_of(train, order, b + rank * shard, shard, &labels), labels})[0].get(0);
        if (reference && rank == 0) {
          std::vector<std::pair<Tensor, Tensor>> shards;
          for (int r = 0; r < ranks; ++r) {
            Tensor l(DType::int64, {shard});
            shards.emplace_back(batch_of(train, order, b + r * shard, shard, &l), l);
          }
          reference->step(shards);
        }
      }
      if (rank == 0 && (e % 5 == 0 || e == epochs - 1))
        std::printf("epoch %2d  loss %.4f\n", e, total / static_cast<double>(steps));
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
    bool ok = accuracy >= min_accuracy;
    if (distributed) dist::barrier();  // every rank has finished: rank 0's lines come last
    if (rank != 0) return ok ? 0 : 1;
    std::printf("%d epochs, %lld training images, %lld test images, %.2f s, %d threads, %d rank%s (batch %lld)\n",
                epochs, static_cast<long long>(train.size()), static_cast<long long>(test.size()), seconds, threads,
                ranks, ranks == 1 ? "" : "s", static_cast<long long>(kBatch));
    std::printf("test accuracy %.4f\n", accuracy);
    if (reference) {
      const double diff = reference->max_diff(model);
      std::printf("max |param diff| vs 1 process: %.3g\n", diff);
      ok = ok && diff <= 1e-4;
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
}
