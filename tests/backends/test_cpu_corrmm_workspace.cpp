// cpu.corrmm under workspace limits: the column buffer is cut into chunks (batch sub-ranges,
// position ranges) and the answer must not change; below the smallest chunk it declines.
// float32 has no column buffer (test_cpu_corrmm_fused.cpp): it runs under any limit.
#include <catch2/catch.hpp>
#include <cstdio>

#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

TEST_CASE("corrmm: chunking under a small workspace_limit gives identical results", "[backends][conv][cpu][corrmm]") {
  const auto corrmm = make_cpu_corrmm_algorithm();
  ThreadPool pool(2);
  long runs = 0;
  for (const ConvCase& c : conv_chunking_cases())
    for (ConvDirection dir : kAllDirections)
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        // Integer data: every partial sum is exact, so any chunking must agree bit for bit.
        const ConvOperands ints = make_operands(p, 11, /*integers=*/true);
        const ConvOperands reals = make_operands(p, 12);
        const ConvRun full_i = run_cpu_conv(*corrmm, p, ints, &pool);
        const ConvRun full_r = run_cpu_conv(*corrmm, p, reals, &pool);
        const std::size_t full_ws = corrmm->workspace_bytes(p);
        const auto ref = reference_output(p, ints);
        REQUIRE(max_abs_diff(full_i.out, ref) == 0.0);

        // The smallest chunk: 32 output positions of one image (or the whole image).
        const std::size_t elem = dtype_size(dtype);
        const std::size_t per_position = static_cast<std::size_t>(p.C * p.kernel_numel()) * elem;
        const std::size_t min_ws =
            per_position * static_cast<std::size_t>(std::min<std::int64_t>(32, p.out_numel()));
        const bool pointwise = full_ws == 0;
        for (std::size_t limit : {min_ws, min_ws + per_position * 7, 2 * min_ws + 1, full_ws / 2,
                                  full_ws / 3 + per_position * 40}) {
          if (limit < min_ws) continue;
          ConvProblem q = p;
          q.workspace_limit = limit;
          INFO(c.name << " " << q.key());
          REQUIRE(corrmm->applicable(q));
          const std::size_t ws = corrmm->workspace_bytes(q);
          CHECK(ws <= limit);
          const ConvRun chunked_i = run_cpu_conv(*corrmm, q, ints, &pool);
          CHECK(max_abs_diff(chunked_i.out, full_i.out) == 0.0);
          const ConvRun chunked_r = run_cpu_conv(*corrmm, q, reals, &pool);
          // With real data only the order of the sums over chunks (grad weights) may move.
          CHECK(max_abs_diff(chunked_r.out, full_r.out) <=
                (dtype == DType::float64 ? 1e-12 : 1e-5) * std::max(1.0, max_abs(full_r.out)));
          ++runs;
        }
        if (dtype == DType::float32) {
          // No column buffer: any limit works.
          ConvProblem q = p;
          q.workspace_limit = 0;
          CHECK(corrmm->applicable(q));
          CHECK(corrmm->workspace_bytes(q) == 0);
          CHECK(max_abs_diff(run_cpu_conv(*corrmm, q, ints, &pool).out, full_i.out) == 0.0);
        } else if (!pointwise) {
          ConvProblem q = p;
          q.workspace_limit = min_ws - 1;
          const Status st = corrmm->applicable(q);
          CHECK_FALSE(st);
          CHECK(st.reason().find("workspace_limit") != std::string::npos);
        } else {
          ConvProblem q = p;
          q.workspace_limit = 0;  // a 1x1 stride-1 convolution needs no column buffer at all
          CHECK(corrmm->applicable(q));
          CHECK(corrmm->workspace_bytes(q) == 0);
        }
      }
  std::printf("corrmm chunking: %ld limited runs compared\n", runs);
}

TEST_CASE("corrmm: run() refuses a workspace smaller than it asked for", "[backends][conv][cpu][corrmm]") {
  const auto corrmm = make_cpu_corrmm_algorithm();
  // float64's column buffer (float32 asks for none but a strided 1x1 filter's subsampled x).
  for (const auto& [dir, dtype] : {std::pair{ConvDirection::forward, DType::float64},
                                   std::pair{ConvDirection::grad_weights, DType::float64}}) {
    const ConvProblem p = conv_chunking_cases().front().problem(dir, dtype);
    REQUIRE(corrmm->workspace_bytes(p) > 0);
    const ConvOperands ops = make_operands(p, 3);
    CHECK_THROWS_AS(run_cpu_conv(*corrmm, p, ops, nullptr, corrmm->workspace_bytes(p) - 1), MemoryError);
  }
}

TEST_CASE("corrmm and direct decline what they cannot do, with a reason", "[backends][conv][cpu]") {
  ConvProblem p = conv_chunking_cases().front().problem(ConvDirection::forward, DType::float32);
  const auto corrmm = make_cpu_corrmm_algorithm();
  const auto direct = make_cpu_direct_algorithm();
  p.compute = DType::float64;
  CHECK_FALSE(corrmm->applicable(p));
  CHECK(direct->applicable(p));
  p.dtype = DType::float16;
  p.compute = DType::float32;
  const Status a = corrmm->applicable(p), b = direct->applicable(p);
  CHECK_FALSE(a);
  CHECK_FALSE(b);
  CHECK(a.reason().find("float16") != std::string::npos);
  CHECK(b.reason().find("float16") != std::string::npos);
  CHECK(direct->workspace_bytes(p) == 0);
}
