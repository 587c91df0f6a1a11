// convgraph::cpu::sgemm against a double-accumulating naive GEMM: every transpose
// combination, odd sizes around the register blocks, alpha/beta, NaN in C with beta == 0,
// padded leading dimensions, threading, and every kernel family this CPU can run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/sgemm.hpp"
#include "backends/cpu/sgemm_driver.hpp"  // PrefetchRows
#include "convgraph/core/error.hpp"
#include "convgraph/core/tensor.hpp"  // allocate_host
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build

namespace {

using convgraph::ThreadPool;
using convgraph::CpuIsa;
using i64 = std::int64_t;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
/// Written into the padding columns of every matrix; must survive untouched in C.
constexpr float kSentinel = 1234.5f;

std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512})
    if (convgraph::cpu_isa_supported(isa)) out.push_back(isa);
  return out;
}

struct Case {
  bool ta = false, tb = false;
  i64 M = 1, N = 1, K = 1;
  float alpha = 1.0f, beta = 0.0f;
  i64 pad = 0;  ///< extra columns in every leading dimension
};

std::string describe(const Case& c, CpuIsa isa) {
  return std::string(convgraph::cpu_isa_name(isa)) + " ta=" + std::to_string(c.ta) +
         " tb=" + std::to_string(c.tb) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
         " K=" + std::to_string(c.K) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " pad=" + std::to_string(c.pad);
}

/// A row-major rows x cols matrix with row stride cols + pad; padding holds kSentinel.
std::vector<float> random_matrix(i64 rows, i64 cols, i64 pad, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> m(static_cast<std::size_t>(rows * (cols + pad)), kSentinel);
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; ++c) m[static_cast<std::size_t>(r * (cols + pad) + c)] = dist(rng);
  return m;
}

/// A PanelSource over a stored batch of op(B) (tb: each element stored as B_b^T), `stride`
/// floats apart: packs the driver's slivers, or gives columns as rows.
struct StoredB {
  const float* B;
  i64 ldb, stride;
  bool tb;
  // Always inlined: the sanitized build's -O1 leaves it out of line, half of the batch tests' time.
  [[gnu::always_inline]] float at(i64 b, i64 k, i64 j) const { return tb ? B[b * stride + j * ldb + k] : B[b * stride + k * ldb + j]; }
  static void pack(const void* ctx, i64 b, i64 k0, i64 kc, i64 j0, i64 n, int nr, float* dst) {
    const auto& s = *static_cast<const StoredB*>(ctx);
    for (i64 q = 0; q * nr < n; ++q)
      for (i64 k = 0; k < kc; ++k)
        for (i64 j = 0; j < nr; ++j)
          dst[(q * kc + k) * nr + j] = q * nr + j < n ? s.at(b, k0 + k, j0 + q * nr + j) : 0.0f;
  }
  static void rows(const void* ctx, i64 b, i64 k0, i64 kc, i64 j0, i64 n, float* dst) {
    const auto& s = *static_cast<const StoredB*>(ctx);
    for (i64 j = 0; j < n; ++j)
      for (i64 k = 0; k < kc; ++k) dst[j * kc + k] = s.at(b, k0 + k, j0 + j);
  }
};

/// A TileHook's record of what the driver reported final: each element's value when its
/// tile was reported, and how many times it was (row stride ld).
struct TileRecorder {
  const float* c;
  i64 ld;
  std::vector<float> copy;
  std::vector<int> count;
  TileRecorder(const float* c_, i64 ld_, std::size_t size) : c(c_), ld(ld_), copy(size, kNaN), count(size, 0) {}
  static void fn(const void* ctx, i64 i0, i64 i1, i64 j0, i64 j1) {
    auto* s = static_cast<TileRecorder*>(const_cast<void*>(ctx));
    for (i64 i = i0; i < i1; ++i)
      for (i64 j = j0; j < j1; ++j) {
        const std::size_t at = static_cast<std::size_t>(i * s->ld + j);
        s->copy[at] = s->c[at];
        ++s->count[at];
      }
  }
};

