// CUDA DSL-op kernels and whole-graph device placement. GPU-free parts run in every
// build: the broadcast / reduction index plans (the kernels' own index arithmetic, run on
// the host), device placement of a training step, and the clean refusal of device=cuda
// without a GPU. "[cuda]" cases compare every GPU op with the CPU and skip without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "backends/cuda/strided_plan.hpp"
#include "convgraph/ops/autodiff.hpp"
#include "convgraph/core/function_graph.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "convgraph/ops/shape_ops.hpp"
#include "convgraph/optimizer/transfer_op.hpp"
#include "convgraph/runtime/function.hpp"
#include "optimizer/passes.hpp"
#include "support/skip_without_gpu.hpp"

using namespace convgraph;

namespace {


// ---- plans (GPU-free) ------------------------------------------------------------------

/// numpy's answer: operand offset for each output element, by brute force.
std::vector<std::int64_t> naive_offsets(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> r;
  const std::int64_t total = numel(out);
  const Shape ist = contiguous_strides(in);
  for (std::int64_t i = 0; i < total; ++i) {
    std::int64_t rem = i, off = 0;
    for (std::size_t d = out.size(); d-- > 0;) {
      const std::int64_t idx = rem % out[d];
      rem /= out[d];
      const std::size_t lead = out.size() - in.size();
      if (d >= lead && in[d - lead] != 1) off += idx * ist[d - lead];
    }
    r.push_back(off);
  }
  return r;
}

}  // namespace

TEST_CASE("plan_broadcast matches numpy broadcasting and collapses axes", "[cuda_ops][plan]") {
  struct Case {
    Shape a, b, out;
    int rank;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, 1},        // same shape: one flat axis
      {{2, 3, 4}, {}, {2, 3, 4}, 1},               // scalar operand: stride 0
      {{4, 1, 3}, {5, 1}, {4, 5, 3}, 3},
      {{2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}, 3},  // bias over N, C, H*W
      {{6, 1}, {1, 7}, {6, 7}, 2},
      {{1, 1, 5}, {2, 1, 1}, {2, 1, 5}, 2},        // size-1 output axis dropped
  };
  for (const auto& c : cases) {
    INFO(shape_to_string(c.a) << " op " << shape_to_string(c.b) << " -> " << shape_to_string(c.out));
    const gpu::BroadcastPlan p = gpu::plan_broadcast({c.a, c.b}, c.out);
    CHECK(p.rank == c.rank);
    CHECK(p.total == numel(c.out));
    const auto offs = gpu::broadcast_offsets(p);
    CHECK(offs[0] == naive_offsets(c.a, c.out));
    CHECK(offs[1] == naive_offsets(c.b, c.out));
  }
  // Three operands (where) and a 0-d output.
  const gpu::BroadcastPlan w = gpu::plan_broadcast({{3, 1}, {1, 4}, {}}, {3, 4});
  CHECK(gpu::broadcast_offsets(w)[2] == std::vector<std::int64_t>(12, 0));
  CHECK(gpu::broadcast_offsets(w)[1] == naive_offsets({1, 4}, {3, 4}));
  const gpu::BroadcastPlan s = gpu::plan_broadcast({{}, {}}, {});
  CHECK(s.total == 1);
  CHECK(gpu::broadcast_offsets(s)[0] == std::vector<std::int64_t>{0});
  CHECK(gpu::plan_broadcast({{0, 3}}, {0, 3}).total == 0);
}

TEST_CASE("plan_broadcast rejects what the kernels cannot index", "[cuda_ops][plan]") {
  CHECK_THROWS_AS(gpu::plan_broadcast({{3}, {4}}, {4}), ShapeError);
  CHECK_THROWS_AS(gpu::plan_broadcast({{2, 3}}, {3}), ShapeError);
  // Alternating broadcast axes cannot be merged: 7 axes are too many.
  CHECK_THROWS_AS(gpu::plan_broadcast({{2, 2, 2, 2, 2, 2, 2}, {2, 1, 2, 1, 2, 1, 2}}, {2, 2, 2, 2, 2, 2, 2}),
                  ValueError);
  // ...but 7 axes that collapse are fine.
  CHECK(gpu::plan_broadcast({{2, 2, 2, 2, 2, 2, 2}}, {2, 2, 2, 2, 2, 2, 2}).rank == 1);
}

