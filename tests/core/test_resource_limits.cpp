// Resource limits (issue 9): every size convgraph computes is checked. A shape whose
// element count or byte size overflows is a ShapeError, an allocation that cannot succeed
// is a MemoryError, both naming the op and the sizes; negative dimensions are refused.
// Never a wrap-around, a heap overrun, an abort or std::bad_alloc.
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>

#include <cstdint>
#include <limits>

#include "core/checked_math.hpp"
#include "support/child_process.hpp"

using namespace convgraph;
using Catch::Matchers::Contains;

namespace {
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t U = kUnknown;
constexpr DType f32 = DType::float32;
// Per-axis (pre, post) padding of a 2-D convolution.
BorderMode pads2(std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1) {
  return BorderMode(std::vector<std::pair<std::int64_t, std::int64_t>>{{a0, a1}, {b0, b1}});
}
}  // namespace

TEST_CASE("resource limits: checked helpers detect overflow and negative dims", "[core][limits]") {
  using namespace detail;
  CHECK(checked_mul(1 << 20, 1 << 20, "t", "x") == std::int64_t{1} << 40);
  CHECK_THROWS_AS(checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 32, "t", "x"), ShapeError);
  CHECK_THROWS_WITH(checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 32, "myop", "the size"),
                    Contains("myop") && Contains("the size") && Contains("4294967296 * 4294967296"));
  CHECK_THROWS_AS(checked_add(kMax, 1, "t", "x"), ShapeError);
  CHECK_THROWS_AS(checked_sub(-kMax, 2, "t", "x"), ShapeError);
  CHECK(floor_div(-7, 2) == -4);
  CHECK(floor_div(std::numeric_limits<std::int64_t>::min(), 3) == -3074457345618258603);
  CHECK(checked_numel({2, 3, 4}, "t") == 24);
  CHECK(checked_numel({}, "t") == 1);
  CHECK(checked_numel({5, 0, 7}, "t") == 0);
  CHECK_THROWS_WITH(checked_numel({2, -3}, "op"), Contains("op") && Contains("negative dimension -3"));
  // numpy's rule: the product of the non-zero dims must fit, even when one dim is 0.
  CHECK_THROWS_AS(checked_numel({1LL << 40, 1LL << 40, 0}, "t"), ShapeError);
  CHECK(checked_nbytes({1LL << 40}, DType::float64, "t") == std::size_t{1} << 43);
  CHECK_THROWS_WITH(checked_nbytes({1LL << 62}, f32, "op"),
                    Contains("op") && Contains("4611686018427387904 * 4 bytes") && Contains("float32"));
  CHECK_NOTHROW(check_static_shape({U, 1LL << 40, U}, f32, "t"));
  CHECK_THROWS_AS(check_static_shape({U, -2}, f32, "t"), ShapeError);
  CHECK_THROWS_AS(check_static_shape({U, 1LL << 40, 1LL << 40}, f32, "t"), ShapeError);
  CHECK(checked_bytes(10, 8, "t", "x") == 80);
  CHECK_THROWS_AS(checked_bytes(kMax / 2, 4, "t", "x"), ShapeError);
  CHECK_THROWS_AS(checked_bytes_add(std::size_t{1} << 63, 1, "t", "x"), MemoryError);
  CHECK_THROWS_AS(checked_bytes_mul(std::size_t{1} << 40, std::size_t{1} << 30, "t", "x"), MemoryError);
}

