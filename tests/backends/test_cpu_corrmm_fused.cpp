// cpu.corrmm's float32 path without a column buffer: im2col packed straight into the GEMM's
// B panels (im2col_pack, im2col_pack_t), the batch-reduce grad-weights GEMM (its depth
// split into partial sums), and the tile-wise col2im of grad inputs. White-box checks of the packers against
// im2col at every CPU level, then shapes that cross the GEMM's blocks (depth blocks,
// column tiles, panel tails) in all three directions against the float64 reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/conv_geometry.hpp"
#include "backends/cpu/im2col.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using i64 = std::int64_t;

namespace {

using Axes = std::vector<i64>;
using Pairs = std::vector<std::pair<i64, i64>>;

/// Small geometries for the packers: strides, dilation, padding on each side, flip, 1-D/3-D.
std::vector<ConvCase> pack_cases() {
  return {
      make_conv_case("2-D half", {1, 3, 9, 11}, {1, 3, 3, 3}, "half", {1, 1}),
      make_conv_case("2-D s2 d2 flip", {1, 2, 13, 12}, {1, 2, 3, 2}, Pairs{{2, 1}, {0, 3}}, {2, 3}, {2, 2}, true),
      make_conv_case("1-D full s3", {1, 2, 40}, {1, 2, 5}, "full", {3}),
      make_conv_case("3-D pad", {1, 2, 4, 5, 6}, {1, 2, 3, 2, 3}, 1, {1, 2, 1}, {}, true),
      make_conv_case("pad wider than the kernel", {1, 1, 7}, {1, 1, 2}, Pairs{{4, 5}}, {1}),
  };
}

/// Shapes that cross the GEMM's blocks: depth above one block (> 384 rows), positions
/// over several column tiles and grad-inputs tiles, row counts that leave partial register
/// blocks, narrow and wide dW (depth split or not), groups, 1-D and 3-D.
std::vector<ConvCase> layer_cases() {
  return {
      make_conv_case("deep 3x3", {2, 48, 9, 10}, {20, 48, 3, 3}, "half", {1, 1}),
      make_conv_case("wide image", {3, 4, 26, 31}, {17, 4, 3, 3}, 1, {1, 1}, {}, true),
      make_conv_case("strided dilated", {2, 6, 23, 29}, {9, 6, 3, 3}, 2, {2, 1}, {2, 2}),
      make_conv_case("grouped", {2, 12, 11, 13}, {30, 4, 3, 3}, "half", {1, 1}, {}, false, 3),
      make_conv_case("stem-like 7x7 s2", {3, 3, 21, 23}, {16, 3, 7, 7}, 3, {2, 2}),
      make_conv_case("1-D long", {2, 5, 700}, {7, 5, 5}, Pairs{{3, 1}}, {1}, {2}, true),
      make_conv_case("3-D", {2, 5, 5, 6, 7}, {6, 5, 3, 3, 3}, 1, {1, 1, 1}),
      make_conv_case("pointwise", {2, 20, 9, 70}, {15, 20, 1, 1}, "valid", {1, 1}),
      // Strided, with ResNet-like channel counts: long strided col2im rows, every phase.
      make_conv_case("strided 3x3 s2", {2, 40, 13, 15}, {24, 40, 3, 3}, 1, {2, 2}),
      make_conv_case("strided s(3,2) dilated flip", {2, 32, 17, 14}, {16, 32, 3, 2}, Pairs{{2, 0}, {1, 3}}, {3, 2},
                     {2, 1}, true),
      make_conv_case("strided 1-D s2", {2, 48, 300}, {20, 48, 3}, 1, {2}),
      make_conv_case("strided 3-D s(2,1,2)", {1, 32, 5, 7, 9}, {16, 32, 3, 3, 3}, 1, {2, 1, 2}),
      make_conv_case("strided 1x1 s2", {2, 64, 9, 10}, {32, 64, 1, 1}, "valid", {2, 2}),
      make_conv_case("strided grouped", {2, 64, 11, 11}, {32, 32, 3, 3}, 1, {2, 2}, {}, false, 2),
      make_conv_case("strided kernel below stride", {1, 32, 12, 13}, {16, 32, 2, 2}, 0, {3, 3}),
      make_conv_case("strided full s2", {1, 33, 6, 40}, {17, 33, 4, 5}, "full", {2, 2}, {}, true),
  };
}

/// The packed panel entry (k, j) of a panel with kc depth steps and nr columns per sliver.
float panel_at(const std::vector<float>& panel, i64 kc, int nr, i64 k, i64 j) {
  return panel[static_cast<std::size_t>((j / nr) * kc * nr + k * nr + j % nr)];
}

/// corrmm on p (float32, case c) against the float64 reference: integers (seed) exactly on
/// two threads, reals (seed + 1) within 1e-4 of the largest value without threads, and the
/// same bits on two and three threads.
void check_reference_on_any_pool(const ConvAlgorithm& corrmm, const ConvCase& c, const ConvProblem& p,
                                 std::uint64_t seed) {
  ThreadPool p2(2), p3(3);
  const ConvOperands ints = make_operands(p, seed, /*integers=*/true), reals = make_operands(p, seed + 1);
  const ConvProblem p64 = c.problem(p.direction, DType::float64);
  CHECK(max_abs_diff(run_cpu_conv(corrmm, p, ints, &p2).out, reference_output(p64, ints)) == 0.0);
  const auto ref = reference_output(p64, reals);
  const auto one = run_cpu_conv(corrmm, p, reals, nullptr).out;
  CHECK(max_abs_diff(one, ref) <= 1e-4 * std::max(1.0, max_abs(ref)));
  CHECK(max_abs_diff(run_cpu_conv(corrmm, p, reals, &p2).out, one) == 0.0);
  CHECK(max_abs_diff(run_cpu_conv(corrmm, p, reals, &p3).out, one) == 0.0);
}

/// The largest error of corrmm's forward on case c with the fused epilogue (bias, a
/// residual, relu) against relu(reference + bias + residual), given the workspace it asks
/// for. Operands from seed, bias seed + 1, residual seed + 2.
double epilogue_error(const ConvAlgorithm& corrmm, const ConvCase& c, ThreadPool* pool, std::uint64_t seed) {
  const ConvProblem p = c.problem(ConvDirection::forward, DType::float32);
  const ConvOperands ops = make_operands(p, seed);
  const auto ref = reference_output(c.problem(ConvDirection::forward, DType::float64), ops);
  const auto bias = random_values(static_cast<std::size_t>(p.K), seed + 1);
  const auto residual = random_values(ref.size(), seed + 2);
  const std::vector<float> x(ops.x.begin(), ops.x.end()), w(ops.w.begin(), ops.w.end());
  const std::vector<float> b(bias.begin(), bias.end()), r(residual.begin(), residual.end());
  std::vector<float> y(ref.size(), NAN), ws(corrmm.workspace_bytes(p) / sizeof(float));
  ConvTensors t{const_cast<float*>(x.data()), const_cast<float*>(w.data()), y.data(),
                {b.data(), r.data(), ConvActivation::relu}};
  ConvContext ctx;
  ctx.pool = pool;
  ctx.workspace = ws.data();
  ctx.workspace_bytes = ws.size() * sizeof(float);
  corrmm.run(p, t, ctx);
  const std::size_t plane = static_cast<std::size_t>(cpu::ConvGeometry(p).out_numel);
  double err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double want = std::max(0.0, ref[i] + bias[(i / plane) % bias.size()] + residual[i]);
    err = std::max(err, std::abs(static_cast<double>(y[i]) - want));
  }
  return err;
}

}  // namespace