TEST_CASE("plan_reduce emulated on the host equals a direct reduction", "[cuda_ops][plan]") {
  const Shape shape = {2, 3, 4, 5};
  std::vector<double> x(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i)) * 10;
  const std::vector<std::vector<int>> axes_list = {{0}, {1}, {3}, {1, 2}, {0, 2}, {0, 1, 2, 3}, {}};
  for (const auto& axes : axes_list) {
    INFO("axes " << axes.size());
    const gpu::ReducePlan p = gpu::plan_reduce(shape, axes);
    // Direct: output index = row-major over kept axes.
    Shape kept;
    for (int d = 0; d < 4; ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(shape[static_cast<std::size_t>(d)]);
    CHECK(p.out_count == numel(kept));
    std::vector<double> want(static_cast<std::size_t>(numel(kept)), 0.0);
    const Shape st = contiguous_strides(shape);
    for (std::int64_t i = 0; i < numel(shape); ++i) {
      std::int64_t rem = i, o = 0;
      std::vector<std::int64_t> idx(4);
      for (int d = 3; d >= 0; --d) {
        idx[static_cast<std::size_t>(d)] = rem % shape[static_cast<std::size_t>(d)];
        rem /= shape[static_cast<std::size_t>(d)];
      }
      for (int d = 0; d < 4; ++d)
        if (std::find(axes.begin(), axes.end(), d) == axes.end())
          o = o * shape[static_cast<std::size_t>(d)] + idx[static_cast<std::size_t>(d)];
      want[static_cast<std::size_t>(o)] += x[static_cast<std::size_t>(i)];
    }
    for (std::int64_t o = 0; o < p.out_count; ++o) {
      const std::int64_t base = gpu::strided_offset(p.kept_shape, p.kept_strides, p.kept_rank, o);
      double acc = 0;
      for (std::int64_t j = 0; j < p.red_count; ++j)
        acc += x[static_cast<std::size_t>(base + gpu::strided_offset(p.red_shape, p.red_strides, p.red_rank, j))];
      CHECK(acc == Approx(want[static_cast<std::size_t>(o)]).margin(1e-9));
    }
  }
  // Kept [2, 4] and reduced [3] of [2, 3, 4] stay separate; [2,3,4,5] over {1,2} has one reduced axis.
  CHECK(gpu::plan_reduce({2, 3, 4}, {1}).kept_rank == 2);
  CHECK(gpu::plan_reduce({2, 3, 4, 5}, {1, 2}).red_rank == 1);
  CHECK_THROWS_AS(gpu::plan_reduce({2, 3}, {2}), ValueError);
  CHECK(gpu::sum_to_axes({4, 3, 5}, {3, 1}) == std::vector<int>{0, 2});
  CHECK(gpu::sum_to_axes({4, 3}, {4, 3}).empty());
  CHECK_THROWS_AS(gpu::sum_to_axes({4, 3}, {2}), ShapeError);
}

// ---- device placement (GPU-free) ---------------------------------------------------------

