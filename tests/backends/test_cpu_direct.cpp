// cpu.direct's channel-vectorised path (backends/cpu/kernels/direct_kvec.cpp): the layer
// shapes it exists for (C = 3 first layers with large strided kernels, small images with
// many channels, 3-D, dilated, grouped, asymmetric padding), at every CPU level this
// machine supports, in every direction, against the float64 reference; the fused
// epilogue; and the workspace contract. Sizes are tiny (the whole file runs in well under
// a second in a Release build).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/algorithms.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/core/error.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::testing;

namespace {

using Axes = std::vector<std::int64_t>;

using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

/// Channel counts chosen so every level sees each of its register blocks (kvec_shape: at
/// AVX-512 16, 32, 48 and 64 channels, 18-24 and 33 as partial vectors, 70 as two blocks
/// of 48, 8-12 as one partial vector; at AVX2 8 channels as 1 vector, 12, 16, 32 and 57
/// (forward, grad inputs) as blocks of 2 vectors, 17-24, 33 and 48 as 3, 70 as three
/// blocks of 3, grad weights' 32 and 57 as 4; at baseline every count as blocks of 2), pixel
/// counts that leave short tiles, and tap or (channel, tap) counts that leave a partial
/// step of the split accumulators or a short last row tile.
std::vector<ConvCase> kvec_cases() {
  return {
      make_conv_case("stem-like 7x7 s2", {2, 3, 19, 21}, {20, 3, 7, 7}, 3, {2, 2}),
      make_conv_case("alexnet-like 11x11 s4", {1, 3, 27, 31}, {33, 3, 11, 11}, "valid", {4, 4}),
      make_conv_case("7x7 images, many channels", {3, 40, 7, 7}, {70, 40, 3, 3}, 1, {1, 1}, {}, true),
      make_conv_case("3-D 3x3x3", {2, 17, 4, 5, 6}, {18, 17, 3, 3, 3}, 1, {1, 1, 1}),
      make_conv_case("3-D C=3 strided", {1, 3, 5, 9, 10}, {16, 3, 3, 3, 3}, 1, {2, 1, 2}, {}, true),
      make_conv_case("dilated 3x3", {2, 16, 11, 12}, {16, 16, 3, 3}, 2, {1, 1}, {2, 2}),
      make_conv_case("1-D full s3", {2, 5, 40}, {24, 5, 5}, "full", {3}, {}, true),
      make_conv_case("grouped", {1, 32, 6, 9}, {48, 16, 3, 3}, "half", {1, 1}, {}, true, 2),
      make_conv_case("asymmetric pads", {2, 16, 8, 9}, {17, 16, 3, 2}, Pairs{{2, 0}, {0, 3}}, {1, 1}, {1, 2}),
      make_conv_case("pad wider than the kernel", {1, 16, 9}, {16, 16, 3}, 5, {1}),
      make_conv_case("64 channels, odd source channels", {2, 7, 5, 6}, {57, 7, 3, 3}, 1, {1, 1}),
      make_conv_case("32 channels, 5 taps", {2, 32, 11}, {32, 32, 5}, 2, {1}),
      // Planes of several work units each: stores of whole units within one image (AVX2:
      // 8 x 8 blocks in registers) with partial pixel and channel blocks.
      make_conv_case("planes wider than a work unit", {1, 20, 23, 29}, {40, 20, 3, 3}, 1, {1, 1}),
      // 28 (AVX2) or 55 (AVX-512) pixel runs of several channel blocks: one thread's units
      // share their pixel set-up over the blocks, eight threads' units take one block each.
      make_conv_case("pixel runs of several channel blocks", {2, 8, 40, 44}, {70, 8, 3, 3}, 1, {1, 1}),
      // The fewest channels the path takes: 8 (one AVX2 vector, split accumulators) and 12,
      // grouped as ResNeXt's blocks are, so grad inputs takes it too.
      make_conv_case("8 channels a group", {2, 24, 9, 10}, {24, 8, 3, 3}, 1, {1, 1}, {}, false, 3),
      // Enough pixels that one thread's work units each run several groups over one pixel
      // set-up (AVX2: 2 of the 8), on images smaller than a unit (runs stop at their ends).
      make_conv_case("groups sharing a unit's pixels", {6, 64, 16, 16}, {64, 8, 3, 3}, 1, {1, 1}, {}, false, 8),
      make_conv_case("12 channels, 5x5", {3, 12, 7, 6}, {12, 12, 5, 5}, 2, {1, 1}),
      // 8 destination channels in an even number of groups: AVX-512 runs the groups in
      // pairs over an interleaved source copy, forward (5 source channels a group) and grad
      // inputs (6 a group), a valid layer (no padding: the copy only interleaves), 3-D
      // dilated, and strided grad inputs in phases.
      make_conv_case("paired groups, 5 source channels", {2, 10, 9, 8}, {16, 5, 3, 3}, 1, {1, 1}, {}, false, 2),
      make_conv_case("paired groups, grad inputs", {1, 32, 7, 9}, {24, 8, 3, 3}, "half", {1, 1}, {}, true, 4),
      make_conv_case("paired groups, valid", {1, 16, 7, 9}, {16, 8, 2, 3}, "valid", {1, 1}, {}, false, 2),
      make_conv_case("paired groups, 3-D dilated", {1, 16, 4, 5, 6}, {32, 8, 3, 3, 3}, 1, {1, 1, 1}, {1, 2, 1},
                     false, 2),
      make_conv_case("paired groups, strided", {2, 16, 9, 11}, {16, 8, 3, 3}, 1, {2, 2}, {}, false, 2),
      // Strided grad inputs runs in phases (dx's coordinates mod the stride), each a stride-1
      // correlation over the taps that reach it: 2-D, a 1-D phase no tap reaches (zeros),
      // 3-D with dilation and asymmetric pads, and padding wider than the kernel.
      make_conv_case("strided 3x3", {2, 16, 9, 11}, {24, 16, 3, 3}, 1, {2, 2}),
      make_conv_case("1-D stride 3 over 2 taps", {2, 8, 20}, {9, 8, 2}, 0, {3}),
      make_conv_case("3-D strided, dilated, asymmetric", {1, 9, 5, 7, 6}, {10, 9, 3, 2, 3},
                     Pairs{{1, 0}, {1, 1}, {2, 1}}, {2, 1, 3}, {1, 2, 1}),
      make_conv_case("strided, pad wider than the kernel", {1, 8, 7}, {8, 8, 3}, 4, {2}, {}, true),
      // Source chunks sized by a phase's taps (8 of 27 here): 40 dy channels in several.
      make_conv_case("3-D stride 2, dy channels in chunks", {1, 64, 5, 6, 7}, {40, 64, 3, 3, 3}, 1, {2, 2, 2}),
      // A unit runs the phases along rows together and stores whole rows: units of several
      // rows spanning images, rows of odd width (the second phase one position short: a
      // ghost), and rows 3 wide (runs of 2 positions; too many to store run by run).
      make_conv_case("strided rows interleaved", {3, 16, 13, 27}, {8, 16, 3, 3}, 1, {2, 2}),
      make_conv_case("strided rows 3 wide", {4, 8, 40, 3}, {8, 8, 3, 3}, 1, {2, 2}),
      make_conv_case("1-D stride 4, 5 taps", {2, 24, 45}, {16, 24, 5}, 2, {4}),
      // A unit starting on a ghost (AVX2 and AVX-512: the last region of each phase set
      // starts at the first phase's last column), whose source must stay inside the padded
      // copy; rows narrower than the stride (runs continue across rows); strided along
      // rows in two groups; strided on the outer axis only.
      make_conv_case("a unit starting on a ghost", {1, 16, 120, 13}, {16, 16, 3, 3}, 1, {2, 2}),
      make_conv_case("rows narrower than the stride", {2, 8, 5, 3}, {8, 8, 3, 3}, 1, {1, 4}),
      make_conv_case("strided rows, two groups", {2, 32, 9, 13}, {32, 16, 3, 3}, 1, {2, 2}, {}, false, 2),
      make_conv_case("strided on the outer axis", {2, 16, 10, 9}, {16, 16, 3, 3}, 1, {2, 1}),
      // Enough phase positions that a unit's pixel set-up serves several of 8 groups (at
      // every level, on 2 threads).
      make_conv_case("strided, groups sharing a unit's pixels", {1, 64, 56, 56}, {64, 8, 3, 3}, 1, {2, 2}, {}, false,
                     8),
      // Every strided axis no wider than its stride: one phase, still a phased plan.
      make_conv_case("one phase of a stride", {2, 16, 1, 9}, {16, 16, 3, 3}, 1, {4, 1}),
      // Fewer than 8 destination channels vectorise positions along rows (stride 1 on the
      // last axis), forward and grad weights: 1 channel over rows of 23 (a partial vector),
      // 3 channels strided on the outer axis only over rows of 70, 6 channels (blocks of 4
      // and 2) in 3-D with dilation, 7 channels in groups (4 and 3); their grad inputs
      // (C/G < 8) at stride 1 likewise. Strided along the rows, forward and grad weights read
      // a copy whose rows hold their columns phase by phase (KvecPlan::column_phases): 1-D at
      // stride 2, 2-D at stride 3 with asymmetric padding and a row length no multiple of
      // the stride, and dilation 2 at stride 2 (taps all in one phase).
      make_conv_case("1 channel 7x7", {2, 5, 9, 23}, {1, 5, 7, 7}, 3, {1, 1}),
      make_conv_case("3 channels, rows strided", {1, 4, 11, 70}, {3, 4, 3, 3}, 1, {2, 1}),
      make_conv_case("6 channels 3-D dilated", {1, 3, 5, 6, 20}, {6, 3, 3, 2, 3}, 1, {1, 1, 1}, {2, 1, 2}),
      make_conv_case("7 channels a group", {2, 14, 6, 9}, {14, 7, 3, 3}, "half", {1, 1}, {}, true, 2),
      // ResNeXt's 4 channels a group over rows of 28 (a whole vector and a tail at AVX-512).
      make_conv_case("4 channels a group", {2, 16, 5, 28}, {16, 4, 3, 3}, 1, {1, 1}, {}, false, 4),
      make_conv_case("2 channels, 1-D stride 2", {2, 3, 50}, {2, 3, 5}, 2, {2}),
      make_conv_case("3 channels, stride 3 on rows", {2, 5, 7, 40}, {3, 5, 3, 4}, Pairs{{1, 1}, {2, 1}}, {2, 3}),
      make_conv_case("1 channel, stride 2 dilated 2", {1, 4, 6, 37}, {1, 4, 3, 3}, 2, {1, 2}, {2, 2}),
      // Forward over at most 25 (source channel, tap) rows and grad weights over at most 16,
      // on output rows of 48+ positions, take the pixel-vector tiles with any channel count
      // (KvecPlan::pixel_vectors): 16 channels (4 blocks) in 1-D, 80 (more than a packed
      // block), 12 at stride 2, and groups of 8 (never paired).
      make_conv_case("few taps, 16 channels 1-D", {3, 1, 70}, {16, 1, 3}, 1, {1}),
      make_conv_case("few taps, 80 channels", {2, 1, 2, 50}, {80, 1, 2, 5}, Pairs{{0, 0}, {2, 2}}, {1, 1}),
      make_conv_case("few taps, 12 channels strided", {2, 2, 3, 101}, {12, 2, 1, 4}, Pairs{{0, 0}, {1, 2}}, {1, 2}),
      make_conv_case("few taps, groups of 8", {1, 4, 2, 60}, {16, 2, 1, 5}, Pairs{{0, 0}, {2, 2}}, {1, 1}, {}, false, 2),
      // Row tiles (AVX-512, one vector of destination channels: 16, or two groups of 8): two
      // tiles' 16 pixels in one row at stride 1, filter rows of 3, 5 and 7 taps, over whole
      // tap rows (the padding's too); rows of 37 (two row tiles and short tiles between
      // rows), of 16 (one each), 3-D with outer-axis dilation, asymmetric padding, and
      // paired groups of 8 over 5 and 7 taps.
      make_conv_case("row tiles, 16 channels 3x3", {2, 9, 6, 37}, {16, 9, 3, 3}, 1, {1, 1}),
      make_conv_case("row tiles, 16 channels 5x5 rows of 16", {1, 16, 7, 16}, {16, 16, 5, 5}, 2, {1, 1}),
      make_conv_case("row tiles, 1x7 asymmetric", {1, 16, 5, 40}, {16, 16, 1, 7}, Pairs{{0, 1}, {4, 2}}, {1, 1}),
      make_conv_case("row tiles, 3-D dilated", {1, 5, 5, 4, 33}, {16, 5, 3, 2, 3}, 1, {1, 1, 1}, {2, 1, 1}),
      make_conv_case("row tiles, paired groups 5x5", {1, 32, 6, 35}, {32, 8, 5, 5}, 2, {1, 1}, {}, false, 4),
      make_conv_case("row tiles, paired groups 7 taps", {2, 32, 3, 21}, {16, 8, 3, 7}, Pairs{{1, 1}, {3, 3}}, {1, 1},
                     {}, true, 4),
      // Grad weights' row tiles (dw_row_tile) take the cases above with 16 output channels a
      // group or 8 in pairs; this one its paired 7-tap form, over runs the 96-pixel dy chunks
      // cut short (rows of 25) and a last tile of one filter row of its 3 (16 filter rows).
      make_conv_case("row tiles, paired groups 2x7 grad weights", {1, 32, 4, 25}, {32, 8, 2, 7}, Pairs{{1, 0}, {2, 4}},
                     {1, 1}, {}, false, 4),
      // ... and at stride 2 along the rows: odd and even row lengths, 3, 5 and 7 taps.
      make_conv_case("row tiles, stride 2, 16 channels 3x3", {2, 5, 7, 31}, {16, 5, 3, 3}, 1, {1, 2}),
      make_conv_case("row tiles, stride 2, paired groups 5x5", {1, 16, 9, 40}, {16, 8, 5, 5}, 2, {2, 2}, {}, true, 2),
      make_conv_case("row tiles, stride 2, 1x7", {1, 6, 3, 45}, {16, 6, 1, 7}, Pairs{{0, 0}, {3, 2}}, {1, 2}),
      make_conv_case("row tiles, stride 2, paired groups 3x7", {1, 32, 5, 26}, {32, 8, 3, 7}, "valid", {1, 2}, {},
                     false, 4),
      make_conv_case("row tiles, stride 2, 16 channels 5x5", {1, 3, 12, 29}, {16, 3, 5, 5}, 2, {2, 2}),
      make_conv_case("row tiles, stride 2, 16 channels 1x3 rows of 2", {3, 4, 6, 2}, {16, 4, 1, 3}, 1, {1, 2}),
      // Valid layers, whose input gradient skips the taps reading only padding per tile.
      make_conv_case("LeNet-like valid 5x5", {2, 20, 13, 12}, {24, 20, 5, 5}, "valid", {1, 1}),
      make_conv_case("3-D valid dilated", {1, 17, 6, 5, 9}, {16, 17, 2, 3, 3}, "valid", {1, 1, 1}, {2, 1, 2}),
      // Dilation about half the image (ASPP): a third or more of the columns read padding in
      // one tap, so forward and grad inputs take their pixels column class by column class
      // (KvecPlan::skip_columns); units of pixels from several rows, images and classes.
      // Grad weights on dilated rows with 32+ input channels skips the (pixel, tap) pairs
      // reading padding (KvecPlan::skip_padding_pairs): tiles of one tap, and (33 channels)
      // tiles straddling two.
      make_conv_case("ASPP-like dilation 4 on 9x11", {2, 32, 9, 11}, {24, 32, 3, 3}, 4, {1, 1}, {4, 4}, true),
      make_conv_case("3-D dilated columns", {1, 33, 3, 6, 10}, {16, 33, 3, 3, 3}, Pairs{{1, 1}, {3, 3}, {3, 2}},
                     {1, 1, 1}, {1, 3, 3}),
      make_conv_case("dilated columns, stride 2", {2, 16, 13, 14}, {16, 16, 3, 3}, 4, {2, 2}, {4, 4}),
      make_conv_case("dilated columns, paired groups", {1, 32, 9, 10}, {32, 8, 3, 3}, 4, {1, 1}, {4, 4}, false, 4),
      make_conv_case("1-D dilated, 32 channels", {2, 32, 20}, {16, 32, 3}, 6, {1}, {6}),
  };
}

/// Every level this CPU runs; under the sanitizers (about 30x slower) the active one only
/// (test_cpu_isa_levels.cpp sweeps every level there).
std::vector<CpuIsa> levels_to_check() {
  if (convgraph::test::sanitized_build()) return {active_cpu_isa()};
  return runnable_cpu_levels();
}

}  // namespace

