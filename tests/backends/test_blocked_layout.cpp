// The blocked activation layout (ops/blocked_layout.cpp, optimizer/blocked_layout.cpp,
// backends/cpu/kernels/blocked.cpp): to_blocked/from_blocked against explicit indexing and
// by finite differences; blocked regions (forced with blocked_layout_forced) against the
// same graphs in NCHW on chains, pooling, residual blocks, channels that are not multiples
// of 16, 1-D/2-D/3-D, at every CPU level; the cost model's decisions and the flags.
#include <catch2/catch.hpp>

#include <convgraph/convgraph.hpp>
#include <convgraph/ops/layout.hpp>
#include <convgraph/ops/pool.hpp>
#include <convgraph/optimizer/tuning_agreement.hpp>
#include <convgraph/backends/cpu/cpu_isa.hpp>

#include <cmath>
#include <cstdlib>

#include "support/child_process.hpp"
#include "support/conv_cases.hpp"
#include "support/graph_fixtures.hpp"

using namespace convgraph;
using Catch::Contains;

namespace {

/// Operand values in [-1, 1).
Tensor noise(DType t, Shape s, unsigned seed) { return testing::noise(t, std::move(s), seed, -1, 1); }

std::vector<Tensor> noises(const std::vector<Var>& ins) {
  std::vector<Tensor> out;
  unsigned seed = 1;
  for (const auto& v : ins) out.push_back(noise(v.dtype(), v.shape(), seed++));
  return out;
}

int count_ops(const Function& f, const std::string& prefix) {
  int n = 0;
  for (const auto& v : f.graph().toposort()) n += v.op() && v.op()->name().rfind(prefix, 0) == 0;
  return n;
}

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector(), w = want.to_vector();
  double scale = 1e-30, err = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::abs(w[i]));
    if (!(std::abs(g[i] - w[i]) <= err)) err = std::abs(g[i] - w[i]), at = i;
  }
  INFO("element " << at << ": blocked " << g[at] << " vs NCHW " << w[at]);
  CHECK(err <= 1e-4 * scale);  // float32 sums in another order; any indexing slip is O(scale)
}

/// Compiles outs both ways (every region forced blocked, and the pass off) and compares
/// them at every CPU level; returns the blocked function's BlockedConv count.
int check_blocked(const std::vector<Var>& ins, const std::vector<Var>& outs, int expect_convs) {
  const Mode base = Mode::fast_run();
  Function blocked = compile(ins, outs, base.including("blocked_layout_forced"));
  Function plain = compile(ins, outs, base.excluding("blocked_layout"));
  const int convs = count_ops(blocked, "BlockedConv");
  CHECK(convs == expect_convs);
  CHECK(count_ops(plain, "BlockedConv") == 0);
  const auto args = noises(ins);
  const auto want = plain(args);
  for (CpuIsa isa : testing::runnable_cpu_levels()) {
    INFO("level " << cpu_isa_name(isa));
    ScopedCpuIsa level(isa);
    const auto got = blocked(args);
    for (std::size_t i = 0; i < want.size(); ++i) check_close(got[i], want[i]);
  }
  return convs;
}

std::string notes(const Function& f) {
  std::string s;
  for (const auto& n : f.compile_stats().notes) s += n + "\n";
  return s;
}

Var conv_nd(const Var& x, const Var& w, const ConvOptions& o = {.border_mode = "half"}) {
  switch (x.rank()) {
    case 3: return conv1d(x, w, o);
    case 4: return conv2d(x, w, o);
    default: return conv3d(x, w, o);
  }
}

}  // namespace

TEST_CASE("blocked layout: to_blocked / from_blocked index, pad with zeros and round-trip",
          "[backends][blocked_layout]") {
  for (const Shape& s : {Shape{2, 5, 7}, Shape{1, 20, 3, 4}, Shape{2, 3, 2, 3, 2}, Shape{3, 16}})
    for (std::int64_t block : {1, 4, 16})
      for (DType t : {DType::float32, DType::float64}) {
        INFO(shape_to_string(s) << " block " << block << " " << dtype_name(t));
        Var x = input(t, s, "x");
        Var b = to_blocked(x, block);
        Function f = compile({x}, {b, from_blocked(b, s[1])});
        const Tensor xv = noise(t, s, 3);
        const auto r = f({xv});
        const std::int64_t cb = (s[1] + block - 1) / block, sp = xv.numel() / (s[0] * s[1]);
        REQUIRE(r[0].shape()[1] == cb);
        REQUIRE(r[0].shape().back() == block);
        for (std::int64_t n = 0; n < s[0]; ++n)
          for (std::int64_t c = 0; c < cb * block; ++c)
            for (std::int64_t i = 0; i < sp; ++i) {
              const double want = c < s[1] ? xv.get((n * s[1] + c) * sp + i) : 0.0;
              const double got = r[0].get(((n * cb + c / block) * sp + i) * block + c % block);
              if (got != want) FAIL("n " << n << " c " << c << " i " << i << ": " << got << " vs " << want);
            }
        CHECK(r[1].to_vector() == xv.to_vector());
      }
}