namespace {

struct Step {
  std::vector<Var> inputs, outputs;
};

/// One SGD step of a 2-layer MLP (optionally after a conv layer) with integer targets.
Step training_step(bool with_conv) {
  Step s;
  Var y = input(DType::int32, {8}, "y");
  Var w1 = input(DType::float32, {12, 16}, "w1");
  Var b1 = input(DType::float32, {16}, "b1");
  Var w2 = input(DType::float32, {16, 3}, "w2");
  Var b2 = input(DType::float32, {3}, "b2");
  Var x, feat;
  std::vector<Var> params = {w1, b1, w2, b2};
  if (with_conv) {
    x = input(DType::float32, {8, 1, 4, 5}, "x");
    Var wc = input(DType::float32, {2, 1, 3, 3}, "wc");
    params.push_back(wc);
    ConvOptions o;
    o.border_mode = "half";
    feat = reshape(relu(conv2d(x, wc, o)), {8, 40});
    w1 = input(DType::float32, {40, 16}, "w1c");
    params[0] = w1;
  } else {
    x = input(DType::float32, {8, 12}, "x");
    feat = x;
  }
  Var h = relu(dot(feat, w1) + b1);
  Var p = softmax(dot(h, w2) + b2);
  Var loss = mean(categorical_crossentropy(p, y));
  const std::vector<Var> g = grad(loss, params);
  s.inputs = {x, y};
  s.inputs.insert(s.inputs.end(), params.begin(), params.end());
  s.outputs = {loss};
  for (std::size_t i = 0; i < params.size(); ++i) s.outputs.push_back(params[i] - g[i] * 0.1);
  return s;
}

}  // namespace

TEST_CASE("device placement puts every op with a CUDA kernel on the GPU, transfers at the edges",
          "[cuda_ops][placement]") {
  // Placement asks the kernel registry, which holds CUDA kernels only in CUDA builds.
  if (!CONVGRAPH_WITH_CUDA) {
    WARN("SKIPPED: built without CUDA: no CUDA kernels are registered to place");
    return;
  }
  for (bool with_conv : {false, true}) {
    INFO("with_conv " << with_conv);
    const Step s = training_step(with_conv);
    FunctionGraph g(s.inputs, s.outputs);
    place_on_device(g, DeviceKind::cuda);
    int on_gpu = 0, uploads = 0, downloads = 0;
    std::map<std::pair<const Node*, DeviceKind>, int> moves;
    for (const Var& v : g.toposort()) {
      if (!v.op()) {
        CHECK(v.type().device == DeviceKind::cpu);
        continue;
      }
      if (const TransferOp* t = as_transfer(v)) {
        // Every transfer really moves something, and each value moves to a device once.
        CHECK(v.inputs()[0].type().device != t->target());
        CHECK_FALSE(as_transfer(v.inputs()[0]));
        CHECK(++moves[{v.inputs()[0].node(), t->target()}] == 1);
        (t->target() == DeviceKind::cuda ? uploads : downloads)++;
        continue;
      }
      std::vector<TensorType> ts;
      for (const Var& in : v.inputs()) ts.push_back(in.type());
      const bool has = KernelRegistry::builtin().supported(*v.op(), DeviceKind::cuda, ts).is_ok();
      const DeviceKind want = has ? DeviceKind::cuda : DeviceKind::cpu;
      INFO(v.op()->label());
      CHECK(v.type().device == want);
      for (const Var& in : v.inputs()) CHECK(in.type().device == v.type().device);
      on_gpu += v.type().device == DeviceKind::cuda;
    }
    // The heavy ops all run there: matmuls, softmax, the cross-entropy pair, reductions.
    for (const Var& v : g.toposort()) {
      if (!v.op()) continue;
      const std::string n = v.op()->name();
      if (n == "matmul" || n == "softmax" || n == "softmax_grad" || n == "take_class" || n == "scatter_class" ||
          n == "mean" || n == "sum_to" || n == "relu" || n.rfind("AbstractConv", 0) == 0) {
        INFO(v.op()->label());
        CHECK(v.type().device == DeviceKind::cuda);
      }
    }
    CHECK(on_gpu > 10);
    // Every used graph input is uploaded (once, checked above); every output comes back.
    CHECK(uploads >= static_cast<int>(s.inputs.size()));
    for (const Var& out : g.outputs()) {
      CHECK(out.type().device == DeviceKind::cpu);
      CHECK(as_transfer(out) != nullptr);
    }
    CHECK(downloads >= static_cast<int>(s.outputs.size()));
  }
}

