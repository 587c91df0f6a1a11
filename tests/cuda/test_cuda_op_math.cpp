// The arithmetic of the CUDA DSL-op kernels (reduce.cu, softmax.cu, the cast of
// elementwise.cu) on the host, in every build: the kernels' loops re-enacted over the
// very formulas they call (backends/cuda/kernel_math.hpp) and the plans they index with
// (strided_plan.hpp), including the order of the block-wide tree reductions, and compared
// with the CPU kernels run through compile(). Edge cases: NaN and infinities, rows longer
// than a block, reductions over strided axes, integer means, bool max/min.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/kernel_math.hpp"
#include "backends/cuda/strided_plan.hpp"

using namespace convgraph;
namespace km = convgraph::cuda::kernels;
using km::RedOp;

namespace {

constexpr int kBlock = 256;  // threads per block of the kernels (kThreads, launch.cuh)
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Runs `out = f(in...)` on the CPU kernels.
std::vector<Tensor> cpu(const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Tensor>& args) {
  return compile(in, out)(args);
}

template <class T>
std::vector<T> values(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

/// Equal, or both NaN; floats within `rel` of max(1, |want|).
bool close(double got, double want, double rel) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
}

// ---- reductions: reduce_per_thread and reduce_per_block of reduce.cu ---------------------

/// Outputs as doubles (std::vector<bool> has no data()).
template <class T>
std::vector<double> emulate_reduce(RedOp op, const T* x, const gpu::ReducePlan& p, bool per_block) {
  using A = km::ReduceAcc<T>;
  std::vector<double> y(static_cast<std::size_t>(p.out_count));
  for (long long o = 0; o < p.out_count; ++o) {
    const T* base = x + gpu::strided_offset(p.kept_shape, p.kept_strides, p.kept_rank, o);
    auto at = [&](long long j) {
      return static_cast<A>(base[gpu::strided_offset(p.red_shape, p.red_strides, p.red_rank, j)]);
    };
    A acc = km::reduce_identity<T>(op);
    if (!per_block) {
      for (long long j = 0; j < p.red_count; ++j) acc = km::reduce_combine<A>(op, acc, at(j));
    } else {  // each thread strides over the inputs, then a shared-memory tree
      std::vector<A> part(kBlock, km::reduce_identity<T>(op));
      for (int t = 0; t < kBlock; ++t)
        for (long long j = t; j < p.red_count; j += kBlock) part[t] = km::reduce_combine<A>(op, part[t], at(j));
      for (int s = kBlock / 2; s > 0; s /= 2)
        for (int t = 0; t < s; ++t) part[t] = km::reduce_combine<A>(op, part[t], part[t + s]);
      acc = part[0];
    }
    y[static_cast<std::size_t>(o)] = static_cast<double>(km::reduce_finish<T>(op, acc, p.red_count));
  }
  return y;
}

template <class T>
void check_reduce(DType dt, const Shape& shape, const std::vector<int>& axes, const std::vector<double>& data) {
  Var x = input(dt, shape, "x");
  Tensor xv(dt, shape);
  for (std::size_t i = 0; i < data.size(); ++i) xv.set(static_cast<std::int64_t>(i), data[i]);
  const bool is_bool = dt == DType::boolean;
  std::vector<Var> outs;
  std::vector<RedOp> ops;
  if (!is_bool) {
    outs.push_back(sum(x, axes));
    ops.push_back(RedOp::sum);
  }
  if (std::is_floating_point_v<T>) {  // mean is a float op
    outs.push_back(mean(x, axes));
    ops.push_back(RedOp::mean);
  }
  outs.push_back(max(x, axes));
  outs.push_back(min(x, axes));
  ops.insert(ops.end(), {RedOp::max, RedOp::min});
  const std::vector<Tensor> want = cpu({x}, outs, {xv});
  std::vector<int> resolved = axes;  // {} means every axis (the op's attributes hold them all)
  if (resolved.empty())
    for (int a = 0; a < static_cast<int>(shape.size()); ++a) resolved.push_back(a);
  const gpu::ReducePlan plan = gpu::plan_reduce(shape, resolved);
  const T* xs = xv.data<T>();
  for (std::size_t k = 0; k < ops.size(); ++k)
    for (bool per_block : {false, true}) {
      INFO(dtype_name(dt) << " " << shape_to_string(shape) << " op " << static_cast<int>(ops[k])
                          << (per_block ? " per block" : " per thread"));
      const std::vector<double> got = emulate_reduce<T>(ops[k], xs, plan, per_block);
      REQUIRE(static_cast<std::int64_t>(got.size()) == want[k].numel());
      // Floats sum in double either way; only the tree's order differs from the CPU's.
      const bool exact = !std::is_floating_point_v<T> || ops[k] == RedOp::max || ops[k] == RedOp::min || !per_block;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[k].get(static_cast<std::int64_t>(i));
        INFO("output " << i << ": emulated " << g << ", CPU " << w);
        CHECK(close(g, w, exact ? 0.0 : 1e-6));
      }
    }
}

}  // namespace