/// Runs one case on one kernel family and checks every element of C, padding included.
/// host_c: C lives in allocate_host memory (64-byte aligned, huge pages from 4 MiB), as a
/// Function's tensors do; otherwise in a std::vector.
void check_case(const Case& c, CpuIsa isa, ThreadPool* pool, bool nan_c = false, bool host_c = false) {
  INFO(describe(c, isa) << (pool ? " pooled" : "") << (nan_c ? " NaN-C" : "") << (host_c ? " host-C" : ""));
  std::mt19937 rng(static_cast<unsigned>(c.M * 7919 + c.N * 104729 + c.K * 31 + c.ta * 2 + c.tb));
  const i64 a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const i64 b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const i64 lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const std::vector<float> A = random_matrix(a_rows, a_cols, c.pad, rng);
  const std::vector<float> B = random_matrix(b_rows, b_cols, c.pad, rng);
  const std::vector<float> C0 = random_matrix(c.M, c.N, c.pad, rng);
  std::vector<float> c_vector;
  std::shared_ptr<convgraph::Storage> c_host;
  float* C = nullptr;
  if (host_c) {
    c_host = convgraph::allocate_host(C0.size() * sizeof(float));
    C = static_cast<float*>(c_host->data);
    REQUIRE(reinterpret_cast<std::uintptr_t>(C) % 64 == 0);
    std::copy(C0.begin(), C0.end(), C);
  } else {
    c_vector = C0;
    C = c_vector.data();
  }
  if (nan_c)
    for (i64 i = 0; i < c.M; ++i)
      for (i64 j = 0; j < c.N; ++j) C[i * ldc + j] = kNaN;

  convgraph::cpu::sgemm_with_isa(isa, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb,
                                 c.beta, C, ldc, pool);

  const double unit = std::ldexp(1.0, -24);
  i64 bad = 0;
  for (i64 i = 0; i < c.M; ++i) {
    for (i64 j = 0; j < c.N + c.pad; ++j) {
      const float got = C[i * ldc + j];
      if (j >= c.N) {  // padding: never written
        if (got != kSentinel) ++bad;
        continue;
      }
      double sum = 0.0, mag = 0.0;
      for (i64 k = 0; k < c.K; ++k) {
        const double a = A[static_cast<std::size_t>(c.ta ? k * lda + i : i * lda + k)];
        const double b = B[static_cast<std::size_t>(c.tb ? j * ldb + k : k * ldb + j)];
        sum += a * b;
        mag += std::abs(a * b);
      }
      const double old = c.beta == 0.0f ? 0.0 : static_cast<double>(C0[static_cast<std::size_t>(i * ldc + j)]);
      const double want = c.alpha * sum + c.beta * old;
      // Float accumulation of K products: error grows at most linearly with K.
      const double tol = 4.0 * static_cast<double>(c.K + 2) * unit *
                             (std::abs(c.alpha) * mag + std::abs(c.beta * old)) + 1e-30;
      if (!(std::abs(got - want) <= tol)) {
        if (bad < 5) WARN("C(" << i << "," << j << ") = " << got << ", want " << want << " +- " << tol);
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("sgemm: odd sizes around the register blocks, all transposes", "[sgemm]") {
  for (CpuIsa isa : runnable_isas()) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (i64 s = 1; s <= 70; ++s) {
        check_case({ta, tb, s, 37, 29, 1.0f, 0.0f, 0}, isa, nullptr);   // M sweep
        check_case({ta, tb, 15, s, 33, 1.0f, 0.0f, 0}, isa, nullptr);   // N sweep
        check_case({ta, tb, 17, 40, s, 1.0f, 0.0f, 0}, isa, nullptr);   // K sweep
      }
    }
  }
}

TEST_CASE("sgemm: larger shapes, several depth blocks and column tiles", "[sgemm]") {
  ThreadPool pool(3);
  for (CpuIsa isa : runnable_isas()) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      check_case({ta, tb, 257, 129, 65, 1.0f, 0.0f, 0}, isa, nullptr);
      check_case({ta, tb, 257, 129, 65, 1.0f, 0.0f, 0}, isa, &pool);
      // K past two depth blocks, N past one column tile, M with a short last sliver.
      check_case({ta, tb, 45, 1100, 800, 0.5f, 1.0f, 3}, isa, &pool);
      // Few rows and deep depth blocks: plain B runs B sliver by B sliver (sliver_outer).
      check_case({ta, tb, 29, 97, 1000, 1.0f, 0.5f, 1}, isa, nullptr);
      // Few columns and many rows (a 7x7 conv layer): row tiles with a shared B.
      check_case({ta, tb, 700, 49, 520, 1.0f, 0.0f, 0}, isa, &pool);
    }
  }
}