TEST_CASE("blocked layout: to_blocked and from_blocked gradients by finite differences", "[backends][blocked_layout]") {
  verify_grad([](const std::vector<Var>& v) { return to_blocked(v[0], 4); }, {noise(DType::float64, {2, 6, 3}, 1)});
  verify_grad([](const std::vector<Var>& v) { return from_blocked(v[0], 5); },
              {noise(DType::float64, {2, 2, 3, 2, 4}, 2)});
  verify_grad([](const std::vector<Var>& v) { return from_blocked(to_blocked(v[0], 16) * 2.0, 3) * v[0]; },
              {noise(DType::float64, {1, 3, 2, 2}, 3)});
}

TEST_CASE("blocked layout: bad arguments name the op, the argument and the values", "[backends][blocked_layout]") {
  Var x = input(DType::float32, {2, 5, 4, 4}, "x");
  CHECK_THROWS_MATCHES(to_blocked(x, 0), ValueError, Catch::Message("to_blocked: block must be in [1, 256], got 0"));
  CHECK_THROWS_AS(to_blocked(x, 300), ValueError);
  CHECK_THROWS_WITH(to_blocked(input(DType::float32, {5}, "v"), 4), Contains("to_blocked: x must have rank >= 2"));
  CHECK_THROWS_AS(to_blocked(input(DType::int32, {2, 5, 4}, "i"), 4), TypeError);
  Var b = to_blocked(x, 4);  // (2, 2, 4, 4, 4): 5 to 8 channels
  CHECK_THROWS_WITH(from_blocked(b, 9), Contains("from_blocked: channels 9 do not fit x of shape (2, 2, 4, 4, 4)") &&
                                            Contains("hold 5 to 8"));
  CHECK_THROWS_AS(from_blocked(b, 4), ShapeError);
  CHECK_THROWS_WITH(from_blocked(b, 0), Contains("from_blocked: channels must be >= 1, got 0"));
  CHECK_THROWS_WITH(from_blocked(input(DType::float32, {2, 3}, "m"), 3), Contains("from_blocked: x must have rank >= 3"));
  CHECK_NOTHROW(from_blocked(b, 5));
}

TEST_CASE("blocked layout: chains give the NCHW results at every CPU level", "[backends][blocked_layout]") {
  const DType t = DType::float32;
  SECTION("2-D conv-bias-relu-conv, channels 3 -> 20 -> 24 (not multiples of 16)") {
    Var x = input(t, {2, 3, 9, 11}, "x"), w1 = input(t, {20, 3, 3, 3}, "w1"), b1 = input(t, {20}, "b1");
    Var w2 = input(t, {24, 20, 3, 3}, "w2"), b2 = input(t, {1, 24, 1, 1}, "b2");
    Var y = conv2d(relu(bias_add(conv2d(x, w1, {.border_mode = "half"}), b1)), w2, {.border_mode = "half"}) + b2;
    check_blocked({x, w1, b1, w2, b2}, {relu(y)}, 2);
  }
  SECTION("2-D conv-pool-conv: max 2x2, average 3x3 stride 2 padded, stride-2 and dilated convolutions") {
    Var x = input(t, {2, 5, 13, 12}, "x"), w1 = input(t, {17, 5, 3, 3}, "w1");
    Var w2 = input(t, {16, 17, 3, 3}, "w2"), w3 = input(t, {33, 16, 2, 2}, "w3");
    Var a = max_pool2d(relu(conv2d(x, w1)));
    Var c = conv2d(a, w2, {.border_mode = "half", .subsample = {2, 1}});
    Var d = avg_pool2d(c, {{3, 3}, {2, 2}, {1, 1}, true, false});
    Var e = conv2d(d, w3, {.border_mode = "valid", .filter_dilation = {1, 2}});
    check_blocked({x, w1, w2, w3}, {e, avg_pool2d(relu(c), {{3, 3}, {2, 2}, {1, 1}, true, true})}, 3);
  }
  SECTION("a residual block, with the block's input and a middle value also returned") {
    Var x = input(t, {2, 16, 8, 8}, "x"), w0 = input(t, {16, 16, 3, 3}, "w0");
    Var w1 = input(t, {16, 16, 3, 3}, "w1"), w2 = input(t, {16, 16, 3, 3}, "w2");
    Var h = relu(conv_nd(x, w0));
    Var mid = relu(conv_nd(h, w1));
    Var out = relu(conv_nd(mid, w2) + h);
    check_blocked({x, w0, w1, w2}, {out, mid, h + out}, 3);
  }
  SECTION("1-D and 3-D chains with pooling") {
    Var x1 = input(t, {3, 4, 23}, "x"), w1 = input(t, {18, 4, 5}, "w1"), w2 = input(t, {7, 18, 3}, "w2");
    check_blocked({x1, w1, w2}, {conv_nd(max_pool1d(relu(conv_nd(x1, w1))), w2)}, 2);
    Var x3 = input(t, {1, 3, 6, 7, 8}, "x"), v1 = input(t, {20, 3, 3, 3, 3}, "v1"), v2 = input(t, {5, 20, 3, 3, 3}, "v2");
    check_blocked({x3, v1, v2}, {conv_nd(max_pool3d(relu(conv_nd(x3, v1))), v2)}, 2);
  }
  SECTION("grouped convolutions stay NCHW; the rest of the chain is still blocked") {
    Var x = input(t, {2, 8, 8, 8}, "x"), wg = input(t, {16, 4, 3, 3}, "wg"), w = input(t, {16, 16, 3, 3}, "w");
    Var g = conv2d(x, wg, {.border_mode = "half", .num_groups = 2});
    check_blocked({x, wg, w}, {conv_nd(relu(conv_nd(relu(g), w)), w)}, 2);
  }
}