TEST_CASE("CUDA reduction arithmetic matches the CPU kernel (both kernel strategies)", "[cuda_math]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-10, 10);
  auto random = [&](std::size_t n) {
    std::vector<double> v(n);
    for (double& e : v) e = u(rng);
    return v;
  };
  std::vector<double> a = random(3 * 5 * 7);
  a[4] = kNaN;     // a NaN in one output's inputs
  a[20] = kInf;    // an infinity in another's
  a[40] = -kInf;
  for (const std::vector<int>& axes : std::vector<std::vector<int>>{{1}, {0, 2}, {2}, {}, {0}}) {
    check_reduce<float>(DType::float32, {3, 5, 7}, axes, a);
    check_reduce<double>(DType::float64, {3, 5, 7}, axes, a);
  }
  // Rows longer than a block: every thread of the tree holds several inputs.
  const std::vector<double> b = random(4 * 600);
  check_reduce<float>(DType::float32, {4, 600}, {1}, b);
  check_reduce<double>(DType::float64, {2, 600, 2}, {1}, random(2 * 600 * 2));
  // Integers (sum, max, min) and bool max/min.
  std::vector<double> ints(3 * 5 * 7);
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<double>(static_cast<int>(i * 37 % 23) - 11);
  check_reduce<std::int32_t>(DType::int32, {3, 5, 7}, {1}, ints);
  check_reduce<std::int64_t>(DType::int64, {3, 5, 7}, {0, 2}, ints);
  std::vector<double> bits(3 * 5 * 7, 0.0);
  bits[3] = bits[50] = 1.0;
  for (std::size_t i = 70; i < 105; ++i) bits[i] = 1.0;
  check_reduce<bool>(DType::boolean, {3, 5, 7}, {2}, bits);
  check_reduce<bool>(DType::boolean, {3, 5, 7}, {0, 1}, bits);
}