TEST_CASE("direct: the channel-vectorised path matches the reference at every level",
          "[backends][conv][cpu][direct][isa]") {
  const auto direct = make_cpu_direct_algorithm();
  ThreadPool pool(2);
  long kvec_runs = 0;
  std::uint64_t seed = 21;
  const auto cases = kvec_cases();
  // Every case; every 2nd under the sanitizers (about 30x slower; the next test takes the others).
  const bool sanitized = convgraph::test::sanitized_build();
  for (std::size_t i = 0; i < cases.size(); i += sanitized ? 2 : 1)
    for (ConvDirection dir : kAllDirections) {
      const ConvCase& c = cases[i];
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++);
      const std::vector<double> ref = reference_output(p64, ops);
      const double scale = std::max(1.0, max_abs(ref));
      const ConvProblem p = c.problem(dir, DType::float32);
      // The path's workspace shows it is taken: with 8+ destination channels a group (K/G,
      // or C/G for grad inputs) in every direction unless grad inputs' padding is wider than
      // the kernel at stride 1; with fewer, forward and grad weights at any stride and grad
      // inputs at stride 1 (forward and grad weights with few taps' rows: pixel vectors, which
      // always have a workspace).
      const bool unit_strides =
          std::all_of(p.stride.begin(), p.stride.begin() + p.ndim, [](auto s) { return s == 1; });
      const std::int64_t ndst = dir == ConvDirection::grad_inputs ? p.Cg() : p.Kg();
      const bool kvec = ndst >= 8 ? dir != ConvDirection::grad_inputs || c.name != "pad wider than the kernel"
                                  : dir != ConvDirection::grad_inputs || unit_strides;
      INFO(c.name << " " << p.key());
      CHECK((direct->workspace_bytes(p) > 0) == kvec);
      for (CpuIsa isa : levels_to_check()) {
        ScopedCpuIsa scope(isa);
        INFO("level " << cpu_isa_name(isa));
        const ConvRun run = run_cpu_conv(*direct, p, ops, &pool);
        CHECK(run.inputs_intact);
        CHECK(max_abs_diff(run.out, ref) / scale <= 1e-4);
        if (kvec) ++kvec_runs;
      }
    }
  std::printf("channel-vectorised path: %ld runs\n", kvec_runs);
  CHECK(kvec_runs >= 25);
}