TEST_CASE("resource limits: Tensor sizes that overflow are ShapeErrors naming the bytes", "[core][limits]") {
  // Was built with nbytes 0.
  CHECK_THROWS_AS(Tensor(f32, {1LL << 62}), ShapeError);
  CHECK_THROWS_WITH(Tensor(f32, {1LL << 62}), Contains("Tensor") && Contains("4611686018427387904 * 4 bytes"));
  // Was a heap overrun.
  CHECK_THROWS_AS(Tensor::full(f32, {1LL << 31, 1LL << 31}, 1), ShapeError);
  CHECK_THROWS_WITH(Tensor::full(f32, {1LL << 31, 1LL << 31}, 1),
                    Contains("Tensor") && Contains("2147483648 * 2147483648 * 4 bytes"));
  CHECK_THROWS_AS(Tensor::zeros(DType::float64, {1LL << 40, 1LL << 40}), ShapeError);
  CHECK_THROWS_WITH(Tensor::zeros(DType::float64, {1LL << 40, 1LL << 40}), Contains("more elements than fit in int64"));
  CHECK_THROWS_AS(Tensor(f32, {1LL << 40, 1LL << 40, 0}), ShapeError);
  // Wrapping storage: the offset and the size are checked too.
  auto st = allocate_host(64);
  CHECK_THROWS_AS(Tensor(st, f32, {1LL << 62}), ShapeError);
  CHECK_THROWS_AS(Tensor(st, f32, {2}, kMax / 2), ShapeError);
  CHECK_THROWS_AS(Tensor(st, f32, {2}, -1), ValueError);
  CHECK_THROWS_AS(Tensor(st, f32, {17}), MemoryError);
  CHECK(Tensor(st, f32, {16}).nbytes() == 64);
}

TEST_CASE("resource limits: negative dimensions are refused everywhere", "[core][limits]") {
  CHECK_THROWS_AS(Tensor(f32, {2, -3}), ShapeError);
  CHECK_THROWS_WITH(Tensor(f32, {2, -3}), Contains("Tensor") && Contains("(2, -3)") && Contains("negative dimension -3"));
  CHECK_THROWS_AS(Tensor::zeros(f32, {-1}), ShapeError);
  CHECK_THROWS_AS(numel({4, -2}), ShapeError);
  Tensor t = Tensor::zeros(f32, {2, 3});
  // Was accepted.
  CHECK_THROWS_AS(t.reshape({-2, -3}), ShapeError);
  CHECK_THROWS_WITH(t.reshape({-2, -3}), Contains("Tensor::reshape") && Contains("(-2, -3)"));
  CHECK_THROWS_AS(t.reshape({-1, -1}), ShapeError);
  CHECK_THROWS_AS(t.reshape({3, -4}), ShapeError);
  CHECK(t.reshape({-1}).shape() == Shape{6});
  CHECK(t.reshape({3, -1}).shape() == Shape{3, 2});
  CHECK_THROWS_AS(input(f32, {2, -2}, "x"), ShapeError);
  Var x = input(f32, {2, 3}, "x");
  CHECK_THROWS_AS(reshape(x, {-2, -3}), ValueError);
  CHECK_THROWS_AS(pad(x, {{-1, 0}}), ValueError);
  CHECK_THROWS_AS(conv2d_grad_wrt_inputs(input(f32, {1, 1, 3, 3}), input(f32, {1, 1, 2, 2}), {1, 1, -4, 4}), ValueError);
  CHECK_THROWS_AS(conv2d(input(f32, {1, 1, 3, 3}), input(f32, {1, 1, 2, 2}), {.border_mode = {-1, 0}}), ValueError);
}

TEST_CASE("resource limits: Tensor::reshape checks the target's size", "[core][limits]") {
  Tensor t = Tensor::zeros(f32, {4});
  CHECK_THROWS_AS(t.reshape({1LL << 40, 1LL << 40}), ShapeError);
  CHECK_THROWS_AS(t.reshape({1LL << 40, 1LL << 40, -1}), ShapeError);
  CHECK_THROWS_AS(t.reshape({0, -1}), ShapeError);
  CHECK_THROWS_WITH(t.reshape({3, -1}), Contains("Tensor::reshape") && Contains("(3, -1)") && Contains("4 elements"));
}

