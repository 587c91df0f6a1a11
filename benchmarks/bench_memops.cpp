// bench_memops: the memory-bound layers (pooling, global average pooling, bias add and
// their gradients) against the machine's STREAM triad bandwidth on the same threads.
// Each case runs one op's CPU kernel, exactly as a compiled function runs that node, on
// preallocated float32 tensors; it reports the median time, the bytes the op must read and
// write divided by that time, and that rate as a share of triad.
// Built as bench_memops by benchmarks/CMakeLists.txt; not a test.
// Usage: bench_memops [threads=2] [repeats=50] [filter: run the cases whose name contains it]
//        [--version]
//
// Adding a case: build the op with the DSL on static-shape inputs and call add() with its
// input tensors (see main); a gradient op comes from the forward op's Op::grad.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/bench_cli.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "convgraph/convgraph.hpp"
#include "convgraph/ops/batch_norm.hpp"

using namespace convgraph;

namespace {

double median_ms(const std::function<void()>& fn, int repeats) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: caches, pages, thread pool
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// STREAM triad a = b + s c on float64 arrays far larger than the caches (3 x 256 MiB),
/// split over the pool in contiguous blocks; GB/s counts 24 bytes per element (STREAM's rule).
double triad_gbs(ThreadPool& pool, int repeats) {
  const std::int64_t n = std::int64_t{1} << 25, block = 1 << 16;
  std::vector<double> a(static_cast<std::size_t>(n)), b(a.size(), 1.0), c(a.size(), 2.0);
  const double s = 3.0;
  double* pa = a.data();
  const double *pb = b.data(), *pc = c.data();
  auto run = [&] {
    pool.parallel_for(n / block, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0 * block; i < i1 * block; ++i) pa[i] = pb[i] + s * pc[i];
    });
  };
  const double ms = median_ms(run, std::max(5, repeats / 5));
  return 24.0 * static_cast<double>(n) / (ms * 1e6);
}

