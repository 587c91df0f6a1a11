// convgraph-bench --networks: whole-network training steps and inference, the networks of
// benchmarks/NETWORKS.md (lenet, resnet8, c3d_small), built with the DSL as a user would:
// parameters are shared variables, the step's SGD and batch-norm running averages are
// updates, and the step is one compiled Function. Each (network, mode) runs in a fresh
// child process so its peak resident-set growth is its own (NETWORKS.md, "What is timed").
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <convgraph/convgraph.hpp>
#include <convgraph/backends/conv_cost.hpp>
#include <convgraph/core/shared.hpp>
#include <convgraph/ops/batch_norm.hpp>
#include <convgraph/ops/pool.hpp>
#include <convgraph/ops/updates.hpp>

#include "benchmarks/bench_networks.hpp"

namespace convgraph::bench {

namespace {

/// Builds one network in training or inference form over shared parameters.
class NetBuilder {
 public:
  NetBuilder(bool train, std::uint64_t seed) : train_(train), rng_(seed) {}

  std::vector<SharedVar> params;  ///< every trained parameter, in creation order
  Updates state;                  ///< batch norm's running statistics (training form)

  /// conv KxK(xK) with stride s and padding p, cross-correlation, He-initialised; a bias
  /// (bias_add) unless batch norm follows.
  Var conv(const Var& x, std::int64_t k_out, std::int64_t kernel, std::int64_t stride, std::int64_t pad, bool bias) {
    const int nd = x.rank() - 2;
    Shape ws{k_out, x.shape()[1]};
    for (int d = 0; d < nd; ++d) ws.push_back(kernel);
    std::int64_t fan_in = x.shape()[1];
    for (int d = 0; d < nd; ++d) fan_in *= kernel;
    SharedVar w = param(ws, std::sqrt(2.0 / static_cast<double>(fan_in)), "w");
    ConvOptions o;
    o.border_mode = BorderMode(pad);  // the same on every axis
    o.subsample.assign(static_cast<std::size_t>(nd), stride);
    o.filter_flip = false;
    Var y = nd == 2 ? conv2d(x, w, o) : conv3d(x, w, o);
    if (bias) y = bias_add(y, param({k_out}, 0, "b"));
    return y;
  }

  /// Batch norm over channel axis 1: batch statistics and running-average updates when
  /// training, the running statistics otherwise.
  Var bn(const Var& x) {
    const std::int64_t C = x.shape()[1];
    SharedVar gamma = param({C}, -1, "gamma"), beta = param({C}, 0, "beta");
    SharedVar rmean = shared(Tensor::zeros(DType::float32, {C}), "running_mean");
    SharedVar rvar = shared(Tensor::full(DType::float32, {C}, 1.0), "running_var");
    if (!train_) return batch_norm_infer(x, gamma, beta, rmean, rvar);
    const BatchNormOutputs out = batch_norm_train(x, gamma, beta);
    const RunningStats next = batch_norm_running_update(out, rmean, rvar);
    state.emplace_back(rmean, next.mean);
    state.emplace_back(rvar, next.var);
    return out.y;
  }

  Var dense(const Var& x, std::int64_t out) {
    const std::int64_t in = x.shape()[1];
    SharedVar w = param({in, out}, std::sqrt(2.0 / static_cast<double>(in)), "w");
    return dot(x, w) + param({out}, 0, "b");
  }

 private:
  /// A parameter: normal(0, scale), or zeros (scale 0), or ones (scale -1).
  SharedVar param(Shape shape, double scale, const char* name) {
    Tensor t = scale < 0 ? Tensor::full(DType::float32, shape, 1.0) : Tensor::zeros(DType::float32, shape);
    if (scale > 0) {
      std::normal_distribution<double> n(0, scale);
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, n(rng_));
    }
    params.push_back(shared(t, name + std::to_string(params.size())));
    return params.back();
  }