TEST_CASE("resource limits: huge allocations are MemoryErrors naming the bytes", "[core][limits]") {
  // 2^50 bytes fits int64 but no machine has it: refused up front (RAM + swap), never an
  // OOM kill later, never std::bad_alloc.
  CHECK_THROWS_AS(Tensor(f32, {1LL << 48}), MemoryError);
  CHECK_THROWS_WITH(Tensor(f32, {1LL << 48}), Contains("Tensor") && Contains("1125899906842624 bytes"));
  CHECK_THROWS_AS(allocate_host(std::size_t{1} << 62), MemoryError);
  CHECK_THROWS_WITH(allocate_host(std::size_t{1} << 62), Contains("allocate_host") && Contains("4611686018427387904"));
  CHECK_THROWS_AS(allocate_host(std::numeric_limits<std::size_t>::max()), MemoryError);
}

TEST_CASE("resource limits: under an address-space limit an allocation is a MemoryError", "[core][limits]") {
  if (test::sanitized_build()) {
    WARN("SKIPPED: sanitizers cannot run under RLIMIT_AS");
    return;
  }
  // 1 GiB of zeros with only 64 MiB of headroom: aligned_alloc fails in the child.
  const int rc = test::run_in_child(
      [] {
        try {
          Tensor t = Tensor::zeros(f32, {1LL << 28});
          return 1;  // allocated: the limit did not bite
        } catch (const MemoryError& e) {
          return std::string(e.what()).find("1073741824") != std::string::npos ? 0 : 2;
        }
      },
      64LL << 20);
  CHECK(rc == 0);
}

TEST_CASE("resource limits: symbolic shapes that overflow are refused when the node is built", "[core][limits]") {
  // reshape({-1}) of this used to infer (0,).
  CHECK_THROWS_AS(input(f32, {1LL << 40, 1LL << 40}, "x"), ShapeError);
  CHECK_THROWS_WITH(input(f32, {1LL << 40, 1LL << 40}, "x"), Contains("input 'x'") && Contains("1099511627776"));
  CHECK_THROWS_AS(input(f32, {U, 1LL << 40, 1LL << 40}), ShapeError);
  // Fits as bool (1 byte), not as float32.
  Var b = input(DType::boolean, {1LL << 62}, "b");
  CHECK(reshape(b, {-1}).shape() == Shape{1LL << 62});
  CHECK_THROWS_AS(cast(b, f32), ShapeError);
  CHECK_THROWS_WITH(cast(b, f32), Contains("cast") && Contains("4611686018427387904 * 4"));
  CHECK_THROWS_AS(concatenate({b, b}), ShapeError);
  CHECK_THROWS_WITH(concatenate({b, b}), Contains("concatenate") && Contains("4611686018427387904 + 4611686018427387904"));
  // pad by (2^62 - 1, 0) used to overrun the heap at run time.
  Var x = input(f32, {2}, "x");
  CHECK_THROWS_AS(pad(x, {{(1LL << 62) - 1, 0}}), ShapeError);
  CHECK_THROWS_WITH(pad(x, {{(1LL << 62) - 1, 0}}), Contains("pad") && Contains("4611686018427387905 * 4 bytes"));
  CHECK_THROWS_AS(pad(x, {{kMax, 0}}), ShapeError);
  CHECK_THROWS_WITH(pad(x, {{kMax, 0}}), Contains("pad") && Contains("overflows int64"));
  Var m = input(f32, {1LL << 31, 1}, "m");
  CHECK_THROWS_AS(dot(m, transpose(m)), ShapeError);
}

TEST_CASE("resource limits: a size that overflows at run time is a ShapeError from the call", "[core][limits]") {
  Var x = input(f32, {U}, "x");
  Var y = sum(pad(x, {{1LL << 61, 0}}));
  Function f = compile({x}, {y});
  CHECK_THROWS_AS(f({Tensor::zeros(f32, {3})}), ShapeError);
  CHECK_THROWS_WITH(f({Tensor::zeros(f32, {3})}), Contains("pad") && Contains("2305843009213693955 * 4 bytes"));
  // The function stays usable.
  Var x2 = input(f32, {U}, "x");
  Function g = compile({x2}, {sum(pad(x2, {{1, 1}}))});
  CHECK(g({Tensor::full(f32, {3}, 1.0)})[0].get(0) == 3.0);
}

