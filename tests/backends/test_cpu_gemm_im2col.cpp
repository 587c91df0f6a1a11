// White-box tests of the CPU building blocks behind cpu.corrmm: the GEMM wrapper (all four
// transpose cases, strides, alpha/beta, beta = 0 over NaN garbage) and N-d im2col / col2im
// (col2im is the exact adjoint of im2col; position ranges compose).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "backends/cpu/conv_geometry.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/im2col.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "support/conv_cases.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using i64 = std::int64_t;

namespace {

template <class T>
void check_gemm(bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, T beta) {
  const i64 lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
  const auto a = random_values(static_cast<std::size_t>((ta ? K : M) * lda), 1);
  const auto b = random_values(static_cast<std::size_t>((tb ? N : K) * ldb), 2);
  const auto c0 = random_values(static_cast<std::size_t>(M * ldc), 3);
  std::vector<T> A(a.begin(), a.end()), B(b.begin(), b.end()), C(c0.begin(), c0.end());
  if (beta == T(0)) std::fill(C.begin(), C.end(), std::numeric_limits<T>::quiet_NaN());
  cpu::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const double tol = sizeof(T) == 8 ? 1e-12 : 1e-4;
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < N; ++j) {
      double s = 0;
      for (i64 k = 0; k < K; ++k)
        s += a[ta ? k * lda + i : i * lda + k] * b[tb ? j * ldb + k : k * ldb + j];
      const double want = alpha * s + (beta == T(0) ? 0.0 : beta * c0[i * ldc + j]);
      INFO("ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K << " at " << i << "," << j);
      REQUIRE(std::abs(C[i * ldc + j] - want) <= tol * std::max(1.0, std::sqrt(double(K))));
    }
  // Padding columns beyond N are never written.
  if (beta == T(0))
    for (i64 i = 0; i < M; ++i) REQUIRE(std::isnan(C[i * ldc + N]));
}

}  // namespace

TEST_CASE("cpu::gemm matches a naive product", "[backends][cpu][gemm]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] : {std::tuple<i64, i64, i64>{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 9, 130}, {5, 4, 0}}) {
        check_gemm<double>(ta, tb, M, N, K, 1.0, 0.0);
        check_gemm<double>(ta, tb, M, N, K, -0.5, 1.0);
        check_gemm<float>(ta, tb, M, N, K, 1.0f, 0.0f);
        check_gemm<float>(ta, tb, M, N, K, 2.0f, 0.25f);
      }
}

TEST_CASE("col2im is the adjoint of im2col over position ranges", "[backends][cpu][im2col]") {
  std::uint64_t seed = 40;
  const auto cases = conv_sweep_cases();
  for (std::size_t i = 0; i < cases.size(); i += 7) {
    const ConvProblem p = cases[i].problem(ConvDirection::forward, DType::float64);
    const cpu::ConvGeometry g(p);
    const i64 channels = g.Cg;
    const i64 P = g.out_numel;
    const auto x = random_values(static_cast<std::size_t>(channels * g.in_numel), seed++);
    // Split the positions into three uneven ranges, as chunked corrmm does.
    const i64 cuts[] = {0, P / 3, 2 * P / 3 + 1, P};
    double lhs = 0, rhs = 0;
    std::vector<double> back(x.size(), 0.0);
    for (int r = 0; r < 3; ++r) {
      const i64 p0 = std::min(cuts[r], P), p1 = std::max(p0, std::min(cuts[r + 1], P));
      if (p1 == p0) continue;
      const std::size_t n = static_cast<std::size_t>(channels * g.ker_numel * (p1 - p0));
      std::vector<double> col(n, std::numeric_limits<double>::quiet_NaN());
      cpu::im2col(g, x.data(), channels, p0, p1, col.data());
      const auto c = random_values(n, seed++);
      lhs += dot(col, c);  // NaN here means im2col left an entry unwritten
      cpu::col2im_add(g, c.data(), channels, p0, p1, back.data());
    }
    rhs = dot(x, back);
    INFO(cases[i].name);
    REQUIRE(std::isfinite(lhs));
    CHECK(std::abs(lhs - rhs) <= 1e-12 * std::max(1.0, std::abs(lhs)) * 100);
  }
}