TEST_CASE("sgemm: alpha and beta", "[sgemm]") {
  for (CpuIsa isa : runnable_isas())
    for (int t = 0; t < 4; ++t)
      for (float alpha : {1.0f, -0.5f, 2.0f})
        for (float beta : {0.0f, 1.0f, 0.25f, -1.0f})
          check_case({bool(t & 1), bool(t & 2), 31, 45, 23, alpha, beta, 0}, isa, nullptr);
}

TEST_CASE("sgemm: beta == 0 ignores NaN in C", "[sgemm]") {
  ThreadPool pool(2);
  for (CpuIsa isa : runnable_isas())
    for (int t = 0; t < 4; ++t) {
      check_case({bool(t & 1), bool(t & 2), 29, 50, 17, 1.5f, 0.0f, 2}, isa, nullptr, true);
      check_case({bool(t & 1), bool(t & 2), 300, 200, 500, 1.0f, 0.0f, 0}, isa, &pool, true);
    }
}

TEST_CASE("sgemm: leading dimensions wider than the matrices", "[sgemm]") {
  for (CpuIsa isa : runnable_isas())
    for (int t = 0; t < 4; ++t)
      for (i64 pad : {1, 5, 16, 33})
        check_case({bool(t & 1), bool(t & 2), 19, 35, 41, 1.0f, 0.5f, pad}, isa, nullptr);
}

TEST_CASE("sgemm: the result does not depend on the thread count", "[sgemm]") {
  std::mt19937 rng(7);
  const i64 M = 333, N = 517, K = 901;
  const std::vector<float> A = random_matrix(M, K, 0, rng), B = random_matrix(K, N, 0, rng);
  std::vector<float> c1(static_cast<std::size_t>(M * N)), c2 = c1, c4 = c1;
  ThreadPool p2(2), p4(4);
  convgraph::cpu::sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, c1.data(), N, nullptr);
  convgraph::cpu::sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, c2.data(), N, &p2);
  convgraph::cpu::sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, c4.data(), N, &p4);
  CHECK(c1 == c2);
  CHECK(c1 == c4);
}

TEST_CASE("sgemm: column tiles balanced over the threads, tall narrow C: right and the same bits", "[sgemm]") {
  // N = 784 is 49 slivers (tiles narrowed so they spread evenly over the threads); M = 300,
  // N = 49 runs one tile of many A slivers (each prefetched during the one before).
  ThreadPool p2(2), p3(3), p5(5);
  for (CpuIsa isa : runnable_isas()) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (const auto [M, N, K] : {std::array<i64, 3>{64, 784, 300}, std::array<i64, 3>{300, 49, 1100}}) {
        check_case({ta, tb, M, N, K, 1.0f, 0.0f, 0}, isa, &p2);
        std::mt19937 rng(static_cast<unsigned>(M + N + K + t));
        const std::vector<float> A = random_matrix(M, K, 0, rng), B = random_matrix(K, N, 0, rng);
        std::vector<std::vector<float>> results;
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3, &p5}) {
          std::vector<float> C(static_cast<std::size_t>(M * N));
          convgraph::cpu::sgemm_with_isa(isa, ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), tb ? K : N,
                                         0.0f, C.data(), N, pool);
          results.push_back(std::move(C));
        }
        INFO(convgraph::cpu_isa_name(isa) << " ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K);
        for (std::size_t r = 1; r < results.size(); ++r) CHECK(results[r] == results[0]);
      }
    }
  }
}