TEST_CASE("device placement leaves a device=cpu graph alone", "[cuda_ops][placement]") {
  const Step s = training_step(false);
  FunctionGraph g(s.inputs, s.outputs);
  const auto before = g.toposort().size();
  place_on_device(g, DeviceKind::cpu);
  CHECK(g.toposort().size() == before);
  for (const Var& v : g.toposort()) CHECK(v.type().device == DeviceKind::cpu);
}

TEST_CASE("device=cuda refuses a training step at compile time without a GPU", "[cuda_ops][placement]") {
  if (cuda_info().available) {  // the [cuda] cases below cover this machine; say so, do not pass
    WARN("SKIPPED: a GPU is present (" << cuda_info().device_name << "): the no-GPU refusal is not exercised");
    return;
  }
  for (bool with_conv : {false, true}) {
    const Step s = training_step(with_conv);
    CHECK_THROWS_AS(compile(s.inputs, s.outputs, Mode::from_flags("device=cuda")), DeviceError);
    CHECK_THROWS_WITH(compile(s.inputs, s.outputs, Mode::from_flags("device=cuda")),
                      Catch::Contains(cuda_info().reason));
  }
}

// ---- GPU vs CPU ([cuda]) ------------------------------------------------------------------

namespace {

Tensor data(Shape shape, DType dtype, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.7 * static_cast<double>(i) + 0.3) * scale + shift;
  if (is_integer(dtype))
    for (auto& e : v) e = std::round(e);
  return Tensor::from(v, std::move(shape), dtype);
}

/// Compiles `outs` for the CPU and for the GPU, runs both, compares.
void same_on_gpu(const std::vector<Var>& ins, const std::vector<Tensor>& args, const std::vector<Var>& outs,
                 double tol = 1e-5) {
  const Function cpu = compile(ins, outs, Mode::from_flags("device=cpu"));
  const Function gpu = compile(ins, outs, Mode::from_flags("device=cuda"));
  int gpu_nodes = 0;
  for (const Var& v : gpu.graph().toposort()) gpu_nodes += v.op() && !as_transfer(v) && v.type().device == DeviceKind::cuda;
  CHECK(gpu_nodes > 0);
  const auto a = cpu(args);
  const auto b = gpu(args);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("output " << i << " " << outs[i].type().to_string());
    REQUIRE(b[i].device() == DeviceKind::cpu);
    REQUIRE(a[i].shape() == b[i].shape());
    REQUIRE(a[i].dtype() == b[i].dtype());
    const auto va = a[i].to_vector(), vb = b[i].to_vector();
    for (std::size_t j = 0; j < va.size(); ++j) {
      INFO("element " << j);
      if (std::isnan(va[j])) CHECK(std::isnan(vb[j]));
      else CHECK(vb[j] == Approx(va[j]).epsilon(tol).margin(tol));
    }
  }
}

}  // namespace

TEST_CASE("cuda elementwise ops match the CPU", "[cuda][cuda_ops]") {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::float32, DType::float64}) {
    Var x = input(t, {4, 1, 3}, "x");
    Var y = input(t, {5, 1}, "y");
    const std::vector<Tensor> args = {data({4, 1, 3}, t, 2.0), data({5, 1}, t, 1.5, 0.1)};
    same_on_gpu({x, y}, args,
                {-x, exp(x), log(abs(x) + 0.5), sqrt(abs(x)), abs(x), sign(x), relu(x), sigmoid(x * 20.0), tanh(x),
                 x + y, x - y, x * y, x / y, pow(abs(x) + 0.1, y), maximum(x, y), minimum(x, y)});
    same_on_gpu({x, y}, args, {lt(x, y), le(x, y), gt(x, y), ge(x, y), eq(x, x), ne(x, y)});
    same_on_gpu({x, y}, args,
                {where(x > y, x, y), cast(x, DType::int32), cast(x, DType::float16), cast(x, DType::bfloat16),
                 cast(x > 0.0, t), cast(cast(x, DType::int64), t), zeros_like(x), ones_like(y)});
  }
  Var i = input(DType::int32, {6}, "i");
  Var j = input(DType::int32, {2, 1}, "j");
  same_on_gpu({i, j}, {data({6}, DType::int32, 9.0), data({2, 1}, DType::int32, 4.0, 6.0)},
              {i + j, i * j, i - j, abs(i), relu(i), maximum(i, j), cast(i, DType::float32)});
}