TEST_CASE("corrmm fused: im2col_pack and im2col_pack_t are im2col cut into panels",
          "[backends][cpu][im2col][corrmm]") {
  std::mt19937_64 rng(5);
  for (CpuIsa isa : runnable_cpu_levels()) {
    ScopedCpuIsa scope(isa);
    for (const ConvCase& c : pack_cases()) {
      const cpu::ConvGeometry g(c.problem(ConvDirection::forward, DType::float32));
      const i64 rows = g.Cg * g.ker_numel, P = g.out_numel;
      const auto xv = random_values(static_cast<std::size_t>(g.C * g.in_numel), 9);
      const std::vector<float> x(xv.begin(), xv.end());
      std::vector<float> col(static_cast<std::size_t>(rows * P));
      cpu::im2col(g, x.data(), g.Cg, 0, P, col.data());
      for (int trial = 0; trial < 12; ++trial) {
        const int nr = trial % 2 ? 16 : 32;
        // A window of depth and columns, including ones that end in a partial sliver.
        const bool t = trial % 3 == 2;
        const i64 depth = t ? P : rows, width = t ? rows : P;
        const i64 k0 = static_cast<i64>(rng() % static_cast<std::uint64_t>(depth));
        const i64 kc = 1 + static_cast<i64>(rng() % static_cast<std::uint64_t>(depth - k0));
        const i64 j0 = static_cast<i64>(rng() % static_cast<std::uint64_t>(width));
        const i64 n = 1 + static_cast<i64>(rng() % static_cast<std::uint64_t>(width - j0));
        const i64 slivers = (n + nr - 1) / nr;
        std::vector<float> panel(static_cast<std::size_t>(slivers * kc * nr), NAN);
        if (t) cpu::im2col_pack_t(g, x.data(), k0, kc, j0, n, nr, panel.data());
        else cpu::im2col_pack(g, x.data(), k0, kc, j0, n, nr, panel.data());
        INFO(c.name << " level " << cpu_isa_name(isa) << (t ? " transposed" : "") << " depth " << k0 << "+"
                    << kc << " columns " << j0 << "+" << n << " nr " << nr);
        long wrong = 0;
        for (i64 k = 0; k < kc; ++k)
          for (i64 j = 0; j < slivers * nr; ++j) {
            const float want = j >= n ? 0.0f
                                      : t ? col[static_cast<std::size_t>((j0 + j) * P + k0 + k)]
                                          : col[static_cast<std::size_t>((k0 + k) * P + j0 + j)];
            wrong += !(panel_at(panel, kc, nr, k, j) == want);  // NaN: never written
          }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("corrmm fused: shapes across the GEMM's blocks match the reference in every direction",
          "[backends][conv][cpu][corrmm]") {
  const auto corrmm = make_cpu_corrmm_algorithm();
  ThreadPool pool(2);
  const auto levels = runnable_cpu_levels();
  const bool thin = convgraph::test::sanitized_build();
  int index = 0;
  for (const ConvCase& c : layer_cases())
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p = c.problem(dir, DType::float32);
      const ConvOperands ops = make_operands(p, 21), ints = make_operands(p, 22, /*integers=*/true);
      const auto ref = reference_output(c.problem(dir, DType::float64), ops);
      const auto ref_ints = reference_output(c.problem(dir, DType::float64), ints);
      // Every level on every other case (the sweep covers the rest), the active one always.
      ++index;
      for (CpuIsa isa : levels) {
        if (isa != active_cpu_isa() && (thin || index % 2)) continue;
        ScopedCpuIsa scope(isa);
        INFO(c.name << " " << p.key() << " level " << cpu_isa_name(isa));
        const ConvRun threaded = run_cpu_conv(*corrmm, p, ops, &pool);
        CHECK(threaded.inputs_intact);
        CHECK(max_abs_diff(threaded.out, ref) <= 1e-4 * std::max(1.0, max_abs(ref)));
        // Bitwise the same without threads; integers: exact.
        CHECK(max_abs_diff(run_cpu_conv(*corrmm, p, ops, nullptr).out, threaded.out) == 0.0);
        CHECK(max_abs_diff(run_cpu_conv(*corrmm, p, ints, &pool).out, ref_ints) == 0.0);
      }
    }
}

TEST_CASE("corrmm fused: grad weights over many images: partial sums inside the GEMM, no workspace",
          "[backends][conv][cpu][corrmm]") {
  const auto corrmm = make_cpu_corrmm_algorithm();
  ThreadPool p2(2), p3(3);
  // A narrow dW (3*7*7 = 147 columns) over 16 images: the batch-reduce GEMM's 16 depth
  // steps are split into partial sums (by shape, so the bits do not depend on threads).
  const ConvCase c = make_conv_case("stem-like", {16, 3, 15, 17}, {8, 3, 7, 7}, 3, {2, 2});
  ConvProblem p = c.problem(ConvDirection::grad_weights, DType::float32);
  p.workspace_limit = 0;
  CHECK(corrmm->applicable(p));
  CHECK(corrmm->workspace_bytes(p) == 0);
  const ConvOperands ints = make_operands(p, 31, /*integers=*/true), reals = make_operands(p, 32);
  const auto ref = reference_output(c.problem(ConvDirection::grad_weights, DType::float64), ints);
  CHECK(max_abs_diff(run_cpu_conv(*corrmm, p, ints, &p2).out, ref) == 0.0);
  const auto one = run_cpu_conv(*corrmm, p, reals, nullptr).out;
  CHECK(max_abs_diff(run_cpu_conv(*corrmm, p, reals, &p2).out, one) == 0.0);
  CHECK(max_abs_diff(run_cpu_conv(*corrmm, p, reals, &p3).out, one) == 0.0);
}

TEST_CASE("corrmm fused: strided 1x1 grad weights on subsampled x, or through the column source under a limit",
          "[backends][conv][cpu][corrmm]") {
  // A 1x1 filter at a stride whose outputs all read inside x: grad weights subsamples x into
  // the workspace and runs the pointwise GEMM; with no workspace it packs through the
  // column source as before. Both match the reference, integers exactly, on any pool. 2-D
  // (stride 2 on 8x9 / 9x8 planes, groups) and 3-D (strides 2, 1, 3).
  const auto corrmm = make_cpu_corrmm_algorithm();
  const std::vector<ConvCase> cases = {
      make_conv_case("1x1 s2", {3, 20, 8, 9}, {24, 20, 1, 1}, "valid", {2, 2}),
      make_conv_case("1x1 s2 grouped", {2, 12, 9, 8}, {18, 4, 1, 1}, "valid", {2, 2}, {}, false, 3),
      make_conv_case("1x1x1 s(2,1,3)", {2, 5, 5, 4, 10}, {7, 5, 1, 1, 1}, "valid", {2, 1, 3}),
  };
  for (const ConvCase& c : cases)
    for (std::size_t limit : {std::numeric_limits<std::size_t>::max(), std::size_t{0}}) {
      ConvProblem p = c.problem(ConvDirection::grad_weights, DType::float32);
      p.workspace_limit = limit;
      INFO(c.name << " workspace limit " << limit);
      REQUIRE(corrmm->applicable(p));
      CHECK((corrmm->workspace_bytes(p) > 0) == (limit > 0));  // x subsampled only when it fits
      check_reference_on_any_pool(*corrmm, c, p, 41);
    }
}

TEST_CASE("corrmm fused: a strided 1x1 filter onto small planes runs one GEMM over all images",
          "[backends][conv][cpu][corrmm]") {
  // Output planes below 128 positions (ResNet-50's last projection: 14x14 -> 7x7), one
  // GEMM per group over every image's positions (Plan::batched): forward over x
  // subsampled into the workspace, grad inputs scattering its product to the stride's
  // positions of a zeroed dx. A limit below the workspace (forward: one that holds the
  // subsampled x but not the product), or none, runs one GEMM per image. All match the
  // reference, integers exactly, with the same bits on any pool; the forward epilogue
  // lands on every copied run.
  const auto corrmm = make_cpu_corrmm_algorithm();
  const std::vector<ConvCase> cases = {
      make_conv_case("14x13 -> 7x7 s2", {3, 20, 14, 13}, {24, 20, 1, 1}, "valid", {2, 2}),
      make_conv_case("grouped s(3,2)", {2, 12, 9, 8}, {18, 4, 1, 1}, "valid", {3, 2}, {}, false, 3),
      make_conv_case("1-D s4", {5, 9, 30}, {20, 9, 1}, "valid", {4}),
      make_conv_case("3-D s(2,1,3)", {2, 5, 5, 4, 10}, {7, 5, 1, 1, 1}, "valid", {2, 1, 3}),
  };
  for (const ConvCase& c : cases)
    for (ConvDirection dir : {ConvDirection::forward, ConvDirection::grad_inputs}) {
      const ConvProblem full = c.problem(dir, DType::float32);
      const bool fwd = dir == ConvDirection::forward;
      const auto P = static_cast<std::size_t>(full.N * full.out_numel());
      const std::size_t xs = fwd ? 4 * P * static_cast<std::size_t>(full.C) : 0;
      const std::size_t product = 4 * P * static_cast<std::size_t>(fwd ? full.Kg() : full.Cg());
      for (std::size_t limit : {std::numeric_limits<std::size_t>::max(), xs + product - 1, std::size_t{0}}) {
        ConvProblem p = full;
        p.workspace_limit = limit;
        INFO(c.name << " " << p.key() << " workspace limit " << limit);
        REQUIRE(corrmm->applicable(p));
        CHECK(corrmm->workspace_bytes(p) == (limit >= xs + product ? xs + product : 0));
        check_reference_on_any_pool(*corrmm, c, p, 57);
      }
    }
  REQUIRE(corrmm->workspace_bytes(cases[0].problem(ConvDirection::forward, DType::float32)) > 0);
  ThreadPool pool(2);
  for (ThreadPool* pp : {&pool, static_cast<ThreadPool*>(nullptr)})
    CHECK(epilogue_error(*corrmm, cases[0], pp, 59) < 1e-4);
}

TEST_CASE("corrmm fused: grad inputs of patches run one GEMM over all images, stored at the taps' places",
          "[backends][conv][cpu][corrmm]") {
  // Kernels no wider than their stride, without padding (ViT's patch embedding): no two
  // taps read the same input element, so one GEMM per group over every image's positions
  // (Plan::batched) stores each product entry once at its tap's place; dx is zeroed where
  // the taps leave gaps or an uncovered edge. Batched on small planes, and on larger ones
  // where the filters are many (patches_batch); under a lower limit one GEMM per image.
  const auto corrmm = make_cpu_corrmm_algorithm();
  struct Patches {
    ConvCase c;
    bool batched;  ///< with no limit
  };
  const std::vector<Patches> cases = {
      {make_conv_case("2x2 s2, an uncovered column", {3, 6, 14, 13}, {10, 6, 2, 2}, "valid", {2, 2}), true},
      {make_conv_case("2x3 s3, gaps, flip", {2, 4, 12, 15}, {7, 4, 2, 3}, "valid", {3, 3}, {}, true), true},
      {make_conv_case("grouped 2x2 s(2,3) dilated 1-tap axis", {2, 6, 8, 9}, {9, 2, 2, 1}, "valid", {2, 3}, {1, 2},
                      false, 3),
       true},
      {make_conv_case("1-D 4 s4", {3, 5, 30}, {11, 5, 4}, "valid", {4}), true},
      {make_conv_case("3-D 1x2x2 s(1,2,2)", {2, 3, 3, 6, 8}, {5, 3, 1, 2, 2}, "valid", {1, 2, 2}, {}, true), true},
      {make_conv_case("4x4 s4 to 256 filters, 256 positions", {2, 3, 64, 64}, {256, 3, 4, 4}, "valid", {4, 4}), true},
      {make_conv_case("4x4 s4 to 16 filters, 256 positions", {2, 3, 64, 64}, {16, 3, 4, 4}, "valid", {4, 4}), false},
      {make_conv_case("one image", {1, 3, 32, 32}, {64, 3, 4, 4}, "valid", {4, 4}), false},
      // Taps in the trailing padding are not disjoint ones: their scatter would land past
      // the row (the next row's first column, or past dx).
      {make_conv_case("2x2 s2, trailing padding", {2, 4, 13, 13}, {8, 4, 2, 2}, Pairs{{0, 1}, {0, 1}}, {2, 2}), false},
      {make_conv_case("1x1 s2, trailing padding", {2, 4, 14}, {4, 4, 1}, Pairs{{0, 1}}, {2}), false},
  };
  for (const Patches& c : cases) {
    const ConvProblem full = c.c.problem(ConvDirection::grad_inputs, DType::float32);
    const std::size_t product = 4 * static_cast<std::size_t>(full.N * full.out_numel() * full.Cg() * full.kernel_numel());
    for (std::size_t limit : {std::numeric_limits<std::size_t>::max(), product - 1}) {
      ConvProblem p = full;
      p.workspace_limit = limit;
      INFO(c.c.name << " " << p.key() << " workspace limit " << limit);
      REQUIRE(corrmm->applicable(p));
      CHECK(corrmm->workspace_bytes(p) == (c.batched && limit >= product ? product : 0));
      check_reference_on_any_pool(*corrmm, c.c, p, 61);
    }
  }
}

TEST_CASE("corrmm fused: the forward epilogue is applied on every tile", "[backends][conv][cpu][corrmm]") {
  const auto corrmm = make_cpu_corrmm_algorithm();
  ThreadPool pool(2);
  // 20 channels (a partial register block) x 26*31 positions (several column tiles).
  const ConvCase c = make_conv_case("epilogue", {3, 4, 26, 31}, {20, 4, 3, 3}, 1, {1, 1});
  for (ThreadPool* pp : {&pool, static_cast<ThreadPool*>(nullptr)}) CHECK(epilogue_error(*corrmm, c, pp, 41) < 1e-4);
}

TEST_CASE("corrmm fused: pointwise filters on small planes run one GEMM over all images, or one per image under a limit",
          "[backends][conv][cpu][corrmm]") {
  // Planes below 128 positions (Plan::batched): forward and grad inputs put every image's
  // positions side by side as the GEMM's columns (register slivers that span images) and
  // copy the product out tile by tile; without workspace they run one GEMM per image. Both
  // match the reference, integers exactly, with the same bits on any pool; the forward
  // epilogue (bias, residual, relu) lands on every copied run.
  const auto corrmm = make_cpu_corrmm_algorithm();
  const std::vector<ConvCase> cases = {
      make_conv_case("7x7 planes", {5, 40, 7, 7}, {36, 40, 1, 1}, "valid", {1, 1}),
      make_conv_case("grouped 5x6", {3, 12, 5, 6}, {18, 4, 1, 1}, "valid", {1, 1}, {}, false, 3),
      make_conv_case("1-D, 3 positions", {11, 9, 3}, {20, 9, 1}, "valid", {1}),
      make_conv_case("3-D 2x3x4", {4, 7, 2, 3, 4}, {13, 7, 1, 1, 1}, "valid", {1, 1, 1}),
      make_conv_case("one image", {1, 16, 7, 7}, {24, 16, 1, 1}, "valid", {1, 1}),
  };
  for (const ConvCase& c : cases)
    for (ConvDirection dir : {ConvDirection::forward, ConvDirection::grad_inputs})
      for (std::size_t limit : {std::numeric_limits<std::size_t>::max(), std::size_t{0}}) {
        ConvProblem p = c.problem(dir, DType::float32);
        p.workspace_limit = limit;
        INFO(c.name << " " << p.key() << " workspace limit " << limit);
        REQUIRE(corrmm->applicable(p));
        CHECK((corrmm->workspace_bytes(p) > 0) == (limit > 0 && p.N > 1));  // batched only when it fits
        check_reference_on_any_pool(*corrmm, c, p, 51);
      }

  // The epilogue through the batched copy: 36 channels of 7x7 planes in 5 images.
  REQUIRE(corrmm->workspace_bytes(cases[0].problem(ConvDirection::forward, DType::float32)) > 0);
  ThreadPool pool(2);
  for (ThreadPool* pp : {&pool, static_cast<ThreadPool*>(nullptr)})
    CHECK(epilogue_error(*corrmm, cases[0], pp, 53) < 1e-4);
}