  bool train_;
  std::mt19937_64 rng_;
};

Var pool2(const Var& x) { return x.rank() == 5 ? max_pool3d(x) : max_pool2d(x); }

Var lenet(NetBuilder& b, const Var& x) {
  Var h = pool2(relu(b.conv(x, 20, 5, 1, 0, true)));
  h = pool2(relu(b.conv(h, 50, 5, 1, 0, true)));
  h = relu(b.dense(flatten(h, 2), 500));
  return b.dense(h, 10);
}

Var basic_block(NetBuilder& b, const Var& x, std::int64_t c_out, std::int64_t stride) {
  Var y = relu(b.bn(b.conv(x, c_out, 3, stride, 1, false)));
  y = b.bn(b.conv(y, c_out, 3, 1, 1, false));
  const bool project = stride != 1 || x.shape()[1] != c_out;
  Var shortcut = project ? b.bn(b.conv(x, c_out, 1, stride, 0, false)) : x;
  return relu(y + shortcut);
}

Var resnet8(NetBuilder& b, const Var& x) {
  Var h = relu(b.bn(b.conv(x, 16, 3, 1, 1, false)));
  h = basic_block(b, h, 16, 1);
  h = basic_block(b, h, 32, 2);
  h = basic_block(b, h, 64, 2);
  return b.dense(global_avg_pool(h), 10);
}

Var c3d_small(NetBuilder& b, const Var& x) {
  Var h = pool2(relu(b.bn(b.conv(x, 32, 3, 1, 1, false))));
  h = pool2(relu(b.bn(b.conv(h, 64, 3, 1, 1, false))));
  return b.dense(flatten(h, 2), 10);
}

struct NetworkSpec {
  const char* name;
  Shape input;
  std::function<Var(NetBuilder&, const Var&)> build;
};

const std::vector<NetworkSpec>& specs() {
  static const std::vector<NetworkSpec> all = {
      {"lenet", {64, 1, 28, 28}, lenet},
      {"resnet8", {32, 3, 32, 32}, resnet8},
      {"c3d_small", {4, 3, 8, 32, 32}, c3d_small},
  };
  return all;
}

std::int64_t rss_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Builds, compiles and times one (network, mode) in this process.
NetworkRecord run_one(const NetworkSpec& spec, bool train, const NetworkOptions& opt) {
  // The cost model's machine measurement (a 2 x 32 MiB copy, once per process) belongs to
  // the process, not the network: it runs first, then the peak restarts from the current
  // RSS, as networks_torch.py does after importing torch.
  (void)measured_machine(opt.threads);
  if (std::ofstream clear("/proc/self/clear_refs"); clear) clear << "5";
  const std::int64_t rss0 = rss_kib("VmRSS:");
  Mode mode = opt.mode;
  mode.threads = opt.threads;
  NetBuilder b(train, opt.seed);
  Shape in_shape = spec.input;
  if (opt.shards < 1 || in_shape[0] % opt.shards != 0)
    throw ValueError(msg(spec.name, ": batch ", in_shape[0], " does not split into ", opt.shards, " shards"));
  in_shape[0] /= opt.shards;
  Var x = input(DType::float32, in_shape, "x");
  Var logits = spec.build(b, x);
  const std::int64_t batch = in_shape[0];
  // One fixed batch: standard normal inputs, labels uniform in 0..9 (seed 1).
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0, 1);
  Tensor xv(DType::float32, in_shape);
  for (std::int64_t i = 0; i < xv.numel(); ++i) xv.set(i, normal(rng));
  Tensor labels(DType::int64, {batch});
  for (std::int64_t i = 0; i < batch; ++i) labels.set(i, static_cast<double>(rng() % 10));