TEST_CASE("direct: the channel-vectorised path is exact on integers and independent of threads",
          "[backends][conv][cpu][direct]") {
  const auto direct = make_cpu_direct_algorithm();
  ThreadPool pool(2), pool8(8);
  const auto cases = kvec_cases();
  // Every 2nd case under the sanitizers (about 30x slower), the ones the test above leaves.
  const bool sanitized = convgraph::test::sanitized_build();
  for (std::size_t i = sanitized ? 1 : 0; i < cases.size(); i += sanitized ? 2 : 1)
    for (ConvDirection dir : kAllDirections) {
      const ConvCase& c = cases[i];
      const ConvProblem p = c.problem(dir, DType::float32);
      const ConvOperands ops = make_operands(p, 5, /*integers=*/true);
      INFO(c.name << " " << p.key());
      const ConvRun threaded = run_cpu_conv(*direct, p, ops, &pool);
      CHECK(max_abs_diff(threaded.out, reference_output(c.problem(dir, DType::float64), ops)) == 0.0);
      CHECK(max_abs_diff(threaded.out, run_cpu_conv(*direct, p, ops, nullptr).out) == 0.0);
      CHECK(max_abs_diff(threaded.out, run_cpu_conv(*direct, p, ops, &pool8).out) == 0.0);
    }
}