namespace {

// ---- softmax family: softmax_kernel and softmax_grad_kernel of softmax.cu ---------------

/// block_reduce of softmax.cu: per-thread values combined pairwise in a tree.
template <bool kMax>
double block_reduce(std::vector<double> part) {
  for (int s = kBlock / 2; s > 0; s /= 2)
    for (int t = 0; t < s; ++t) part[t] = kMax ? km::softmax_max(part[t], part[t + s]) : part[t] + part[t + s];
  return part[0];
}

template <class T>
std::vector<T> emulate_softmax(bool log_out, const std::vector<T>& x, long long rows, long long n) {
  std::vector<T> y(x.size());
  for (long long r = 0; r < rows; ++r) {
    const T* xr = x.data() + r * n;
    T* yr = y.data() + r * n;
    std::vector<double> part(kBlock);
    for (int t = 0; t < kBlock; ++t) {
      double m = static_cast<double>(xr[0]);
      for (long long j = t; j < n; j += kBlock) m = km::softmax_max(m, static_cast<double>(xr[j]));
      part[t] = m;
    }
    const T mx = static_cast<T>(block_reduce<true>(part));
    for (int t = 0; t < kBlock; ++t) {
      double s = 0;
      for (long long j = t; j < n; j += kBlock) {
        const T e = km::softmax_exp(xr[j], mx);
        s += e;
        if (!log_out) yr[j] = e;
      }
      part[t] = s;
    }
    const double s = block_reduce<false>(part);
    const T inv = km::softmax_scale<T>(s);
    for (long long j = 0; j < n; ++j) yr[j] = log_out ? km::log_softmax_value(xr[j], mx, s) : yr[j] * inv;
  }
  return y;
}

template <class T>
std::vector<T> emulate_softmax_grad(bool log_out, const std::vector<T>& g, const std::vector<T>& y, long long rows,
                                    long long n) {
  std::vector<T> out(g.size());
  for (long long r = 0; r < rows; ++r) {
    std::vector<double> part(kBlock, 0.0);
    for (int t = 0; t < kBlock; ++t)
      for (long long j = t; j < n; j += kBlock) part[t] += km::softmax_grad_term(log_out, g[r * n + j], y[r * n + j]);
    const T st = static_cast<T>(block_reduce<false>(part));
    for (long long j = 0; j < n; ++j) out[r * n + j] = km::softmax_grad_value(log_out, g[r * n + j], y[r * n + j], st);
  }
  return out;
}

template <class T>
void check_softmax(DType dt, long long rows, long long n, const std::vector<double>& data, double rel) {
  const Shape shape{rows, n};
  Var x = input(dt, shape, "x");
  Var g = input(dt, shape, "g");
  Tensor xv(dt, shape), gv(dt, shape);
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(-1, 1);
  for (std::int64_t i = 0; i < rows * n; ++i) {
    xv.set(i, data[static_cast<std::size_t>(i)]);
    gv.set(i, u(rng));
  }
  Var sm = softmax(x), lsm = log_softmax(x);
  const std::vector<Var> dsm = grad(sum(sm * g), std::vector<Var>{x});
  const std::vector<Var> dlsm = grad(sum(lsm * g), std::vector<Var>{x});
  const std::vector<Tensor> want = cpu({x, g}, {sm, lsm, dsm[0], dlsm[0]}, {xv, gv});
  const std::vector<T> xs = values<T>(xv), gs = values<T>(gv);
  const std::vector<T> got[4] = {emulate_softmax<T>(false, xs, rows, n), emulate_softmax<T>(true, xs, rows, n),
                                 emulate_softmax_grad<T>(false, gs, values<T>(want[0]), rows, n),
                                 emulate_softmax_grad<T>(true, gs, values<T>(want[1]), rows, n)};
  const char* names[4] = {"softmax", "log_softmax", "softmax grad", "log_softmax grad"};
  for (int k = 0; k < 4; ++k)
    for (std::int64_t i = 0; i < rows * n; ++i) {
      const double gk = static_cast<double>(got[k][static_cast<std::size_t>(i)]), w = want[k].get(i);
      INFO(dtype_name(dt) << " " << names[k] << " [" << i / n << ", " << i % n << "]: emulated " << gk << ", CPU " << w);
      REQUIRE(close(gk, w, rel));
    }
}

}  // namespace

TEST_CASE("CUDA softmax arithmetic matches the CPU kernel, gradients included", "[cuda_math]") {
  // Rows: ordinary; huge values (exp would overflow without the max); one -inf; one NaN
  // (the whole row NaN); all -inf (NaN, as 0/0); +inf (NaN).
  const long long n = 5;
  const std::vector<double> rows = {0.5, -1.0, 2.0, 0.0, 1.5,       1000, 999, 998, -1000, 1000,
                                    -kInf, 1.0, 2.0, 3.0, 4.0,      1.0, kNaN, 2.0, 3.0, 4.0,
                                    -kInf, -kInf, -kInf, -kInf, -kInf, 1.0, kInf, 0.0, 2.0, 3.0};
  check_softmax<float>(DType::float32, 6, n, rows, 1e-6);
  check_softmax<double>(DType::float64, 6, n, rows, 1e-14);
  // Rows longer than a block, and a single column.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-20, 20);
  std::vector<double> wide(3 * 700);
  for (double& v : wide) v = u(rng);
  check_softmax<float>(DType::float32, 3, 700, wide, 1e-5);
  check_softmax<double>(DType::float64, 3, 700, wide, 1e-13);
  check_softmax<float>(DType::float32, 4, 1, {1.0, -3.0, 1e30, kNaN}, 1e-6);
}