  const auto t0 = std::chrono::steady_clock::now();
  Function f = [&] {
    if (!train) return compile({x}, {logits}, mode);
    Var y = input(DType::int64, {batch}, "labels");
    Var loss = mean(categorical_crossentropy(softmax(logits), y));
    const std::vector<Var> wrt(b.params.begin(), b.params.end());
    const std::vector<Var> grads = grad(loss, wrt);
    Updates updates = sgd(b.params, grads, SgdOptions{.lr = 0.01});
    updates.insert(updates.end(), b.state.begin(), b.state.end());
    if (opt.parallel_updates) updates = opt.parallel_updates(updates, grads);
    return compile({x, y}, {loss}, mode, updates);
  }();
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<Tensor> args = train ? std::vector<Tensor>{xv, labels} : std::vector<Tensor>{xv};
  std::vector<double> ms;
  for (int i = 0; i < opt.warmup + opt.repeats; ++i) {
    const auto s = std::chrono::steady_clock::now();
    const auto out = f(args);
    if (i >= opt.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
    if (!std::isfinite(out[0].get(0)))
      throw RuntimeError(msg(spec.name, ": the output of call ", i + 1, " is not finite (", out[0].get(0), ")"));
  }
  // --flags profile=True: the per-op breakdown of the timed calls (the child leaves with
  // _exit, so the summary profile=True prints at exit would be lost).
  if (f.mode().profile) std::cerr << "== " << spec.name << (train ? " train" : " infer") << "\n" << f.profile().summary();
  NetworkRecord r;
  r.network = spec.name;
  r.mode = train ? "train" : "infer";
  r.ms = median(ms);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.images_per_s = 1000.0 * static_cast<double>(batch * opt.shards) / r.ms;  // the whole batch
  r.peak_bytes = static_cast<std::size_t>(std::max<std::int64_t>(0, rss_kib("VmHWM:") - rss0)) * 1024;
  r.arena_bytes = f.peak_bytes();
  r.compile_s = compile_s;
  std::size_t fused = 0;
  for (const auto& v : f.graph().toposort())
    if (v.op() && v.op()->name().rfind("Conv+", 0) == 0) ++fused;
  r.fused_convs = fused;
  return r;
}

}  // namespace

std::vector<std::string> network_names() {
  std::vector<std::string> names;
  for (const auto& s : specs()) names.push_back(s.name);
  return names;
}

namespace {
const NetworkSpec& find_spec(const std::string& name) {
  for (const auto& s : specs())
    if (name == s.name) return s;
  throw ValueError(msg("--networks: unknown network '", name, "' (known: lenet, resnet8, c3d_small)"));
}
}  // namespace

NetworkRecord time_network_here(const std::string& name, bool train, const NetworkOptions& opt) {
  return run_one(find_spec(name), train, opt);
}

NetworkRecord time_network(const std::string& name, bool train, const NetworkOptions& opt) {
  const NetworkSpec* spec = &find_spec(name);
  // A fresh child process per (network, mode): its peak RSS is this network's alone. The
  // record comes back as one line of text.
  int fds[2];
  if (pipe(fds) != 0) throw RuntimeError("--networks: pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeError("--networks: fork() failed");
  if (pid == 0) {
    close(fds[0]);
    std::string line;
    int code = 0;
    try {
      const NetworkRecord r = run_one(*spec, train, opt);
      std::ostringstream os;
      os.precision(17);
      os << "ok " << r.ms << ' ' << r.min_ms << ' ' << r.images_per_s << ' ' << r.peak_bytes << ' ' << r.arena_bytes
         << ' ' << r.compile_s << ' ' << r.fused_convs;
      line = os.str();
    } catch (const std::exception& e) {
      line = std::string("error ") + e.what();
      code = 1;
    }
    const ssize_t w = write(fds[1], line.data(), line.size());
    (void)w;
    close(fds[1]);
    _exit(code);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (text.rfind("ok ", 0) != 0)
    throw RuntimeError(msg("--networks: ", name, " (", train ? "train" : "infer", ") failed: ",
                           text.empty() ? msg("the child process died (status ", status, ")") : text));
  NetworkRecord r;
  r.network = name;
  r.mode = train ? "train" : "infer";
  std::istringstream is(text.substr(3));
  is >> r.ms >> r.min_ms >> r.images_per_s >> r.peak_bytes >> r.arena_bytes >> r.compile_s >> r.fused_convs;
  return r;
}

}  // namespace convgraph::bench