TEST_CASE("direct: the channel-vectorised path applies the fused epilogue", "[backends][conv][cpu][direct]") {
  const auto direct = make_cpu_direct_algorithm();
  ThreadPool pool(2);
  // Three images of 7x7 share tiles, so the epilogue's runs stop at image boundaries; 3
  // output channels take the pixel-vector tiles, row by row; 8 groups of 8 channels on
  // 16x16 images, several groups a work unit (on one thread: two threads want more units).
  const std::int64_t K = GENERATE(20, 3, 64);
  const std::int64_t G = K == 64 ? 8 : 1, N = K == 64 ? 6 : 3, side = K == 64 ? 16 : 7;
  INFO("K = " << K << ", groups = " << G);
  const ConvCase c = make_conv_case("epilogue", {N, 8 * G, side, side}, {K, 8, 3, 3}, 1, {1, 1}, {}, false, G);
  const ConvProblem p = c.problem(ConvDirection::forward, DType::float32);
  REQUIRE(direct->workspace_bytes(p) > 0);
  const ConvOperands ops = make_operands(p, 77);
  const std::vector<double> ref = reference_output(c.problem(ConvDirection::forward, DType::float64), ops);
  const std::vector<double> bias = random_values(static_cast<std::size_t>(K), 78);
  const std::vector<double> residual = random_values(ref.size(), 79);
  std::vector<float> x = to_float(ops.x), w = to_float(ops.w), y(ref.size(), NAN);
  const std::vector<float> b = to_float(bias), r = to_float(residual);
  std::vector<float> ws(direct->workspace_bytes(p) / sizeof(float) + 16);
  ConvTensors t{x.data(), w.data(), y.data(), {b.data(), r.data(), ConvActivation::relu}};
  ConvContext ctx;
  ctx.pool = G > 1 ? nullptr : &pool;
  ctx.workspace = ws.data();
  ctx.workspace_bytes = ws.size() * sizeof(float);
  direct->run(p, t, ctx);
  const std::int64_t plane = side * side;
  std::vector<double> want(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i)
    want[i] = std::max(0.0, ref[i] + bias[(i / plane) % static_cast<std::size_t>(K)] + residual[i]);
  CHECK(max_abs_diff(to_double(y), want) < 1e-4);  // an output left NaN (never written) fails too
}

