// Random streams and dropout: Philox4x32-10 against the published known-answer vectors,
// every draw against values recomputed from the documented counter layout, the
// distributions' moments, reproducibility (seed, reseed, thread count), no folding or
// merging of draws, dropout's mask shared by forward and gradient, bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>
#include <convgraph/ops/random.hpp>

#include "ops/philox.hpp"

using namespace convgraph;
using Catch::Contains;

namespace {

/// Element i of call `call` of draw `key` as a uniform on [0, 1), recomputed from the
/// layout documented in ops/random_info.hpp (float32: one word per value).
double reference_unit_f32(std::uint64_t seed, std::uint32_t key, std::uint64_t call, std::int64_t i) {
  const auto b = static_cast<std::uint64_t>(i / 4);
  const detail::Philox4x32 ctr = {static_cast<std::uint32_t>(b),
                                  static_cast<std::uint32_t>(b >> 32) | static_cast<std::uint32_t>((call >> 32) << 16),
                                  static_cast<std::uint32_t>(call), key};
  const auto w = detail::philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return static_cast<double>(w[static_cast<std::size_t>(i % 4)] >> 8) / 16777216.0;
}

/// float64: two words per value, two values per block.
double reference_unit_f64(std::uint64_t seed, std::uint32_t key, std::uint64_t call, std::int64_t i) {
  const auto b = static_cast<std::uint64_t>(i / 2);
  const detail::Philox4x32 ctr = {static_cast<std::uint32_t>(b), 0, static_cast<std::uint32_t>(call), key};
  const auto w = detail::philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::size_t j = static_cast<std::size_t>(2 * (i % 2));
  return static_cast<double>(((std::uint64_t{w[j]} << 32) | w[j + 1]) >> 11) / 9007199254740992.0;
}

struct Moments {
  double mean = 0, sd = 0;
};
Moments moments(const Tensor& t) {
  const auto v = t.to_vector();
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double m = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / static_cast<double>(v.size() - 1))};
}

std::size_t count_ops(const Function& f, const std::string& name) {
  std::size_t n = 0;
  for (const Var& v : topological_order(f.graph().outputs()))
    if (v.op() && v.op()->name() == name) ++n;
  return n;
}

}  // namespace

TEST_CASE("random: Philox4x32-10 matches the Random123 known-answer vectors", "[ops][random]") {
  // Random123's kat_vectors (Salmon et al., SC'11): counter words, key words, result.
  using detail::philox4x32_10;
  CHECK(philox4x32_10({0, 0, 0, 0}, 0, 0) == detail::Philox4x32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff) ==
        detail::Philox4x32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0) ==
        detail::Philox4x32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("random: draws follow the documented counter layout, call after call", "[ops][random]") {
  const std::uint64_t seed = 0x123456789abcdefull;
  RandomStream rs(seed);
  const Var u = rs.uniform({3, 7}, -2, 3);                      // key 0
  const Var b = rs.bernoulli({5, 3}, 0.3);                      // key 1
  const Var d = rs.uniform({9}, 1, 2, DType::float64);          // key 2
  const Function f = compile({}, {u, b, d});
  for (std::uint64_t call = 0; call < 3; ++call) {
    INFO("call " << call);
    const auto out = f({});
    for (std::int64_t i = 0; i < 21; ++i)
      REQUIRE(out[0].get(i) == static_cast<double>(static_cast<float>(-2 + 5 * reference_unit_f32(seed, 0, call, i))));
    for (std::int64_t i = 0; i < 15; ++i)
      REQUIRE(out[1].get(i) == (reference_unit_f32(seed, 1, call, i) < 0.3 ? 1.0 : 0.0));
    for (std::int64_t i = 0; i < 9; ++i) REQUIRE(out[2].get(i) == 1 + reference_unit_f64(seed, 2, call, i));
  }
}

