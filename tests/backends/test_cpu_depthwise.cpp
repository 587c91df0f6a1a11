// cpu.depthwise on targeted cases (the shared sweep covers its groups == C cases too):
// channel multipliers, strides, dilation, asymmetric padding, 1D/3D, planes larger than a
// vector row, rows short enough for wide rows, both dtypes, every direction; exact on
// integer data; declining with a reason.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

namespace {

using i64 = std::int64_t;
using Axes = std::vector<i64>;

/// A depthwise case: C input channels, C * mult output channels, groups = C.
ConvCase dw_case(int ndim, i64 N, i64 C, i64 mult, const Axes& in, const Axes& ker, BorderMode border,
                 const Axes& stride, const Axes& dil, bool flip) {
  ConvCase c;
  c.params.ndim = ndim;
  c.params.border = std::move(border);
  c.params.stride = stride;
  c.params.dilation = dil;
  c.params.filter_flip = flip;
  c.params.groups = C;
  c.x_shape = {N, C};
  c.x_shape.insert(c.x_shape.end(), in.begin(), in.end());
  c.w_shape = {C * mult, 1};
  c.w_shape.insert(c.w_shape.end(), ker.begin(), ker.end());
  c.name = std::to_string(ndim) + "d n" + std::to_string(N) + " c" + std::to_string(C) + " mult" +
           std::to_string(mult) + " " + c.params.border.to_string() + (flip ? " conv" : " xcorr");
  return c;
}

using Pairs = std::vector<std::pair<i64, i64>>;

std::vector<ConvCase> targeted_cases() {
  return {
      // The benchmark layer's shape, smaller batch.
      dw_case(2, 2, 16, 1, {28, 28}, {3, 3}, 1, {1, 1}, {1, 1}, false),
      // Channel multipliers 2 and 3.
      dw_case(2, 2, 5, 2, {9, 21}, {3, 3}, "half", {1, 1}, {1, 1}, true),
      dw_case(2, 1, 4, 3, {12, 17}, {3, 5}, 2, {1, 1}, {1, 1}, false),
      // Stride 2 (and mixed strides), dilation 2, asymmetric padding.
      dw_case(2, 2, 6, 1, {15, 33}, {3, 3}, 1, {2, 2}, {1, 1}, false),
      dw_case(2, 1, 3, 2, {14, 19}, {3, 3}, Pairs{{0, 2}, {3, 1}}, {2, 3}, {1, 1}, true),
      dw_case(2, 2, 4, 1, {20, 37}, {3, 3}, 2, {1, 1}, {2, 2}, false),
      // Stride == dilation vertically: grad weights' row-pair 3x3 path with rows 2 apart.
      dw_case(2, 2, 3, 2, {19, 23}, {3, 3}, 2, {2, 1}, {2, 1}, true),
      dw_case(2, 1, 3, 3, {13, 29}, {5, 3}, Pairs{{1, 3}, {2, 0}}, {3, 2}, {2, 3}, true),
      dw_case(2, 2, 3, 1, {8, 8}, {4, 2}, "full", {1, 1}, {1, 1}, false),
      dw_case(2, 1, 2, 2, {5, 6}, {5, 7}, "full", {2, 2}, {1, 1}, true),
      // 1D and 3D.
      dw_case(1, 3, 7, 1, {101}, {5}, Pairs{{3, 1}}, {1}, {2}, true),
      dw_case(1, 2, 4, 2, {64}, {3}, "valid", {3}, {1}, false),
      dw_case(3, 2, 3, 1, {6, 7, 19}, {3, 3, 3}, 1, {1, 1, 1}, {1, 1, 1}, false),
      dw_case(3, 1, 2, 2, {5, 9, 11}, {3, 2, 3}, Pairs{{0, 1}, {2, 0}, {1, 1}}, {2, 1, 2}, {1, 2, 2}, true),
      // Short rows at stride 1: forward and grad inputs run "wide rows" (output vectors
      // spanning rows) where that saves vectors: 7x7 planes at 16 lanes, 2- and 3-wide
      // rows at 8 (AVX2, double), dilation along the row, a channel multiplier, and the
      // grad inputs of a stride-2 layer (its geometry has stride 1).
      dw_case(2, 2, 5, 2, {7, 7}, {3, 3}, 1, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 3, 1, {7, 7}, {5, 5}, 2, {1, 1}, {1, 1}, false),
      dw_case(2, 2, 3, 1, {9, 4}, {3, 3}, Pairs{{1, 1}, {0, 0}}, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 4, 3, {11, 3}, {3, 2}, Pairs{{1, 1}, {0, 1}}, {1, 1}, {1, 1}, false),
      dw_case(2, 2, 3, 1, {6, 9}, {3, 3}, 2, {1, 1}, {1, 2}, false),
      dw_case(2, 2, 4, 1, {7, 6}, {3, 3}, 1, {2, 2}, {1, 1}, true),
      // Output vectors in blocks of fewer than 8 (14 rows of 2 vectors: 4 x 7 at 16 lanes;
      // 6 rows: one block of 6) and filters wider than the plane: each block runs only the
      // taps that read inside the source for one of its vectors (RepLKNet's 31x31 on 14x14
      // as 13x13 on 6x6, a 7x7 on 14 rows, a strided grad inputs, 3-D).
      dw_case(2, 2, 3, 1, {14, 20}, {7, 7}, 3, {1, 1}, {1, 1}, false),
      dw_case(2, 2, 2, 1, {6, 6}, {13, 13}, 6, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 4, 2, {11, 18}, {13, 11}, Pairs{{6, 6}, {5, 5}}, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 3, 1, {11, 17}, {5, 7}, Pairs{{4, 2}, {6, 3}}, {2, 1}, {1, 2}, false),
      dw_case(3, 1, 2, 1, {3, 5, 18}, {5, 5, 9}, 4, {1, 1, 1}, {1, 1, 1}, true),
      // Small planes whose rows are narrower than a vector, at stride 1 with outputs the
      // input's shape: grad weights runs each plane as one flat run of vectors, every tap
      // masked to the positions it reads inside (1-D, asymmetric pads, dilation, 3-D, a
      // plane of 120 floats, a channel multiplier).
      dw_case(1, 2, 3, 1, {12}, {5}, 2, {1}, {1}, false),
      dw_case(2, 2, 3, 2, {10, 12}, {3, 3}, Pairs{{0, 2}, {2, 0}}, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 4, 1, {8, 8}, {5, 5}, 4, {1, 1}, {2, 2}, false),
      dw_case(3, 2, 2, 1, {3, 4, 5}, {3, 3, 3}, Pairs{{1, 1}, {1, 1}, {2, 2}}, {1, 1, 1}, {1, 1, 2}, true),
      // Large planes (many output vectors per row, many rows).
      dw_case(2, 1, 3, 1, {67, 131}, {3, 3}, 1, {1, 1}, {1, 1}, true),
      dw_case(2, 1, 2, 2, {70, 150}, {7, 7}, 3, {2, 2}, {1, 1}, false),
  };
}

}  // namespace