Tensor random_tensor(const Shape& shape, std::uint32_t seed) {
  Tensor t(DType::float32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

struct Bench {
  ThreadPool pool;
  int repeats;
  std::string filter;
  double triad = 0;

  /// Times the kernel of y's op on `inputs`; `unread` marks inputs the kernel only takes the
  /// shape of (not counted as bytes read).
  void add(const std::string& name, const Var& y, const std::vector<Tensor>& inputs,
           const std::vector<bool>& unread = {}) {
    if (!filter.empty() && name.find(filter) == std::string::npos) return;
    Tensor out(y.dtype(), y.shape());
    double bytes = static_cast<double>(out.nbytes());
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (i >= unread.size() || !unread[i]) bytes += static_cast<double>(inputs[i].nbytes());
    const ExecContext ctx{&pool};
    const KernelRegistry& reg = KernelRegistry::builtin();
    const double ms = median_ms([&] { reg.run(*y.op(), inputs, out, ctx); }, repeats);
    const double gbs = bytes / (ms * 1e6);
    std::printf("%-44s %9.3f ms %8.2f GB/s %6.0f%%\n", name.c_str(), ms, gbs, 100.0 * gbs / triad);
    std::fflush(stdout);
  }

  /// Times the kernels of `nodes` run in order, as a compiled function runs them (a layer
  /// that takes several passes); `leaves` gives the tensors of the graph inputs. Bytes: what
  /// every kernel reads and writes.
  void add_chain(const std::string& name, const std::vector<Var>& nodes,
                 const std::vector<std::pair<Var, Tensor>>& leaves) {
    if (!filter.empty() && name.find(filter) == std::string::npos) return;
    std::vector<std::pair<const Node*, Tensor>> values;
    for (const auto& [v, t] : leaves) values.emplace_back(v.node(), t);
    auto value = [&](const Var& v) -> Tensor& {
      for (auto& [n, t] : values)
        if (n == v.node()) return t;
      std::fprintf(stderr, "bench_memops: %s: no value for an input of the chain\n", name.c_str());
      std::exit(1);
    };
    std::vector<std::vector<Tensor>> args;
    double bytes = 0;
    for (const Var& n : nodes) {
      values.emplace_back(n.node(), Tensor(n.dtype(), n.shape()));
      args.emplace_back();
      for (const Var& i : n.inputs()) args.back().push_back(value(i));
      for (const Tensor& t : args.back()) bytes += static_cast<double>(t.nbytes());
      bytes += static_cast<double>(value(n).nbytes());
    }
    const ExecContext ctx{&pool};
    const KernelRegistry& reg = KernelRegistry::builtin();
    auto run = [&] {
      for (std::size_t k = 0; k < nodes.size(); ++k) reg.run(*nodes[k].op(), args[k], value(nodes[k]), ctx);
    };
    const double ms = median_ms(run, repeats);
    const double gbs = bytes / (ms * 1e6);
    std::printf("%-44s %9.3f ms %8.2f GB/s %6.0f%%\n", name.c_str(), ms, gbs, 100.0 * gbs / triad);
    std::fflush(stdout);
  }
};

std::string shape_name(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 50;
  std::string filter;
  CLI::App app{"bench_memops: pooling, global average pooling, bias add and batch norm against STREAM triad on "
               "the same threads.",
               "bench_memops"};
  convgraph::bench::setup_cli(app);
  app.add_option("threads", threads, "threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("repeats", repeats, "timed runs per case")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("filter", filter, "run only the cases whose name contains this text");
  if (const int status = convgraph::bench::parse_cli(app, argc, argv); status >= 0) return status;
  Bench b{ThreadPool(threads), repeats, filter};
  b.triad = triad_gbs(b.pool, b.repeats);
  std::printf("bench_memops: float32, %d threads, median of %d runs\n", threads, b.repeats);
  std::printf("STREAM triad: %.2f GB/s (3 x 256 MiB float64 arrays)\n", b.triad);
  std::printf("%-44s %12s %13s %7s\n", "case", "time", "bandwidth", "triad");

  // ---- pooling: forward and the gradient op autodiff builds (max reads x and gy; avg
  // takes only x's shape) -------------------------------------------------------------
  struct PoolCase {
    Shape shape;
    PoolOptions o;
    const char* tag;
  };
  const std::vector<PoolCase> pools = {
      {{64, 32, 512}, {{2}, {}, {}, true, false}, "w2"},
      {{64, 20, 24, 24}, {{2, 2}, {}, {}, true, false}, "w2"},
      {{64, 50, 8, 8}, {{2, 2}, {}, {}, true, false}, "w2"},
      {{32, 64, 32, 32}, {{3, 3}, {2, 2}, {1, 1}, true, false}, "w3 s2 pad1"},
      {{4, 32, 8, 32, 32}, {{2, 2, 2}, {}, {}, true, false}, "w2"},
  };
  std::uint32_t seed = 1;
  for (const PoolCase& c : pools) {
    Var x = input(DType::float32, c.shape);
    const Tensor xt = random_tensor(c.shape, seed++);
    for (bool is_max : {true, false}) {
      const Var y = is_max ? max_pool(x, c.o) : avg_pool(x, c.o);
      const std::string tag = y.op()->name() + " " + shape_name(c.shape) + " " + c.tag;
      b.add(tag + " fwd", y, {xt});
      const Var gx = y.op()->grad({x}, y, input(DType::float32, y.shape()))[0];
      b.add(tag + " bwd", gx, {xt, random_tensor(y.shape(), seed++)}, {!is_max});
      if (!is_max) continue;
      // With relu's gradient fused in (where(x > 0, gx, 0); optimizer/grad_fusion.cpp): the
      // node compile() makes of it.
      const Var gy = input(DType::float32, y.shape()), g = max_pool_grad(x, gy, c.o);
      const Function f = compile({x, gy}, {where(x > 0.0, g, zeros_like(g))});
      for (const Var& v : f.graph().toposort())
        if (v.op() && v.op()->name().find("+relu_grad") != std::string::npos)
          b.add(v.op()->name() + " " + shape_name(c.shape) + " " + c.tag, v, {xt, random_tensor(y.shape(), seed++)});
    }
  }

  // ---- global average pooling and bias add, with their gradient ops -------------------
  for (const Shape& shape : {Shape{64, 20, 24, 24}, Shape{32, 64, 32, 32}}) {
    Var x = input(DType::float32, shape);
    const Tensor xt = random_tensor(shape, seed++);
    const std::string tag = shape_name(shape);
    const Var g = global_avg_pool(x);
    b.add("global_avg_pool " + tag + " fwd", g, {xt});
    const Var gg = g.op()->grad({x}, g, input(DType::float32, g.shape()))[0];
    b.add("global_avg_pool " + tag + " bwd", gg, {xt, random_tensor(g.shape(), seed++)}, {true});
    Var bias = input(DType::float32, {shape[1]});
    const Var y = bias_add(x, bias);
    b.add("bias_add " + tag + " fwd", y, {xt, random_tensor({shape[1]}, seed++)});
    const Var gb = y.op()->grad({x, bias}, y, input(DType::float32, shape))[1];
    b.add("bias_add_grad " + tag, gb, {random_tensor(shape, seed++)});
  }

  // ---- fused elementwise nodes as compile() builds them in a training step (relu's
  // gradient, with the gradients of a residual branch summed in; relu of a residual sum;
  // a per-channel broadcast operand) ------------------------------------------------------
  {
    const Shape s{32, 16, 32, 32};
    Var h = input(DType::float32, s), g1 = input(DType::float32, s), g2 = input(DType::float32, s);
    Var c = input(DType::float32, {1, 16, 1, 1});
    const Tensor ht = random_tensor(s, seed++), g1t = random_tensor(s, seed++), g2t = random_tensor(s, seed++);
    const Tensor ct = random_tensor({1, 16, 1, 1}, seed++);
    struct FusedCase {
      const char* tag;
      Var y;
      std::vector<std::pair<Var, Tensor>> leaves;
    };
    const std::vector<FusedCase> fcs = {
        {"relu_grad", where(h > 0.0, g1, zeros_like(g1)), {{h, ht}, {g1, g1t}}},
        {"relu_grad(sum)", where(h > 0.0, g1 + g2, zeros_like(g1)), {{h, ht}, {g1, g1t}, {g2, g2t}}},
        {"relu(sum)", relu(g1 + g2), {{g1, g1t}, {g2, g2t}}},
        {"relu(x*c+g)", relu(h * c + g1), {{h, ht}, {c, ct}, {g1, g1t}}},
    };
    for (const FusedCase& fc : fcs) {
      std::vector<Var> ins;
      for (const auto& l : fc.leaves) ins.push_back(l.first);
      const Function f = compile(ins, {fc.y});
      for (const Var& v : f.graph().toposort()) {
        if (!v.op() || v.op()->name() != "fused") continue;
        std::vector<Tensor> args;  // the compiled graph's inputs are in the order of ins
        const std::vector<Var>& gi = f.graph().inputs();
        for (const Var& i : v.inputs())
          for (std::size_t k = 0; k < gi.size(); ++k)
            if (gi[k].node() == i.node()) args.push_back(fc.leaves[k].second);
        if (args.size() != v.inputs().size()) continue;  // an input made by another node
        const std::string name = std::string("fused ") + fc.tag + " " + shape_name(s);
        b.add(name, v, args);
        if (name.find(filter) != std::string::npos) std::printf("  program: %s\n", v.op()->params().c_str());
      }
    }
  }

  // ---- batch norm: training forward (statistics pass, then y), inference forward, and
  // the training gradient (one reduction pass giving dgamma, dbeta, then dx) ------------
  for (const Shape& bs : {Shape{64, 20, 24, 24}, Shape{32, 64, 32, 32}, Shape{4, 32, 8, 32, 32}}) {
    const std::string bn = shape_name(bs);
    const Shape cs{bs[1]};
    Var bx = input(DType::float32, bs), bg = input(DType::float32, cs), bb = input(DType::float32, cs);
    Var bm = input(DType::float32, cs), bgy = input(DType::float32, bs);
    const Tensor bxt = random_tensor(bs, 3), bgyt = random_tensor(bs, 4), ct = random_tensor(cs, 5);
    const Tensor vt = Tensor::full(DType::float32, cs, 1.5);
    const BatchNormOutputs train = batch_norm_train(bx, bg, bb);
    const Var stats = train.y.inputs()[3];
    b.add_chain("batch_norm train fwd " + bn, {stats, train.y}, {{bx, bxt}, {bg, ct}, {bb, ct}});
    Var bv = input(DType::float32, cs);
    b.add_chain("batch_norm infer fwd " + bn, {batch_norm_infer(bx, bg, bb, bm, bv)},
                {{bx, bxt}, {bg, ct}, {bb, ct}, {bm, ct}, {bv, vt}});
    // The gradient reads the statistics the forward pass computed.
    Tensor st(stats.dtype(), stats.shape());
    KernelRegistry::builtin().run(*stats.op(), {bxt}, st, ExecContext{&b.pool});
    const Var dx = train.y.op()->grad(train.y.inputs(), train.y, bgy)[0];
    b.add_chain("batch_norm train bwd " + bn, {dx.inputs()[4], dx},
                {{bx, bxt}, {bg, ct}, {bgy, bgyt}, {stats, st}});
  }
  return 0;
}