TEST_CASE("resource limits: an intermediate that cannot be allocated is a MemoryError from the call", "[core][limits]") {
  Var x = input(f32, {U}, "x");
  Function f = compile({x}, {sum(pad(x, {{1LL << 46, 0}}))});  // 256 TiB intermediate
  CHECK_THROWS_AS(f({Tensor::zeros(f32, {3})}), MemoryError);
  CHECK_THROWS_WITH(f({Tensor::zeros(f32, {3})}), Contains("bytes"));
}

TEST_CASE("resource limits: convolution shapes use checked arithmetic", "[core][limits][conv]") {
  Var x = input(f32, {1, 1, 1, 1}, "x");
  Var w = input(f32, {1, 1, 1, 1}, "w");
  // Padded to a 2^31 x 2^31 output: used to segfault in the SGEMM kernel.
  const std::int64_t p = 1LL << 30;
  CHECK_THROWS_AS(conv2d(x, w, {.border_mode = pads2(p, p, p, p)}), ShapeError);
  CHECK_THROWS_WITH(conv2d(x, w, {.border_mode = pads2(p, p, p, p)}),
                    Contains("AbstractConv") && Contains("2147483649 * 2147483649 * 4 bytes"));
  // Fits int64 but cannot be allocated: MemoryError when the function runs.
  const std::int64_t q = 1LL << 22;
  Var y = conv2d(x, w, {.border_mode = pads2(q, q, q, q)});
  CHECK(y.shape() == Shape{1, 1, 2 * q + 1, 2 * q + 1});
  Function f = compile({x, w}, {y});
  CHECK_THROWS_AS(f({Tensor::zeros(f32, {1, 1, 1, 1}), Tensor::zeros(f32, {1, 1, 1, 1})}), MemoryError);
  // Padding, dilation and kernel sizes whose arithmetic overflows int64.
  CHECK_THROWS_AS(conv2d(x, w, {.border_mode = pads2(kMax, 0, 0, 0)}), ShapeError);
  CHECK_THROWS_WITH(conv2d(x, w, {.border_mode = pads2(kMax, 0, 0, 0)}),
                    Contains("AbstractConv") && Contains("overflows int64"));
  Var w3 = input(f32, {1, 1, 3, 3}, "w3");
  Var big = input(f32, {1, 1, 8, 8}, "big");
  CHECK_THROWS_AS(conv2d(big, w3, {.filter_dilation = {1LL << 62, 1}}), ShapeError);
  CHECK_THROWS_WITH(conv2d(big, w3, {.filter_dilation = {1LL << 62, 1}}),
                    Contains("AbstractConv") && Contains("dilated kernel") && Contains("4611686018427387904"));
  CHECK_THROWS_AS(conv2d(big, w3, {.border_mode = "full", .filter_dilation = {1LL << 62, 1}}), ShapeError);
  CHECK_THROWS_AS(conv_output_size(kMax, 1, 1, 1, kMax, 0), ShapeError);
  CHECK_THROWS_AS(conv_output_size(0, 3, 1, kMax, 0, 0), ShapeError);  // was -INT64_MIN
  CHECK(conv_output_size(0, kMax, 1, 1, 0, 0) == -kMax + 1);
  CHECK(conv_output_size(3, 5, 2, 1, 0, 0) == 0);  // floor(-2 / 2) + 1
  CHECK_THROWS_AS(get_conv_gradinputs_shape_1axis(kMax, kMax, "full", 0, 1, 1), ShapeError);
  CHECK_THROWS_AS(get_conv_gradweights_shape_1axis(kMax, 1, BorderMode(kMax), 0, 1, 1), ShapeError);
  CHECK_THROWS_AS(get_conv_gradinputs_shape({1, 1LL << 62, 3, 3}, {1, 1, 3, 3}, "valid", {1, 1}, {1, 1}, 4),
                  ShapeError);
}