TEST_CASE("direct: the channel-vectorised path's workspace contract", "[backends][conv][cpu][direct]") {
  const auto direct = make_cpu_direct_algorithm();
  const ConvCase c = kvec_cases().front();
  ConvProblem p = c.problem(ConvDirection::forward, DType::float32);
  const std::size_t need = direct->workspace_bytes(p);
  REQUIRE(need > 0);
  const ConvOperands ops = make_operands(p, 3);
  // Too small a workspace is a MemoryError naming the sizes.
  CHECK_THROWS_AS(run_cpu_conv(*direct, p, ops, nullptr, need - 1), MemoryError);
  CHECK_THROWS_WITH(run_cpu_conv(*direct, p, ops, nullptr, need - 1),
                    Catch::Contains("cpu.direct") && Catch::Contains(std::to_string(need)));
  // Under a workspace limit it needs none and still computes the right answer.
  p.workspace_limit = need - 1;
  CHECK(direct->workspace_bytes(p) == 0);
  const std::vector<double> ref = reference_output(c.problem(ConvDirection::forward, DType::float64), ops);
  CHECK(max_abs_diff(run_cpu_conv(*direct, p, ops, nullptr).out, ref) / std::max(1.0, max_abs(ref)) <= 1e-4);
  // Float64 and float32 with float64 accumulation keep the row engine (no workspace).
  p.workspace_limit = SIZE_MAX;
  p.compute = DType::float64;
  CHECK(direct->workspace_bytes(p) == 0);
}