TEST_CASE("random: same seed, same sequence; reseeding restarts it; thread count does not matter",
          "[ops][random]") {
  auto program = [](RandomStream& stream, int threads) {
    Var n = stream.normal({300, 301}, 1, 2);
    Var u = stream.uniform({1001});
    Mode m = Mode::fast_run();
    m.threads = threads;
    return compile({}, {n, u}, m);
  };
  RandomStream s1(42), s2(42), s3(43);
  RandomStream* stream = &s1;
  const Function a = program(s1, 1);
  const Function b = program(s2, 2);
  const Function c = program(s3, 2);
  const auto a1 = a({}), a2 = a({});
  const auto b1 = b({}), b2 = b({});
  CHECK(max_abs_diff(a1[0], b1[0]) == 0);
  CHECK(max_abs_diff(a1[1], b1[1]) == 0);
  CHECK(max_abs_diff(a2[0], b2[0]) == 0);
  CHECK(max_abs_diff(a1[0], a2[0]) > 0);  // a new call, new numbers
  CHECK(max_abs_diff(a1[0], c({})[0]) > 0);
  stream->seed(42);
  CHECK(max_abs_diff(a({})[0], a1[0]) == 0);
  stream->seed(7);
  CHECK(stream->seed() == 7);
  CHECK(max_abs_diff(a({})[1], a1[1]) > 0);
}

TEST_CASE("random: uniform, normal and bernoulli have the stated distributions", "[ops][random]") {
  RandomStream rs(2024);
  const std::int64_t n = 200000;
  for (DType dt : {DType::float32, DType::float64}) {
    INFO(dtype_name(dt));
    const auto out = compile({}, {rs.uniform({n}, -1, 3, dt), rs.normal({n}, 5, 0.5, dt), rs.bernoulli({n}, 0.25, dt)})({});
    const auto u = out[0].to_vector();
    CHECK(*std::min_element(u.begin(), u.end()) >= -1);
    CHECK(*std::max_element(u.begin(), u.end()) < 3);
    const Moments mu = moments(out[0]);
    CHECK(std::abs(mu.mean - 1) < 0.02);  // sd of the mean: 4 / sqrt(12 n) = 0.0026
    CHECK(std::abs(mu.sd - 4 / std::sqrt(12.0)) < 0.01);
    const Moments mn = moments(out[1]);
    CHECK(std::abs(mn.mean - 5) < 0.006);  // 0.5 / sqrt(n) = 0.0011
    CHECK(std::abs(mn.sd - 0.5) < 0.005);
    std::int64_t within = 0;
    for (double v : out[1].to_vector()) within += std::abs(v - 5) < 0.5;
    CHECK(std::abs(static_cast<double>(within) / n - 0.682689) < 0.006);
    std::int64_t ones = 0;
    for (double v : out[2].to_vector()) {
      REQUIRE((v == 0 || v == 1));
      ones += v == 1;
    }
    CHECK(std::abs(static_cast<double>(ones) / n - 0.25) < 0.006);
  }
  const auto edge = compile({}, {rs.bernoulli({64}, 0), rs.bernoulli({64}, 1), rs.uniform({64}, 2, 2)})({});
  CHECK(edge[0].to_vector() == std::vector<double>(64, 0.0));
  CHECK(edge[1].to_vector() == std::vector<double>(64, 1.0));
  CHECK(edge[2].to_vector() == std::vector<double>(64, 2.0));
}

TEST_CASE("random: _like draws take the run-time shape and pass no gradient", "[ops][random]") {
  RandomStream rs(5);
  Var x = input(DType::float64, {kUnknown, 3});
  const Var u = rs.uniform_like(x, 0, 1);
  CHECK(u.dtype() == DType::float64);
  CHECK(rs.normal_like(input(DType::int32, {2})).dtype() == DType::float32);
  const Var g = grad(sum(x * u), x);
  const Function f = compile({x}, {u, g});
  const auto out = f({Tensor::full(DType::float64, {4, 3}, 2.0)});
  CHECK(out[0].shape() == Shape{4, 3});
  CHECK(max_abs_diff(out[0], out[1]) == 0);  // d(sum(x u))/dx = u: one draw per call
  CHECK(f({Tensor::full(DType::float64, {2, 3}, 2.0)})[0].shape() == Shape{2, 3});
}