// Run in a fresh process by the test below, with CONVGRAPH_MACHINE set: the estimates do
// not depend on this machine's load. No Winograd on the NCHW side: on 3x3 kernels its
// estimate is within a few percent of the blocked kernel's either way.
TEST_CASE("blocked layout child: the cost model's choices", "[.][blocked_child]") {
  REQUIRE(std::getenv("CONVGRAPH_MACHINE") != nullptr);
  const Mode mode = Mode::fast_run().excluding("conv_winograd");
  const DType t = DType::float32;
  // Two stride-2 convolutions 16 -> 32 -> 32 (the NCHW kernels' weak spot; blocked: whole
  // 16-channel blocks, 12- and 6-pixel rows), after a 3 -> 16 one when c0 is 3.
  auto chain = [&](std::int64_t c0) {
    Var x = input(t, {4, c0, 24, 24}, "x"), w0 = input(t, {16, c0, 3, 3}, "w0");
    Var w1 = input(t, {32, 16, 3, 3}, "w1"), w2 = input(t, {32, 32, 3, 3}, "w2");
    const ConvOptions s2{.border_mode = "half", .subsample = {2, 2}};
    Var h = c0 == 16 ? x : relu(conv2d(x, w0, {.border_mode = "half"}));
    return std::pair{std::vector<Var>{x, w0, w1, w2}, conv2d(relu(conv2d(h, w1, s2)), w2, s2)};
  };
  const auto [wide_in, wide] = chain(16);
  Function f = compile(wide_in, {wide}, mode);
  CHECK(count_ops(f, "BlockedConv") == 2);
  CHECK_THAT(notes(f), Contains("best 2 of 2 ops blocked") && Contains("-> blocked (2 convs)"));
  CHECK_THAT(f.describe(), Contains("cpu.direct_blocked (layout region 1, cost model: cpu."));
  const auto args = noises(wide_in);
  check_close(f(args)[0], compile(wide_in, {wide}, mode.excluding("blocked_layout"))(args)[0]);
  // The 3-channel first convolution would pad its input to 16 channels: it stays NCHW and
  // the conversion moves to its output.
  const auto [mixed_in, mixed] = chain(3);
  Function h = compile(mixed_in, {mixed}, mode);
  CHECK(count_ops(h, "BlockedConv") == 2);
  CHECK(count_ops(h, "to_blocked") == 1);
  CHECK_THAT(notes(h), Contains("best 2 of 3 ops blocked"));
  // 3 -> 8 -> 8: half of every vector wasted.
  Var x = input(t, {1, 3, 12, 12}, "x"), w1 = input(t, {8, 3, 3, 3}, "w1"), w2 = input(t, {8, 8, 3, 3}, "w2");
  const ConvOptions o{.border_mode = "half"};
  Function g = compile({x, w1, w2}, {conv2d(relu(conv2d(relu(conv2d(x, w1, o)), w2, o)), w2, o)}, mode);
  CHECK(count_ops(g, "BlockedConv") == 0);
  CHECK_THAT(notes(g), Contains("cost model") && Contains("-> NCHW kept"));
}