TEST_CASE("sgemm: a long depth over a small C is split into partial sums", "[sgemm]") {
  // K = 6000 is 16 depth blocks of 384 (AVX-512), enough for four parts; C is smaller
  // than a register block in one or both directions, or a few of them with tails.
  ThreadPool p2(2), p3(3);
  const bool thin = convgraph::test::sanitized_build();
  for (CpuIsa isa : runnable_isas()) {
    if (thin && isa != convgraph::active_cpu_isa()) continue;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      check_case({ta, tb, 20, 37, 6000, 0.5f, 1.0f, 3}, isa, &p2);
      check_case({ta, tb, 5, 3, 6001, 1.0f, 0.0f, 0}, isa, &p3, /*nan_c=*/true);
      if (!thin) check_case({ta, tb, 31, 70, 3000, -1.0f, 0.25f, 0}, isa, nullptr);
    }
  }
}

TEST_CASE("sgemm: A B^T with N wider than M in 32-column slivers and a long depth (computed as C^T = B A^T): right, "
          "and the same bits on any thread count",
          "[sgemm]") {
  // Grad-weights shapes: sgemm runs the swapped product into scratch and adds it to C
  // transposed, with alpha, beta, NaN in C under beta == 0 and padded leading dimensions
  // (40 x 70: N < 2M, but 96 padded columns against 64).
  ThreadPool p2(2), p3(3);
  const bool thin = convgraph::test::sanitized_build();
  for (CpuIsa isa : runnable_isas()) {
    if (thin && isa != convgraph::active_cpu_isa()) continue;
    check_case({false, true, 13, 45, 8200, 0.5f, 0.75f, 3}, isa, &p2);
    check_case({false, true, 7, 70, 9001, 1.0f, 0.0f, 0}, isa, nullptr, /*nan_c=*/true);
    check_case({false, true, 40, 70, 8200, 1.0f, 0.5f, 1}, isa, &p3);
    const i64 M = 30, N = 100, K = 8300;
    std::mt19937 rng(11);
    const std::vector<float> A = random_matrix(M, K, 0, rng), B = random_matrix(N, K, 0, rng);
    std::vector<std::vector<float>> results;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
      std::vector<float> C(static_cast<std::size_t>(M * N), 1.0f);
      convgraph::cpu::sgemm_with_isa(isa, false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.5f, C.data(), N,
                                     pool);
      results.push_back(std::move(C));
    }
    INFO(convgraph::cpu_isa_name(isa));
    CHECK(results[1] == results[0]);
    CHECK(results[2] == results[0]);
  }
}

TEST_CASE("sgemm: split depth, batch-reduce and tile hook: final tiles, the same bits on any thread count",
          "[sgemm]") {
  // C = sum over 3 batch elements of A_b * B_b^T (grad weights' shape), K long enough to
  // split; the hook must see every element once, already final.
  std::mt19937 rng(11);
  const i64 M = 23, N = 41, K = 3100, batch = 3;
  const std::vector<float> A = random_matrix(batch * M, K, 0, rng), B = random_matrix(batch * N, K, 0, rng);
  ThreadPool p2(2), p3(3);
  std::vector<std::vector<float>> results;
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
    std::vector<float> C(static_cast<std::size_t>(M * N), kNaN);
    TileRecorder seen(C.data(), N, C.size());
    const convgraph::cpu::TileHook hook{&TileRecorder::fn, &seen};
    convgraph::cpu::SgemmExt ext;
    ext.batch = batch;
    ext.a_stride = M * K;
    ext.b_stride = N * K;
    ext.tile_done = &hook;
    convgraph::cpu::sgemm_ex(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N, ext, pool);
    CHECK(seen.copy == C);
    CHECK(std::count(seen.count.begin(), seen.count.end(), 1) == M * N);
    double worst = 0;
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j) {
        double want = 0;
        for (i64 b = 0; b < batch; ++b)
          for (i64 k = 0; k < K; ++k)
            want += double(A[static_cast<std::size_t>((b * M + i) * K + k)]) * B[static_cast<std::size_t>((b * N + j) * K + k)];
        worst = std::max(worst, std::abs(want - C[static_cast<std::size_t>(i * N + j)]));
      }
    CHECK(worst < 1e-2);
    results.push_back(C);
  }
  CHECK(results[0] == results[1]);
  CHECK(results[0] == results[2]);
}