TEST_CASE("float col2im is the adjoint of im2col on long strided rows at every level",
          "[backends][cpu][im2col][isa]") {
  // Rows long enough for the vector steps of the strided scatter (runs of 17 to 60
  // entries), at strides 1, 2 and 3, with padding, dilation and an odd width. The adjoint
  // identity <im2col(x), c> == <x, col2im(c)> fails if an entry is added twice, dropped
  // or added at the wrong place; each plane of x has a neighbour, so a write past a row's
  // last entry breaks it too.
  struct Shape {
    std::vector<i64> in, ker, stride, pad, dil;
  };
  const Shape shapes[] = {{{5, 77}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
                          {{4, 120}, {1, 5}, {1, 2}, {0, 2}, {1, 2}},
                          {{3, 35}, {2, 4}, {1, 2}, {0, 0}, {1, 1}},
                          {{121}, {3}, {2}, {1}, {1}},
                          {{2, 3, 97}, {1, 2, 3}, {1, 1, 3}, {0, 1, 2}, {1, 1, 1}},
                          {{3, 64}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}};
  for (CpuIsa isa : runnable_cpu_levels()) {
    ScopedCpuIsa scope(isa);
    std::uint64_t seed = 90;
    for (const Shape& sh : shapes) {
      ConvParams prm;
      prm.ndim = static_cast<int>(sh.in.size());
      prm.stride = sh.stride;
      prm.dilation = sh.dil;
      std::vector<std::pair<i64, i64>> pads;
      for (i64 pd : sh.pad) pads.push_back({pd, pd});
      prm.border = BorderMode(pads);
      std::vector<i64> xs{1, 3}, ws{2, 3};
      xs.insert(xs.end(), sh.in.begin(), sh.in.end());
      ws.insert(ws.end(), sh.ker.begin(), sh.ker.end());
      const ConvProblem p = ConvProblem::make(ConvDirection::forward, prm, xs, ws, DType::float32);
      const cpu::ConvGeometry g(p);
      const i64 P = g.out_numel, rows = g.Cg * g.ker_numel;
      const auto xd = random_values(static_cast<std::size_t>(g.Cg * g.in_numel), seed++);
      const auto cd = random_values(static_cast<std::size_t>(rows * P), seed++);
      const std::vector<float> x(xd.begin(), xd.end()), c(cd.begin(), cd.end());
      std::vector<float> col(c.size()), back(x.size(), 0.0f);
      cpu::im2col(g, x.data(), g.Cg, 0, P, col.data());
      cpu::col2im_add(g, c.data(), g.Cg, 0, P, back.data());
      double lhs = 0, rhs = 0, mag = 0;
      for (std::size_t i = 0; i < c.size(); ++i) lhs += double(col[i]) * c[i], mag += std::abs(double(col[i]) * c[i]);
      for (std::size_t i = 0; i < x.size(); ++i) rhs += double(x[i]) * back[i];
      INFO("level " << cpu_isa_name(isa) << " " << p.key());
      CHECK(std::abs(lhs - rhs) <= 1e-5 * std::max(1.0, mag));
    }
    // A 1x1 filter at stride 2 along rows of 2n inputs adds into the even ones only; the
    // vector steps may add zeros to the odd ones between, never to the last (which may
    // belong to another thread's plane): it keeps the sign of its -0.0.
    for (i64 n : {3, 4, 5, 8, 9, 16, 17, 20, 33}) {
      ConvParams prm;
      prm.ndim = 2;
      prm.stride = {1, 2};
      const ConvProblem p = ConvProblem::make(ConvDirection::forward, prm, {1, 2, 3, 2 * n}, {1, 2, 1, 1},
                                              DType::float32);
      const cpu::ConvGeometry g(p);
      const std::vector<float> c(static_cast<std::size_t>(g.Cg * g.out_numel), 1.0f);
      std::vector<float> back(static_cast<std::size_t>(g.Cg * g.in_numel), -0.0f);
      cpu::col2im_add(g, c.data(), g.Cg, 0, g.out_numel, back.data());
      INFO("level " << cpu_isa_name(isa) << " row of " << 2 * n);
      for (i64 row = 0; row < g.Cg * g.in[1]; ++row) {
        CHECK(back[static_cast<std::size_t>(row * 2 * n)] == 1.0f);
        CHECK(std::signbit(back[static_cast<std::size_t>(row * 2 * n + 2 * n - 1)]));
      }
    }
  }
}

TEST_CASE("im2col of a 2D example, with flip", "[backends][cpu][im2col]") {
  // x = 3x3 (1..9), kernel 2x2, pad 1 before on both axes only, stride 2: outputs 2x2 at
  // padded positions (0,0), (0,2), (2,0), (2,2).
  ConvParams prm;
  prm.ndim = 2;
  prm.border = std::vector<std::pair<i64, i64>>{{1, 0}, {1, 0}};
  prm.stride = {2, 2};
  prm.filter_flip = false;
  ConvProblem p = ConvProblem::make(ConvDirection::forward, prm, {1, 1, 3, 3}, {1, 1, 2, 2}, DType::float64);
  REQUIRE(p.out[0] == 2);
  REQUIRE(p.out[1] == 2);
  const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> col(16);
  cpu::im2col(cpu::ConvGeometry(p), x.data(), 1, 0, 4, col.data());
  // rows: taps (0,0) (0,1) (1,0) (1,1); columns: outputs (0,0) (0,1) (1,0) (1,1)
  CHECK(col == std::vector<double>{0, 0, 0, 5,  //
                                   0, 0, 4, 6,  //
                                   0, 2, 0, 8,  //
                                   1, 3, 7, 9});
  p.flip = true;  // row (w0, w1) now holds the mirrored tap (1-w0, 1-w1)
  cpu::im2col(cpu::ConvGeometry(p), x.data(), 1, 0, 4, col.data());
  CHECK(col == std::vector<double>{1, 3, 7, 9,  //
                                   0, 2, 0, 8,  //
                                   0, 0, 4, 6,  //
                                   0, 0, 0, 5});
}