TEST_CASE("depthwise: targeted cases match the reference in every direction", "[backends][conv][cpu][depthwise]") {
  const auto dw = make_cpu_depthwise_algorithm();
  ThreadPool pool(2);
  std::uint64_t seed = 100;
  long runs = 0;
  for (const ConvCase& c : targeted_cases())
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++);
      const auto ref = reference_output(p64, ops);
      const double scale = std::max(1.0, max_abs(ref));
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        INFO(c.name << " " << p.key());
        REQUIRE(dw->applicable(p));
        CHECK(dw->workspace_bytes(p) == 0);
        const ConvRun run = run_cpu_conv(*dw, p, ops, &pool);
        CHECK(run.inputs_intact);
        CHECK(max_abs_diff(run.out, ref) / scale <= (dtype == DType::float64 ? 1e-10 : 1e-4));
        ++runs;
      }
    }
  CHECK(runs == static_cast<long>(targeted_cases().size()) * 6);
}

TEST_CASE("depthwise: exact on integer data, with and without a pool", "[backends][conv][cpu][depthwise]") {
  const auto dw = make_cpu_depthwise_algorithm();
  ThreadPool pool(2);
  for (const ConvCase& c : targeted_cases())
    for (ConvDirection dir : kAllDirections)
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        const ConvOperands ops = make_operands(p, 17, /*integers=*/true);
        const auto ref = reference_output(p, ops);
        INFO(c.name << " " << p.key());
        const ConvRun threaded = run_cpu_conv(*dw, p, ops, &pool);
        const ConvRun serial = run_cpu_conv(*dw, p, ops, nullptr);
        CHECK(max_abs_diff(threaded.out, ref) == 0.0);
        CHECK(max_abs_diff(serial.out, threaded.out) == 0.0);
      }
}

TEST_CASE("depthwise: declines what it cannot do, with a reason", "[backends][conv][cpu][depthwise]") {
  const auto dw = make_cpu_depthwise_algorithm();
  CHECK(dw->name() == "cpu.depthwise");
  const auto tags = dw->tags();
  for (const char* t : {"conv_direct", "fast_run", "fast_compile"})
    CHECK(std::find(tags.begin(), tags.end(), std::string(t)) != tags.end());

  // Two input channels per group.
  ConvCase c = dw_case(2, 1, 4, 1, {8, 8}, {3, 3}, 1, {1, 1}, {1, 1}, false);
  c.params.groups = 2;
  c.w_shape[1] = 2;
  ConvProblem p = c.problem(ConvDirection::forward, DType::float32);
  Status st = dw->applicable(p);
  CHECK_FALSE(st);
  CHECK(st.reason().find("C/G") != std::string::npos);
  c.params.groups = 1;
  c.w_shape[1] = 4;
  CHECK_FALSE(dw->applicable(c.problem(ConvDirection::grad_weights, DType::float64)));
  // One channel without groups is a dense convolution, left to corrmm/direct.
  ConvCase single = dw_case(2, 1, 1, 4, {8, 8}, {3, 3}, 1, {1, 1}, {1, 1}, false);
  REQUIRE(single.problem(ConvDirection::forward, DType::float32).G == 1);
  st = dw->applicable(single.problem(ConvDirection::forward, DType::float32));
  CHECK_FALSE(st);
  CHECK(st.reason().find("grouped") != std::string::npos);
  const ConvOperands ops = make_operands(p, 1);
  CHECK_THROWS(run_cpu_conv(*dw, p, ops, nullptr));

  // A float64 accumulator for float32 storage is left to cpu.direct.
  p = dw_case(2, 1, 4, 1, {8, 8}, {3, 3}, 1, {1, 1}, {1, 1}, false).problem(ConvDirection::forward, DType::float32);
  REQUIRE(dw->applicable(p));
  p.compute = DType::float64;
  st = dw->applicable(p);
  CHECK_FALSE(st);
  CHECK(st.reason().find("compute") != std::string::npos);
}

TEST_CASE("depthwise: registered first, ahead of corrmm", "[backends][conv][cpu][depthwise]") {
  std::vector<std::string> cpu;
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->device() == DeviceKind::cpu) cpu.push_back(a->name());
  REQUIRE_FALSE(cpu.empty());
  CHECK(cpu.front() == "cpu.depthwise");
}