TEST_CASE("sgemm: batch-reduce of elements shallower than a depth block (joined steps), every level",
          "[sgemm]") {
  // Elements of depth K < the depth block are laid end to end and cut into blocks that
  // span several of them: each block's pieces must land at their depths, with every
  // transpose, with op(B) from a PanelSource (packing and row-giving), and the same bits
  // on any thread count. A_b and B_b sit a_stride / b_stride apart with a gap between them.
  std::mt19937 rng(29);
  ThreadPool p2(2);
  struct Shape {
    i64 M, N, K, batch;
  };
  std::vector<Shape> shapes;
  for (i64 K : {1, 7, 49, 100, 200})
    for (i64 batch : {2, 3, 8}) shapes.push_back({13, 37, K, batch});
  shapes.push_back({70, 300, 49, 40});  // threads share it, and the depth is cut into two parts
  for (CpuIsa isa : runnable_isas())
    for (const auto [M, N, K, batch] : shapes)
      for (int variant = 0; variant < 6; ++variant) {  // ta, tb; then op(B) from a source
        const bool ta = variant % 2 == 1, tb = variant / 2 == 1, source = variant >= 4;
        INFO(convgraph::cpu_isa_name(isa) << " M=" << M << " N=" << N << " K=" << K << " batch=" << batch
                                          << " ta=" << ta << " tb=" << tb
                                          << " source=" << (source ? (variant == 4 ? "pack" : "rows") : "none"));
        const i64 a_size = M * K, b_size = N * K, a_stride = a_size + 5, b_stride = b_size + 3;
        const std::vector<float> A = random_matrix(1, batch * a_stride, 0, rng);
        const std::vector<float> B = random_matrix(1, batch * b_stride, 0, rng);
        const i64 lda = ta ? M : K, ldb = tb ? K : N;
        const StoredB rows{B.data(), ldb, b_stride, tb};
        const convgraph::cpu::PanelSource src{variant == 4 ? &StoredB::pack : nullptr, &rows,
                                               variant == 5 ? &StoredB::rows : nullptr};
        convgraph::cpu::SgemmExt ext;
        ext.batch = batch;
        ext.a_stride = a_stride;
        ext.b_stride = b_stride;
        if (source) ext.b_source = &src;
        std::vector<std::vector<float>> results;
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2}) {
          std::vector<float> C(static_cast<std::size_t>(M * N), 0.5f);
          convgraph::cpu::sgemm_with_isa(isa, ta, tb, M, N, K, 1.5f, A.data(), lda, source ? nullptr : B.data(),
                                         ldb, 2.0f, C.data(), N, pool, ext);
          double worst = 0;
          for (i64 i = 0; i < M; ++i)
            for (i64 j = 0; j < N; ++j) {
              double want = 1.0;  // beta * 0.5
              for (i64 b = 0; b < batch; ++b)
                for (i64 k = 0; k < K; ++k) {
                  const float a = ta ? A[static_cast<std::size_t>(b * a_stride + k * lda + i)]
                                     : A[static_cast<std::size_t>(b * a_stride + i * lda + k)];
                  want += 1.5 * double(a) * rows.at(b, k, j);
                }
              const double diff = std::abs(want - C[static_cast<std::size_t>(i * N + j)]);
              if (!(diff <= worst)) worst = diff;  // NaN fails too
            }
          CHECK(worst < 1e-3 * std::sqrt(double(batch * K)));
          results.push_back(std::move(C));
        }
        CHECK(results[0] == results[1]);
      }
}