TEST_CASE("blocked layout: the cost model's decisions, the flags and describe()", "[backends][blocked_layout]") {
  const DType t = DType::float32;
  SECTION("a lone convolution of 3 channels does not pay for its conversions") {
    Var x = input(t, {1, 3, 16, 16}, "x"), w = input(t, {8, 3, 3, 3}, "w");
    Function f = compile({x, w}, {conv2d(x, w)});
    CHECK(count_ops(f, "BlockedConv") == 0);
    CHECK_THAT(notes(f), Contains("blocked_layout: layout region 1") && Contains("-> NCHW kept"));
  }
  SECTION("the cost model's choice, on a fixed machine model (a fresh process)") {
    CHECK(test::run_test_in_new_process("blocked layout child: the cost model's choices",
                                        {{"CONVGRAPH_MACHINE", "gflops=60,bandwidth=12"}}) == 0);
  }
  SECTION("under conv_meta the whole region is timed each way, once per region signature") {
    Var x = input(t, {1, 32, 6, 6}, "x"), w = input(t, {32, 32, 3, 3}, "w");
    Var y = conv2d(relu(conv2d(x, w, {.border_mode = "half"})), w, {.border_mode = "half"});
    const Mode meta = Mode::fast_run().including("conv_meta");
    Function f = compile({x, w}, {y}, meta);
    CHECK_THAT(notes(f), Contains("timed") && Contains("NCHW") && Contains("2 of 2 ops blocked"));
    CHECK_THAT(notes(compile({x, w}, {y}, meta)), Contains("timed (cached)"));
    const auto args = noises({x, w});
    check_close(f(args)[0], compile({x, w}, {y}, Mode::fast_run().excluding("blocked_layout"))(args)[0]);
  }
  SECTION("under a tuning agreement (a data-parallel job) every rank takes rank 0's labelling") {
    // A lone 3-channel convolution: the cost model keeps NCHW. Each compile asks the agreement
    // twice: for the convolution's algorithm (answered here by tuning, as rank 0 would) and
    // then for the region (answered without calling decide, as on rank 1).
    Var x = input(t, {1, 3, 10, 10}, "x"), w = input(t, {16, 3, 3, 3}, "w");
    Var y = conv2d(x, w, {.border_mode = "half"});
    const Mode meta = Mode::fast_run().including("conv_meta").with_flags("metaopt.cache=None");
    struct Reset {
      ~Reset() { set_tuning_agreement({}); }
    } reset;
    std::string answer = "1\ntimed: all blocked";
    int calls = 0;
    set_tuning_agreement([&](const std::function<std::string()>& decide) { return calls++ % 2 ? answer : decide(); });
    Function f = compile({x, w}, {y}, meta);
    CHECK(calls == 2);
    CHECK(count_ops(f, "BlockedConv") == 1);
    CHECK_THAT(notes(f), Contains("chosen on rank 0: timed: all blocked"));
    const auto args = noises({x, w});
    check_close(f(args)[0], compile({x, w}, {y}, Mode::fast_run().excluding("blocked_layout"))(args)[0]);
    answer = "10\nfrom a region of two ops";  // does not fit: the cost model's NCHW stands
    Function g = compile({x, w}, {y}, meta);
    CHECK(count_ops(g, "BlockedConv") == 0);
    CHECK_THAT(notes(g), Contains("does not fit this region"));
  }
  SECTION("the pass obeys optimizer_excluding and the forced form shows its regions in describe()") {
    Var x = input(t, {2, 32, 12, 12}, "x"), w = input(t, {32, 32, 3, 3}, "w");
    Var y = conv2d(relu(conv2d(x, w, {.border_mode = "half"})), w, {.border_mode = "half"});
    CHECK(count_ops(compile({x, w}, {y}, Mode::fast_run().excluding("blocked_layout")), "BlockedConv") == 0);
    Function f = compile({x, w}, {y}, Mode::fast_run().including("blocked_layout_forced"));
    CHECK(count_ops(f, "to_blocked") == 1);
    CHECK(count_ops(f, "from_blocked") == 1);
    CHECK_THAT(f.describe(), Contains("BlockedConv+relu") && Contains("cpu.direct_blocked (layout region 1"));
  }
  SECTION("training graphs are left in NCHW") {
    Var x = input(t, {2, 16, 8, 8}, "x"), w = input(t, {16, 16, 3, 3}, "w");
    Var loss = sum(conv2d(relu(conv2d(x, w)), w));
    Function f = compile({x, w}, {loss, grad(loss, w)}, Mode::fast_run().including("blocked_layout_forced"));
    CHECK(count_ops(f, "BlockedConv") == 0);
    CHECK_THAT(notes(f), Contains("training graph"));
  }
}