TEST_CASE("cuda reductions and the autodiff broadcast helpers match the CPU", "[cuda][cuda_ops]") {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::float32, DType::float64}) {
    Var x = input(t, {3, 4, 5, 6}, "x");
    Var b = input(t, {5, 1}, "b");
    const std::vector<Tensor> args = {data({3, 4, 5, 6}, t, 3.0), data({5, 1}, t)};
    same_on_gpu({x}, {args[0]},
                {sum(x), mean(x), max(x), min(x), sum(x, {1}), mean(x, {0, 2}, true), max(x, {3}), min(x, {1, 3}),
                 sum(x, {0, 1, 2})});
    // Gradients: sum_to (bias), broadcast_to / broadcast_mean_grad (reductions), max's where.
    const Var cost = sum(mean(x * b, {1}) * 2.0) + sum(max(x, {2}));
    const auto g = grad(cost, {x, b});
    same_on_gpu({x, b}, args, {g[0], g[1]});
  }
  Var big = input(DType::float32, {2, 100000}, "big");  // one block per output
  same_on_gpu({big}, {data({2, 100000}, DType::float32)}, {sum(big, {1}), max(big, {1}), mean(big)}, 1e-4);
}

TEST_CASE("cuda softmax, log_softmax, their gradients and cross-entropy match the CPU", "[cuda][cuda_ops]") {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::float32, DType::float64}) {
    for (std::int64_t n : {3, 10, 1000}) {
      INFO("classes " << n);
      Var x = input(t, {7, n}, "x");
      Var y = input(DType::int64, {7}, "y");
      Tensor labels = data({7}, DType::int64, 0.0);
      for (std::int64_t r = 0; r < 7; ++r) labels.set(r, static_cast<double>((r * 5) % n));
      const std::vector<Tensor> args = {data({7, n}, t, 4.0), labels};
      const Var sm = softmax(x), lsm = log_softmax(x);
      const Var loss = mean(categorical_crossentropy(sm, y)) + sum(lsm * lsm) * 0.01;
      same_on_gpu({x, y}, args, {sm, lsm, loss, grad(loss, x)});
    }
  }
}

TEST_CASE("cuda matmul (2-D, batched, broadcast, vectors) matches the CPU", "[cuda][cuda_ops]") {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::float32, DType::float64}) {
    Var a = input(t, {5, 7}, "a"), b = input(t, {7, 3}, "b");
    Var ba = input(t, {2, 3, 5, 7}, "ba"), bb = input(t, {3, 7, 4}, "bb"), bc = input(t, {2, 1, 7, 2}, "bc");
    Var v = input(t, {7}, "v");
    same_on_gpu({a, b, ba, bb, bc, v},
                {data({5, 7}, t), data({7, 3}, t), data({2, 3, 5, 7}, t), data({3, 7, 4}, t), data({2, 1, 7, 2}, t),
                 data({7}, t)},
                {dot(a, b), matmul(ba, bb), matmul(ba, bc), matmul(a, v), matmul(v, b), matmul(ba, b)}, 1e-4);
  }
}

TEST_CASE("a whole MLP (and conv) training step on device=cuda matches device=cpu", "[cuda][cuda_ops]") {
  SKIP_WITHOUT_GPU();
  for (bool with_conv : {false, true}) {
    INFO("with_conv " << with_conv);
    const Step s = training_step(with_conv);
    std::vector<Tensor> args;
    for (const Var& in : s.inputs) {
      Tensor a = data(in.shape(), in.dtype(), 0.5);
      if (in.dtype() == DType::int32)
        for (std::int64_t r = 0; r < a.numel(); ++r) a.set(r, static_cast<double>(r % 3));
      args.push_back(a);
    }
    same_on_gpu(s.inputs, args, s.outputs, 1e-4);
  }
}