TEST_CASE("sgemm: empty sizes and alpha == 0 follow the BLAS rules", "[sgemm]") {
  const std::vector<float> nan_a(64, kNaN), nan_b(64, kNaN);
  for (CpuIsa isa : runnable_isas()) {
    INFO(convgraph::cpu_isa_name(isa));
    // K == 0: C = beta * C; with beta == 0 even NaN becomes 0.
    std::vector<float> c(12, kNaN);
    convgraph::cpu::sgemm_with_isa(isa, false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.0f, c.data(), 4, nullptr);
    for (float x : c) CHECK(x == 0.0f);
    c.assign(12, 2.0f);
    convgraph::cpu::sgemm_with_isa(isa, false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.5f, c.data(), 4, nullptr);
    for (float x : c) CHECK(x == 1.0f);
    // alpha == 0: A and B are not read (NaN there does not leak into C).
    c.assign(12, 2.0f);
    convgraph::cpu::sgemm_with_isa(isa, true, true, 3, 4, 5, 0.0f, nan_a.data(), 3, nan_b.data(), 5, 3.0f, c.data(), 4, nullptr);
    for (float x : c) CHECK(x == 6.0f);
    // M == 0 or N == 0: nothing happens, null pointers are fine.
    convgraph::cpu::sgemm_with_isa(isa, false, false, 0, 4, 5, 1.0f, nullptr, 5, nullptr, 4, 0.0f, nullptr, 4, nullptr);
    convgraph::cpu::sgemm_with_isa(isa, false, false, 3, 0, 5, 1.0f, nullptr, 5, nullptr, 1, 0.0f, nullptr, 1, nullptr);
  }
}

TEST_CASE("sgemm: bad arguments throw ValueError naming the argument", "[sgemm]") {
  std::vector<float> a(100), b(100), c(100);
  using convgraph::ValueError;
  using convgraph::cpu::sgemm;
  CHECK_THROWS_AS(sgemm(false, false, -1, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2, nullptr), ValueError);
  CHECK_THROWS_WITH(sgemm(false, false, 4, 4, 5, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4, nullptr),
                    Catch::Contains("lda=4"));
  CHECK_THROWS_WITH(sgemm(true, false, 4, 4, 5, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 4, nullptr),
                    Catch::Contains("lda=3"));
  CHECK_THROWS_WITH(sgemm(false, true, 4, 4, 5, 1.0f, a.data(), 5, b.data(), 4, 0.0f, c.data(), 4, nullptr),
                    Catch::Contains("ldb=4"));
  CHECK_THROWS_WITH(sgemm(false, false, 4, 4, 5, 1.0f, a.data(), 5, b.data(), 4, 0.0f, c.data(), 3, nullptr),
                    Catch::Contains("ldc=3"));
  CHECK_THROWS_AS(sgemm(false, false, 4, 4, 5, 1.0f, nullptr, 5, b.data(), 4, 0.0f, c.data(), 4, nullptr), ValueError);
}

TEST_CASE("sgemm: a C larger than the L3, written in one pass: streamed out, every element right", "[sgemm]") {
  // One depth block, beta == 0, C 64-byte aligned with rows whole lines apart and at least
  // the L3's size: the kernels store full tiles non-temporally (a column tail and a short
  // last sliver with plain stores), and the driver fences them before C is read.
  // N ends in a 19-column tail; ldc = N + 13 is a whole number of 64-byte lines.
  const i64 M = 40, K = 7;
  const i64 N = convgraph::cpu::cpu_cache_sizes().l3 / (4 * M) / 16 * 16 + 32 + 19;
  ThreadPool pool(2);
  for (CpuIsa isa : runnable_isas())
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
      check_case({false, false, M, N, K, 1.0f, 0.0f, 13}, isa, p, /*nan_c=*/true, /*host_c=*/true);
}

TEST_CASE("sgemm: PrefetchRows hands out each line once, one share per call, spread or in one go", "[sgemm]") {
  using convgraph::cpu::sgemm_detail::PrefetchRows;
  // 3 rows of A and 2 of B, 40 floats each: 4 lines a row (3 full or partial + 1 for a row
  // that does not start a line), 20 in all, over 6 calls: shares of 4, the last call none.
  std::vector<float> a(3 * 64), b(2 * 64);
  PrefetchRows lines(a.data(), 64, 3, b.data(), 64, 2, 40, 6);
  std::int64_t issued = 0;
  for (int call = 0; call < 6; ++call) {
    const std::int64_t share = lines.share();
    CHECK(share == std::min<std::int64_t>(4, 20 - issued));
    CHECK(lines.active() == (issued < 20));
    if (call % 2 == 0) {
      for (std::int64_t k = 0; k < share; ++k) lines.one();  // as a kernel spreads them
    } else {
      lines.some();
    }
    issued += share;
  }
  CHECK(issued == 20);
  CHECK_FALSE(lines.active());
  CHECK(lines.share() == 0);
  CHECK_FALSE(PrefetchRows().active());  // the default: nothing to fetch
}