TEST_CASE("CUDA cast arithmetic matches the CPU cast where both are defined", "[cuda_math]") {
  // CPU casts go through double (Tensor::set/get); the GPU keeps integers in 64 bits.
  // Compared: floats, integers within 2^53, bool both ways, float -> int in range.
  const std::vector<double> v = {0.0, -0.0, 1.0, -2.75, 2.75, 123456.5, -7.0, 1e-30, 65504.0};
  auto check = [&](DType from, DType to, auto tfrom, auto tto, const std::vector<double>& in) {
    using F = decltype(tfrom);
    using U = decltype(tto);
    Var x = input(from, {static_cast<std::int64_t>(in.size())}, "x");
    Tensor xv(from, {static_cast<std::int64_t>(in.size())});
    for (std::size_t i = 0; i < in.size(); ++i) xv.set(static_cast<std::int64_t>(i), in[i]);
    const Tensor want = cpu({x}, {cast(x, to)}, {xv})[0];
    const std::vector<F> xs = values<F>(xv);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const U got = km::cast_store<U>(km::cast_load(xs[i]));
      INFO(dtype_name(from) << " -> " << dtype_name(to) << " of " << in[i]);
      CHECK(close(static_cast<double>(got), want.get(static_cast<std::int64_t>(i)), 0.0));
    }
  };
  check(DType::float64, DType::float32, double{}, float{}, v);
  check(DType::float32, DType::float64, float{}, double{}, v);
  check(DType::float64, DType::int32, double{}, std::int32_t{}, v);
  check(DType::float32, DType::int64, float{}, std::int64_t{}, v);
  check(DType::float64, DType::boolean, double{}, bool{}, {0.0, -0.0, 0.5, -3.0, kNaN, kInf});
  check(DType::boolean, DType::float32, bool{}, float{}, {0.0, 1.0});
  check(DType::int64, DType::int32, std::int64_t{}, std::int32_t{}, {0.0, -5.0, 2147483647.0, -2147483648.0});
  check(DType::int32, DType::boolean, std::int32_t{}, bool{}, {0.0, 2.0, -1.0});
  check(DType::int64, DType::float64, std::int64_t{}, double{}, {9007199254740992.0, -3.0});
  // fill stores a double the same way.
  CHECK(km::cast_store<std::int32_t>(km::cast_load(-2.5)) == -2);
  CHECK(km::cast_store<bool>(km::cast_load(0.25)));
  // Class indices: in range are [0, n).
  CHECK(km::class_in_range(0, 3));
  CHECK(km::class_in_range(2, 3));
  CHECK_FALSE(km::class_in_range(3, 3));
  CHECK_FALSE(km::class_in_range(-1, 3));
}

TEST_CASE("sizes for 32-bit library arguments are checked, naming the argument", "[cuda_math]") {
  CHECK(gpu::checked_int(0, "op", "m") == 0);
  CHECK(gpu::checked_int(2147483647, "op", "m") == 2147483647);
  CHECK_THROWS_AS(gpu::checked_int(std::int64_t{1} << 31, "cuda matmul", "m (rows of a)"), ValueError);
  CHECK_THROWS_WITH(gpu::checked_int(std::int64_t{1} << 31, "cuda matmul", "m (rows of a)"),
                    Catch::Contains("cuda matmul: m (rows of a) = 2147483648") && Catch::Contains("2147483647"));
  CHECK_THROWS_AS(gpu::checked_int(-1, "op", "k"), ValueError);
}