TEST_CASE("direct: an Inf in the input stays in the outputs whose window holds it", "[backends][conv][cpu][direct]") {
  // A valid 3x3 layer over rows of 23 (21 outputs: a partial last vector) with an Inf in
  // a row's last column, which only the last column tap reads. Grad weights with 2 output
  // channels runs the pixel-vector tiles, whose last vector's lanes past the row would
  // read that column for the other taps; 16 channels run the channel-vectorised tiles, in
  // 2 groups of 8 (AVX-512) their paired form, whose broadcasts move the Inf as bits.
  const auto direct = make_cpu_direct_algorithm();
  ThreadPool pool(2);
  // Output channels, groups, and the stride along the rows: at 2 (channel-vectorised tiles
  // only) the last column is still read by the last tap alone.
  using KGS = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  const auto [K, G, stride] = GENERATE(KGS{2, 1, 1}, KGS{16, 1, 1}, KGS{16, 2, 1}, KGS{16, 1, 2}, KGS{16, 2, 2});
  INFO("K = " << K << ", groups = " << G << ", stride " << stride);
  const ConvCase c = make_conv_case("inf", {2, 3 * G, 6, 23}, {K, 3, 3, 3}, "valid", {1, stride}, {}, false, G);
  for (ConvDirection dir : {ConvDirection::forward, ConvDirection::grad_weights}) {
    const ConvProblem p = c.problem(dir, DType::float32);
    REQUIRE(direct->workspace_bytes(p) > 0);
    ConvOperands ops = make_operands(p, 31);
    ops.x[(1 * 3 * G + 2) * 6 * 23 + 3 * 23 + 22] = INFINITY;  // image 1, channel 2, row 3, last column
    const std::vector<double> ref = reference_output(c.problem(dir, DType::float64), ops);
    const ConvRun run = run_cpu_conv(*direct, p, ops, &pool);
    INFO(p.key());
    std::size_t non_finite = 0, mismatched = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      non_finite += std::isfinite(ref[i]) ? 0 : 1;
      const bool same = std::isfinite(ref[i]) ? std::abs(run.out[i] - ref[i]) <= 1e-4 * std::max(1.0, std::abs(ref[i]))
                                              : !std::isfinite(run.out[i]);
      mismatched += same ? 0 : 1;
    }
    CHECK(non_finite > 0);
    CHECK(non_finite < ref.size() / 2);
    CHECK(mismatched == 0);
  }
}