TEST_CASE("random: draws are never merged or constant-folded", "[ops][random]") {
  RandomStream rs(11);
  const Var c = constant(Tensor::zeros(DType::float32, {50}));
  // Same parameters twice, and a draw whose only input is a constant.
  const Function f = compile({}, {rs.uniform({50}), rs.uniform({50}), rs.uniform_like(c) + c});
  CHECK(count_ops(f, "random_uniform") == 3);
  const auto a = f({}), b = f({});
  CHECK(max_abs_diff(a[0], a[1]) > 0);
  CHECK(max_abs_diff(a[2], b[2]) > 0);
}

TEST_CASE("random: dropout scales kept values and its gradient uses the same mask", "[ops][random][dropout]") {
  RandomStream rs(3);
  Var x = input(DType::float32, {kUnknown, 100});
  CHECK(dropout(x, 0, rs).same(x));
  const double p = 0.3;
  const Var y = dropout(x, p, rs);
  const Var gx = grad(sum(y), x);
  const Function f = compile({x}, {y, gx});
  Tensor xv(DType::float32, {200, 100});
  for (std::int64_t i = 0; i < xv.numel(); ++i) xv.set(i, 1 + 0.001 * static_cast<double>(i));
  const auto out = f({xv});
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < xv.numel(); ++i) {
    const double m = out[1].get(i);  // mask / (1 - p)
    REQUIRE((m == 0 || std::abs(m - 1 / (1 - p)) < 1e-6));
    REQUIRE(std::abs(out[0].get(i) - xv.get(i) * m) <= 1e-5 * std::abs(out[0].get(i)));
    dropped += m == 0;
  }
  CHECK(std::abs(static_cast<double>(dropped) / 20000 - p) < 0.015);
  CHECK(max_abs_diff(f({xv})[0], out[0]) > 0);  // a new mask per call
}

TEST_CASE("random: bad inputs raise typed errors naming op and values", "[ops][random][errors]") {
  RandomStream rs(1);
  CHECK_THROWS_AS(rs.uniform({2}, 3, 1), ValueError);
  CHECK_THROWS_WITH(rs.uniform({2}, 3, 1), Contains("uniform") && Contains("low 3") && Contains("high 1"));
  CHECK_THROWS_AS(rs.uniform({2}, 0, INFINITY), ValueError);
  CHECK_THROWS_AS(rs.normal({2}, 0, -1), ValueError);
  CHECK_THROWS_WITH(rs.normal({2}, 0, -1), Contains("normal") && Contains("std -1"));
  CHECK_THROWS_AS(rs.bernoulli({2}, 1.5), ValueError);
  CHECK_THROWS_WITH(rs.bernoulli({2}, 1.5), Contains("bernoulli") && Contains("p 1.5"));
  CHECK_THROWS_AS(rs.bernoulli({2}, NAN), ValueError);
  CHECK_THROWS_AS(rs.uniform({2}, 0, 1, DType::int32), TypeError);
  CHECK_THROWS_WITH(rs.uniform({2}, 0, 1, DType::int32), Contains("uniform") && Contains("int32"));
  CHECK_THROWS_AS(rs.uniform({2, -1}), ShapeError);
  CHECK_THROWS_WITH(rs.normal({2, -1}), Contains("normal") && Contains("(2, -1)"));
  CHECK_THROWS_AS(rs.uniform_like(Var()), ValueError);
  Var x = input(DType::float32, {4});
  CHECK_THROWS_AS(dropout(x, 1, rs), ValueError);
  CHECK_THROWS_WITH(dropout(x, 1, rs), Contains("dropout") && Contains("p 1") && Contains("[0, 1)"));
  CHECK_THROWS_AS(dropout(x, -0.1, rs), ValueError);
  CHECK_THROWS_AS(dropout(input(DType::int64, {4}), 0.5, rs), TypeError);
  CHECK_THROWS_WITH(dropout(input(DType::int64, {4}), 0.5, rs), Contains("dropout") && Contains("int64"));
}