TEST_CASE("sgemm: seeded random shapes and extensions at every level: right, and the same bits on any thread count",
          "[sgemm]") {
  // Shapes nobody picked, through whichever of the driver's paths they reach (depth parts,
  // joined batches, row tiles over a shared B, sliver-by-sliver B; the swapped product and
  // the threads by quota, below):
  // sizes of 1-3, up to 40 or up to a few hundred (K up to 4000), every transpose, alpha
  // and beta (NaN in C under beta == 0), padded leading dimensions, batch-reduce of 1-6
  // elements with gaps between them, op(B) stored, packed by a source or given as rows,
  // and a tile hook. Each problem runs on 1, 2 and 3 threads at every level; padding must
  // survive, the hook must see each element once and final.
  const bool thin = convgraph::test::sanitized_build();
  ThreadPool p2(2), p3(3);
  std::uint64_t state = 977;
  const auto draw = [&](i64 lo, i64 hi) {  // uniform in [lo, hi]
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<i64>((state >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const auto size = [&](i64 big) { return draw(0, 3) == 0 ? draw(1, 3) : draw(0, 2) == 0 ? draw(1, 40) : draw(1, big); };
  std::vector<CpuIsa> levels = runnable_isas();
  if (thin) levels = {convgraph::active_cpu_isa()};
  const int wanted = thin ? 25 : 150;
  // Every tenth problem is big enough for the driver to use the threads (2 M N K batch >=
  // 4e6 flops); every tenth, offset by five, qualifies for the swapped product (A B^T with
  // pad32(M) < pad32(N), K >= 8192, batch 1, no source, no hook: C^T = B A^T). The rest are
  // drawn freely, small enough for the reference (smaller still under the sanitizers).
  int threaded = 0, swappable = 0;
  for (int checked = 0; checked < wanted;) {
    const bool big = checked % 10 == 0, swap = checked % 10 == 5;
    i64 M = size(300), N = size(600), K = size(draw(0, 3) == 0 ? 4000 : 500);
    i64 batch = draw(0, 2) == 0 ? draw(2, 6) : 1;
    if (big) {
      M = draw(40, 300), N = draw(40, 600), batch = draw(1, 2);
      K = 2500000 / (M * N * batch) + 1 + draw(0, 20);
    } else if (swap) {
      M = draw(1, 8), N = draw(33, 96), K = draw(8192, 10000), batch = 1;
    } else if (static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K * batch) >
               (thin ? 4e5 : 4e6)) {
      continue;
    }
    ++checked;
    const bool ta = !swap && draw(0, 1) == 1, tb = swap || draw(0, 1) == 1;
    // -1 and 0: stored B (half the problems); 1: packed by a source; 2: given as rows.
    const int source = swap ? -1 : static_cast<int>(draw(0, 3)) - 1;
    const bool hooked = !swap && draw(0, 2) == 0;
    // What the drawn problem reaches, by the driver's rules (kMinParallelFlops, swap_pays),
    // so the counts below hold the quotas to what they are for.
    const auto pad32 = [](i64 n) { return (n + 31) / 32 * 32; };
    threaded += 2.0 * static_cast<double>(M * N) * static_cast<double>(K * batch) >=
                convgraph::cpu::sgemm_detail::kMinParallelFlops;
    swappable += !ta && tb && source <= 0 && !hooked && batch == 1 && pad32(M) < pad32(N) && K >= 8192;
    const i64 pad = draw(0, 2) == 0 ? draw(1, 17) : 0;
    // A small alpha (and every swapped problem has one) shrinks the products' error bound,
    // which grows with K, below the beta term's: a wrong beta shows at any depth.
    const float alpha =
        swap ? 0x1p-12f : std::array<float, 4>{1.0f, -0.5f, 2.0f, 0x1p-12f}[static_cast<std::size_t>(draw(0, 3))];
    const float beta = std::array<float, 4>{0.0f, 1.0f, 0.5f, -1.0f}[static_cast<std::size_t>(draw(0, 3))];
    const i64 lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    const i64 a_stride = (ta ? K : M) * lda + draw(0, 9), b_stride = (tb ? N : K) * ldb + draw(0, 9);
    std::mt19937 rng(static_cast<unsigned>(state >> 40));
    const std::vector<float> A = random_matrix(1, batch * a_stride, 0, rng);
    const std::vector<float> B = random_matrix(1, batch * b_stride, 0, rng);
    std::vector<float> C0 = random_matrix(M, N, pad, rng);
    if (beta == 0.0f)
      for (i64 i = 0; i < M; ++i) std::fill_n(C0.begin() + i * ldc, N, kNaN);
    const StoredB stored{B.data(), ldb, b_stride, tb};
    const convgraph::cpu::PanelSource src{source == 1 ? &StoredB::pack : nullptr, &stored,
                                           source == 2 ? &StoredB::rows : nullptr};
    INFO("M=" << M << " N=" << N << " K=" << K << " batch=" << batch << " ta=" << ta << " tb=" << tb << " source="
              << source << " hook=" << hooked << " pad=" << pad << " alpha=" << alpha << " beta=" << beta);

    // The float64 reference, and the bound of float accumulation over batch * K products.
    std::vector<double> want(static_cast<std::size_t>(M * N)), tol(want.size());
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j) {
        double sum = 0.0, mag = 0.0;
        for (i64 b = 0; b < batch; ++b)
          for (i64 k = 0; k < K; ++k) {
            const double a = A[static_cast<std::size_t>(b * a_stride + (ta ? k * lda + i : i * lda + k))];
            const double p = a * stored.at(b, k, j);
            sum += p;
            mag += std::abs(p);
          }
        const double old = beta == 0.0f ? 0.0 : beta * static_cast<double>(C0[static_cast<std::size_t>(i * ldc + j)]);
        want[static_cast<std::size_t>(i * N + j)] = alpha * sum + old;
        tol[static_cast<std::size_t>(i * N + j)] =
            4.0 * static_cast<double>(batch * K + 2) * std::ldexp(1.0, -24) * (std::abs(alpha) * mag + std::abs(old)) +
            1e-30;
      }

    for (CpuIsa isa : levels) {
      std::vector<float> first;
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p2, &p3}) {
        INFO(convgraph::cpu_isa_name(isa) << " threads=" << (pool ? pool->size() : 1));
        std::vector<float> C = C0;
        TileRecorder seen(C.data(), ldc, C.size());
        const convgraph::cpu::TileHook hook{&TileRecorder::fn, &seen};
        convgraph::cpu::SgemmExt ext;
        ext.batch = batch;
        ext.a_stride = a_stride;
        ext.b_stride = b_stride;
        if (source > 0) ext.b_source = &src;
        if (hooked) ext.tile_done = &hook;
        convgraph::cpu::sgemm_with_isa(isa, ta, tb, M, N, K, alpha, A.data(), lda, source > 0 ? nullptr : B.data(),
                                       ldb, beta, C.data(), ldc, pool, ext);
        i64 bad = 0, unseen = 0;
        for (i64 i = 0; i < M; ++i)
          for (i64 j = 0; j < ldc; ++j) {
            const std::size_t at = static_cast<std::size_t>(i * ldc + j);
            if (j >= N) {  // padding: never written
              bad += C[at] != kSentinel;
              continue;
            }
            const double diff = std::abs(C[at] - want[static_cast<std::size_t>(i * N + j)]);
            if (!(diff <= tol[static_cast<std::size_t>(i * N + j)])) {
              if (bad < 3) WARN("C(" << i << "," << j << ") = " << C[at] << ", want " << want[static_cast<std::size_t>(i * N + j)]);
              ++bad;
            }
            if (hooked && (seen.count[at] != 1 || !(seen.copy[at] == C[at]))) ++unseen;
          }
        CHECK(bad == 0);
        CHECK(unseen == 0);
        if (first.empty())
          first = C;
        else
          CHECK(C == first);
      }
    }
  }
  CHECK(threaded >= wanted / 10);
  CHECK(swappable >= wanted / 10);
}