TEST_CASE("resource limits: a conv output below 1 names the sizes, not 'ambiguous'", "[core][limits][conv]") {
  Var x = input(f32, {1, 1, 3, 3}, "x");
  Var w = input(f32, {1, 1, 5, 5}, "w");
  CHECK_THROWS_AS(conv2d(x, w), ShapeError);
  CHECK_THROWS_WITH(conv2d(x, w), Contains("AbstractConv") && Contains("would be -1") && Contains("below 1") &&
                                      Contains("input size 3") && Contains("dilated kernel 5"));
  // grad w.r.t. weights: output_grad 5x5 cannot come from a 3x3 input with 'valid'.
  Var gy = input(f32, {1, 1, 5, 5}, "gy");
  CHECK_THROWS_AS(conv2d_grad_wrt_weights(x, gy, {U, U, U, U}), ShapeError);
  CHECK_THROWS_WITH(conv2d_grad_wrt_weights(x, gy, {U, U, U, U}),
                    Contains("AbstractConvGradWeights") && Contains("filter size of spatial axis 0 would be -1") &&
                        Contains("below 1") && Contains("input size 3") && Contains("output_grad size 5") &&
                        !Contains("ambiguous"));
  // 'full' border: output_grad 2x2 is smaller than the 3x3 input.
  Var gy2 = input(f32, {1, 1, 2, 2}, "gy2");
  CHECK_THROWS_WITH(conv2d_grad_wrt_weights(x, gy2, {U, U, U, U}, {.border_mode = "full"}),
                    Contains("would be 0") && Contains("below 1") && !Contains("ambiguous"));
  // dilation 2: input 5 - output_grad 2 = 3 is odd, no filter size fits.
  Var x5 = input(f32, {1, 1, 5, 5}, "x5");
  CHECK_THROWS_WITH(conv2d_grad_wrt_weights(x5, gy2, {U, U, U, U}, {.filter_dilation = {2, 2}}),
                    Contains("no filter size fits") && Contains("filter_dilation 2") && !Contains("ambiguous"));
  // grad w.r.t. inputs: output_grad 1 + kernel 1 - 1 - padding 5+5 = -9.
  Var g1 = input(f32, {1, 1, 1, 1}, "g1");
  Var w1 = input(f32, {1, 1, 1, 1}, "w1");
  CHECK_THROWS_AS(conv2d_grad_wrt_inputs(g1, w1, {U, U, U, U}, {.border_mode = 5}), ShapeError);
  CHECK_THROWS_WITH(conv2d_grad_wrt_inputs(g1, w1, {U, U, U, U}, {.border_mode = 5}),
                    Contains("AbstractConvGradInputs") && Contains("input size of spatial axis 0 would be -9") &&
                        Contains("below 1") && Contains("padding 5+5") && !Contains("ambiguous"));
  // Stride 2 really is ambiguous, and says so.
  CHECK_THROWS_WITH(conv2d_grad_wrt_weights(x5, gy2, {U, U, U, U}, {.subsample = {2, 2}}), Contains("ambiguous"));
}

TEST_CASE("resource limits: slice with a huge step takes one element", "[core][limits]") {
  Var x = input(f32, {3, 4}, "x");
  Var s = slice(x, 0, 0, kSliceEnd, 1LL << 62);
  CHECK(s.shape() == Shape{1, 4});
  Var r = slice(x, 0, kSliceEnd, kSliceBegin, std::numeric_limits<std::int64_t>::min());
  CHECK(r.shape() == Shape{1, 4});
  Function f = compile({x}, {s, r});
  Tensor in = Tensor::zeros(f32, {3, 4});
  for (int i = 0; i < 12; ++i) in.set(i, i);
  auto out = f({in});
  CHECK(out[0].to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(out[1].to_vector() == std::vector<double>{8, 9, 10, 11});
}
