// Targeted tests of cpu.fft, cpu.winograd and cpu.conv3d2d against the reference
// convolution (the generic sweep in test_cpu_conv_algorithms.cpp covers them too once
// registered; these add the cases each algorithm is most likely to get wrong).
//
// Error measure: max |got - ref| / max |ref| over the written tensor (ref computed in
// double), operands uniform in [-1, 1). Bounds: float64 1e-9 everywhere; float32
// cpu.fft 2e-5 (float FFTs; measured up to 3e-7), cpu.conv3d2d 1e-5 (measured 1.3e-7),
// cpu.winograd 5e-5 for F(4x4, 3x3) in every direction (forward and grad inputs measured
// up to 6.7e-6 with <= 64 input channels and 1.2e-5 with 256; grad weights, whose transform-
// domain sums run over every tile of the batch, see kernels/winograd.cpp).
#include <catch2/catch.hpp>

// Test cases are written with designated initialisers that leave the defaults in place.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/sgemm.hpp"  // ScopedStreamL3
#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "convgraph/backends/cpu/reference.hpp"
#include "convgraph/core/thread_pool.hpp"
#include "support/child_process.hpp"  // sanitized_build

using namespace convgraph;
using i64 = std::int64_t;

namespace {

const ConvAlgorithm& algo(const char* name) {
  const ConvAlgorithm* a = AlgorithmRegistry::builtin().find(name);
  REQUIRE(a != nullptr);
  return *a;
}

struct Spec {
  ConvDirection dir = ConvDirection::forward;
  std::vector<i64> x, w;  // (N, C, spatial...), (K, C/G, spatial...)
  std::vector<i64> stride, dilation;
  BorderMode border;
  i64 groups = 1;
  bool flip = false;
  DType dtype = DType::float64;
};

ConvProblem make(const Spec& s) {
  ConvParams prm;
  prm.ndim = static_cast<int>(s.x.size()) - 2;
  prm.border = s.border;
  prm.stride = s.stride;
  prm.dilation = s.dilation;
  prm.groups = s.groups;
  prm.filter_flip = s.flip;
  return ConvProblem::make(s.dir, prm, s.x, s.w, s.dtype, "test");
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, AlignedFree>;
Buffer alloc(std::size_t bytes) {
  const std::size_t n = (std::max<std::size_t>(bytes, 64) + 63) / 64 * 64;
  return Buffer(std::aligned_alloc(64, n));
}

template <class T>
std::vector<T> random_vec(i64 n, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = static_cast<T>(d(rng));
  return v;
}

/// The output operand of p's direction: y, x or w.
template <class T>
std::vector<T>& output_of(const ConvProblem& p, std::vector<T>& x, std::vector<T>& w, std::vector<T>& y) {
  return p.direction == ConvDirection::forward ? y : p.direction == ConvDirection::grad_inputs ? x : w;
}

/// Runs `a` on the operands with a workspace of its size (null when that is 0), the output
/// poisoned first so a partial write shows up.
template <class T>
void run_poisoned(const ConvAlgorithm& a, const ConvProblem& p, ThreadPool* pool, std::vector<T>& x,
                  std::vector<T>& w, std::vector<T>& y) {
  std::vector<T>& out = output_of(p, x, w, y);
  std::fill(out.begin(), out.end(), static_cast<T>(NAN));
  const std::size_t ws = a.workspace_bytes(p);
  Buffer wbuf = alloc(ws);
  ConvContext ctx;
  ctx.pool = pool;
  ctx.workspace = ws > 0 ? wbuf.get() : nullptr;  // none at all where none is needed
  ctx.workspace_bytes = ws;
  a.run(p, ConvTensors{x.data(), w.data(), y.data(), {}}, ctx);
}

/// Runs `a` and the reference on random operands; returns max|diff| / max|ref|.
template <class T>
double rel_error(const ConvAlgorithm& a, const ConvProblem& p, ThreadPool* pool) {
  std::mt19937 rng(1234);
  auto x = random_vec<T>(p.x_numel(), rng), w = random_vec<T>(p.w_numel(), rng),
       y = random_vec<T>(p.y_numel(), rng);
  auto rx = x, rw = w, ry = y;
  reference_conv(p, ConvTensors{rx.data(), rw.data(), ry.data(), {}});
  run_poisoned(a, p, pool, x, w, y);
  const std::vector<T>& out = output_of(p, x, w, y);
  const std::vector<T>& ref = output_of(p, rx, rw, ry);
  double md = 0, mr = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(out[i]) - static_cast<double>(ref[i]));
    md = std::isnan(d) ? INFINITY : std::max(md, d);
    mr = std::max(mr, std::abs(static_cast<double>(ref[i])));
  }
  return mr > 0 ? md / mr : md;
}

/// `pool` may be null: the algorithm then runs on the calling thread only.
double rel_error(const ConvAlgorithm& a, const ConvProblem& p, ThreadPool* pool) {
  return p.dtype == DType::float64 ? rel_error<double>(a, p, pool) : rel_error<float>(a, p, pool);
}
double rel_error(const ConvAlgorithm& a, const ConvProblem& p) {
  return rel_error(a, p, &ThreadPool::default_pool());
}

constexpr ConvDirection kDirs[] = {ConvDirection::forward, ConvDirection::grad_inputs,
                                   ConvDirection::grad_weights};

void check_all_dirs(const char* name, Spec s, double tol64, double tol32) {
  const ConvAlgorithm& a = algo(name);
  for (DType dt : {DType::float64, DType::float32})
    for (ConvDirection d : kDirs) {
      s.dir = d;
      s.dtype = dt;
      const ConvProblem p = make(s);
      INFO(name << " " << p.key());
      const Status st = a.applicable(p);
      INFO(st.reason());
      REQUIRE(st.is_ok());
      const double err = rel_error(a, p);
      CHECK(err <= (dt == DType::float64 ? tol64 : tol32));
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// cpu.fft

TEST_CASE("cpu.fft 1D odd widths, dilation, padding, all directions", "[cpu][fft]") {
  for (bool flip : {false, true}) {
    check_all_dirs("cpu.fft", {.x = {2, 3, 17}, .w = {4, 3, 5}, .border = BorderMode("valid"), .flip = flip}, 1e-9, 2e-5);
    check_all_dirs("cpu.fft", {.x = {1, 2, 23}, .w = {3, 2, 4}, .dilation = {3}, .border = BorderMode("full"), .flip = flip}, 1e-9, 2e-5);
    check_all_dirs("cpu.fft", {.x = {3, 1, 1}, .w = {2, 1, 1}, .border = BorderMode("valid"), .flip = flip}, 1e-9, 2e-5);
    check_all_dirs("cpu.fft", {.x = {2, 2, 9}, .w = {2, 2, 3}, .border = BorderMode({std::pair<i64, i64>{7, 0}}), .flip = flip}, 1e-9, 2e-5);
  }
}

TEST_CASE("cpu.fft 2D odd and even sizes, asymmetric pads, groups, dilation", "[cpu][fft]") {
  check_all_dirs("cpu.fft", {.x = {2, 4, 13, 11}, .w = {6, 2, 3, 5}, .border = BorderMode("half"), .groups = 2, .flip = true}, 1e-9, 2e-5);
  check_all_dirs("cpu.fft", {.x = {1, 3, 15, 16}, .w = {2, 3, 3, 3}, .dilation = {2, 3}, .border = BorderMode({{1, 4}, {0, 2}}), .flip = false}, 1e-9, 2e-5);
  check_all_dirs("cpu.fft", {.x = {2, 6, 7, 9}, .w = {6, 1, 2, 4}, .border = BorderMode("full"), .groups = 6, .flip = true}, 1e-9, 2e-5);
  check_all_dirs("cpu.fft", {.x = {3, 5, 8, 8}, .w = {7, 5, 1, 1}, .border = BorderMode("valid")}, 1e-9, 2e-5);
}

TEST_CASE("cpu.fft 3D", "[cpu][fft]") {
  check_all_dirs("cpu.fft", {.x = {2, 3, 5, 7, 6}, .w = {4, 3, 3, 2, 3}, .border = BorderMode("half"), .flip = true}, 1e-9, 2e-5);
  check_all_dirs("cpu.fft", {.x = {1, 4, 6, 5, 9}, .w = {2, 2, 2, 3, 2}, .dilation = {2, 1, 3}, .border = BorderMode({{0, 1}, {2, 2}, {3, 0}}), .groups = 2}, 1e-9, 2e-5);
}

TEST_CASE("cpu.fft larger 2D layer in float32 stays within tolerance", "[cpu][fft]") {
  const ConvAlgorithm& a = algo("cpu.fft");
  // One image under the sanitizers: the float64 reference dominates (about 30x slower there).
  const i64 batch = convgraph::test::sanitized_build() ? 1 : 4;
  for (ConvDirection d : kDirs) {
    const ConvProblem p = make({.dir = d, .x = {batch, 32, 30, 30}, .w = {32, 32, 5, 5}, .border = BorderMode("half"), .dtype = DType::float32});
    INFO(p.key());
    CHECK(rel_error(a, p) <= 2e-5);
  }
}

TEST_CASE("cpu.fft declines stride > 1 and over-limit workspace", "[cpu][fft]") {
  const ConvAlgorithm& a = algo("cpu.fft");
  REQUIRE(std::string(a.name()) == "cpu.fft");
  ConvProblem p = make({.x = {1, 2, 10, 10}, .w = {2, 2, 3, 3}, .stride = {2, 1}});
  Status s = a.applicable(p);
  CHECK_FALSE(s.is_ok());
  CHECK(s.reason().find("stride") != std::string::npos);
  p = make({.x = {1, 2, 10, 10}, .w = {2, 2, 3, 3}});
  CHECK(a.applicable(p).is_ok());
  CHECK(a.workspace_bytes(p) > 0);
  p.workspace_limit = 1000;
  s = a.applicable(p);
  CHECK_FALSE(s.is_ok());
  CHECK(s.reason().find("workspace") != std::string::npos);
  // A tighter limit that still fits one image per chunk is honoured, not declined.
  ConvProblem q = make({.x = {16, 8, 20, 20}, .w = {4, 8, 3, 3}});
  const std::size_t full = a.workspace_bytes(q);
  q.workspace_limit = full * 3 / 4;
  REQUIRE(a.applicable(q).is_ok());
  CHECK(a.workspace_bytes(q) <= q.workspace_limit);
  CHECK(rel_error(a, q) <= 1e-9);
  const auto tags = a.tags();
  CHECK(std::find(tags.begin(), tags.end(), "conv_fft") != tags.end());
  CHECK(std::find(tags.begin(), tags.end(), "fast_run") == tags.end());
}

TEST_CASE("cpu.fft splits the filters into chunks under a tight workspace limit", "[cpu][fft]") {
  // Filter spectra dominate this workspace; a limit below them forces filter chunks (whole
  // groups for G > 1, ranges of filters whose grad-inputs contributions add up for G == 1).
  const ConvAlgorithm& a = algo("cpu.fft");
  for (i64 groups : {1, 4})
    for (ConvDirection d : kDirs)
      for (DType dt : {DType::float64, DType::float32}) {
        ConvProblem p = make({.dir = d, .x = {3, 16, 11, 13}, .w = {64, 16 / groups, 5, 4}, .border = BorderMode("half"),
                              .groups = groups, .flip = true, .dtype = dt});
        const std::size_t full = a.workspace_bytes(p);
        p.workspace_limit = full / 2;
        INFO(p.key() << " full workspace " << full);
        REQUIRE(a.applicable(p).is_ok());
        CHECK(a.workspace_bytes(p) <= p.workspace_limit);
        CHECK(rel_error(a, p) <= (dt == DType::float64 ? 1e-9 : 2e-5));
      }
}

TEST_CASE("fft, winograd and conv3d2d run with a one-thread pool and without a pool", "[cpu][fft][winograd][conv3d2d]") {
  ThreadPool one(1);
  for (ConvDirection d : kDirs) {
    const ConvProblem q = make({.dir = d, .x = {2, 3, 9, 10}, .w = {4, 3, 3, 3}, .border = BorderMode(1), .dtype = DType::float32});
    CHECK(rel_error(algo("cpu.winograd"), q, &one) <= 5e-5);
    CHECK(rel_error(algo("cpu.winograd"), q, nullptr) <= 5e-5);
  }
  for (ConvDirection d : {ConvDirection::forward, ConvDirection::grad_inputs}) {
    const ConvProblem p = make({.dir = d, .x = {2, 3, 9, 10}, .w = {4, 3, 3, 3}, .border = BorderMode(1), .flip = true});
    CHECK(rel_error(algo("cpu.fft"), p, &one) <= 1e-9);
    CHECK(rel_error(algo("cpu.fft"), p, nullptr) <= 1e-9);
    const ConvProblem r = make({.dir = d, .x = {2, 3, 4, 5, 6}, .w = {4, 3, 2, 3, 3}, .border = BorderMode(1)});
    CHECK(rel_error(algo("cpu.conv3d2d"), r, &one) <= 1e-9);
    CHECK(rel_error(algo("cpu.conv3d2d"), r, nullptr) <= 1e-9);
  }
}

// ---------------------------------------------------------------------------------------
// cpu.conv3d2d

TEST_CASE("cpu.conv3d2d matches the reference in all directions", "[cpu][conv3d2d]") {
  for (bool flip : {false, true}) {
    check_all_dirs("cpu.conv3d2d", {.x = {2, 3, 5, 6, 7}, .w = {4, 3, 3, 3, 2}, .border = BorderMode("half"), .flip = flip}, 1e-9, 1e-5);
    // Depth stride, dilation and asymmetric padding are pure index arithmetic here.
    check_all_dirs("cpu.conv3d2d", {.x = {2, 4, 9, 5, 6}, .w = {6, 2, 2, 3, 3}, .stride = {2, 1, 2}, .dilation = {3, 1, 1},
                                    .border = BorderMode({{2, 1}, {1, 1}, {0, 2}}), .groups = 2, .flip = flip}, 1e-9, 1e-5);
    check_all_dirs("cpu.conv3d2d", {.x = {1, 2, 3, 4, 4}, .w = {3, 2, 3, 1, 1}, .border = BorderMode({{4, 5}, {0, 0}, {0, 0}}), .flip = flip}, 1e-9, 1e-5);
  }
}

TEST_CASE("cpu.conv3d2d stacks depths within a tight workspace limit", "[cpu][conv3d2d]") {
  const ConvAlgorithm& a = algo("cpu.conv3d2d");
  ConvProblem p = make({.x = {2, 3, 8, 6, 6}, .w = {4, 3, 3, 3, 3}, .border = BorderMode(1)});
  const std::size_t full = a.workspace_bytes(p);
  p.workspace_limit = full / 3;
  REQUIRE(a.applicable(p).is_ok());
  CHECK(a.workspace_bytes(p) <= p.workspace_limit);
  CHECK(rel_error(a, p) <= 1e-9);
  p.workspace_limit = 16;
  const Status s = a.applicable(p);
  CHECK_FALSE(s.is_ok());
  CHECK(s.reason().find("workspace") != std::string::npos);
}

TEST_CASE("cpu.conv3d2d declines 2D problems", "[cpu][conv3d2d]") {
  const ConvAlgorithm& a = algo("cpu.conv3d2d");
  const Status s = a.applicable(make({.x = {1, 2, 8, 8}, .w = {2, 2, 3, 3}}));
  CHECK_FALSE(s.is_ok());
  CHECK(s.reason().find("3D only") != std::string::npos);
  const auto tags = a.tags();
  CHECK(tags == std::vector<std::string>{"conv3d2d"});
}

// ---------------------------------------------------------------------------------------
// cpu.winograd

namespace {
void check_winograd(Spec s, double tol32) {
  const ConvAlgorithm& a = algo("cpu.winograd");
  for (ConvDirection d : kDirs) {
    s.dir = d;
    s.dtype = DType::float32;
    const ConvProblem p = make(s);
    INFO(p.key());
    const Status st = a.applicable(p);
    INFO(st.reason());
    REQUIRE(st.is_ok());
    const double err = rel_error(a, p);
    CHECK(err <= tol32);
  }
}
}  // namespace

TEST_CASE("cpu.winograd F(4x4,3x3) matches the reference within the fp32 bound", "[cpu][winograd]") {
  for (bool flip : {false, true}) {
    check_winograd({.x = {2, 3, 8, 8}, .w = {4, 3, 3, 3}, .border = BorderMode(1), .flip = flip}, 5e-5);
    // Sizes that leave partial tiles, asymmetric and large pads (grad_inputs then crops).
    check_winograd({.x = {3, 5, 13, 17}, .w = {7, 5, 3, 3}, .border = BorderMode("valid"), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 4, 9, 70}, .w = {6, 4, 3, 3}, .border = BorderMode({{0, 2}, {3, 1}}), .flip = flip}, 5e-5);
    check_winograd({.x = {2, 2, 3, 3}, .w = {3, 2, 3, 3}, .border = BorderMode("full"), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 8, 6, 5}, .w = {8, 2, 3, 3}, .border = BorderMode({{4, 3}, {0, 5}}), .groups = 4, .flip = flip}, 5e-5);
    // Dilation: d0 x d1 undilated phases on strided sub-images, of unequal sizes here ...
    check_winograd({.x = {2, 3, 13, 11}, .w = {4, 3, 3, 3}, .dilation = {2, 2}, .border = BorderMode(2), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 4, 17, 10}, .w = {6, 2, 3, 3}, .dilation = {3, 2}, .border = BorderMode({{1, 4}, {0, 2}}),
                    .groups = 2, .flip = flip}, 5e-5);
    // ... of equal sizes (one engine run over the phases stacked as a batch: 8 phases here,
    // groups of 2, 2, 1 and 1 below) ...
    check_winograd({.x = {2, 3, 16, 12}, .w = {4, 3, 3, 3}, .dilation = {4, 2}, .border = BorderMode({{4, 4}, {2, 2}}),
                    .flip = flip}, 5e-5);
    check_winograd({.x = {1, 6, 10, 9}, .w = {4, 3, 3, 3}, .dilation = {3, 2}, .border = BorderMode({{3, 3}, {2, 2}}),
                    .groups = 2, .flip = flip}, 5e-5);
    // ... phases with no outputs (inputs no output reads: zero gradient) ...
    check_winograd({.x = {2, 2, 7, 5}, .w = {3, 2, 3, 3}, .dilation = {3, 2}, .border = BorderMode("valid"), .flip = flip}, 5e-5);
    // ... and outputs whose phase has no inputs (they read only padding).
    check_winograd({.x = {1, 2, 1, 5}, .w = {2, 2, 3, 3}, .dilation = {3, 1}, .border = BorderMode({{4, 2}, {1, 1}}), .flip = flip}, 5e-5);
    // 3D: the depth taps are channels; depth stride, dilation, padding (planes of padding),
    // groups, a 1x3x3 kernel, and a depth kernel deeper than the input.
    check_winograd({.x = {2, 3, 5, 9, 10}, .w = {4, 3, 3, 3, 3}, .border = BorderMode(1), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 4, 9, 7, 6}, .w = {6, 2, 2, 3, 3}, .stride = {2, 1, 1}, .dilation = {3, 1, 1},
                    .border = BorderMode({{2, 1}, {1, 1}, {0, 2}}), .groups = 2, .flip = flip}, 5e-5);
    check_winograd({.x = {2, 2, 3, 6, 5}, .w = {3, 2, 1, 3, 3}, .border = BorderMode({{0, 0}, {1, 1}, {1, 1}}), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 2, 2, 5, 5}, .w = {2, 2, 5, 3, 3}, .stride = {3, 1, 1}, .border = BorderMode({{3, 2}, {0, 0}, {2, 1}}),
                    .flip = flip}, 5e-5);
    // One depth tap and depth padding: the outer output planes read only padding planes
    // (a fuzz case: narrow images gathered their taps from such a plane's null pointer).
    check_winograd({.x = {1, 2, 8, 7, 7}, .w = {3, 2, 1, 3, 3}, .border = BorderMode(2), .flip = flip}, 5e-5);
    check_winograd({.x = {2, 1, 5, 6, 9}, .w = {2, 1, 1, 3, 3}, .stride = {2, 1, 1}, .border = BorderMode({{1, 0}, {1, 1}, {0, 2}}),
                    .flip = flip}, 5e-5);
  }
  // One image, one block: the output channels are split across tasks.
  check_winograd({.x = {1, 16, 7, 7}, .w = {50, 16, 3, 3}, .border = BorderMode(1)}, 5e-5);
  // Not under the sanitizers (about 30x slower, the float64 reference dominates): wider
  // channels and blocks of many tiles (a resnet_3x3_14-like slice).
  if (convgraph::test::sanitized_build()) return;
  check_winograd({.x = {2, 64, 28, 28}, .w = {32, 64, 3, 3}, .border = BorderMode(1)}, 5e-5);
  check_winograd({.x = {2, 256, 14, 14}, .w = {32, 256, 3, 3}, .border = BorderMode(1)}, 5e-5);
}

TEST_CASE("cpu.winograd with a transformed filter over half the L3: blocks of at least 128 tiles", "[cpu][winograd]") {
  // U (36 x 24 x 8 floats) over half of a 32 KiB L3: 294 tiles in blocks of 128 or more;
  // the grouped layer's U streams too, its 72 tiles one block.
  const convgraph::cpu::ScopedStreamL3 small_l3(32 << 10);
  check_winograd({.x = {6, 8, 28, 28}, .w = {24, 8, 3, 3}, .border = BorderMode(1)}, 5e-5);
  check_winograd({.x = {3, 4, 30, 9}, .w = {100, 2, 3, 3}, .border = BorderMode({{0, 1}, {2, 1}}), .groups = 2}, 5e-5);
}

TEST_CASE("cpu.winograd without gathers (Gather Data Sampling microcode) matches the reference", "[cpu][winograd]") {
  // The gather-free paths at the active level: the filter transform's copied taps and the
  // narrow images' phase lines (at AVX-512 the gathers otherwise take both).
  const convgraph::ScopedCpuGathers no_gathers(false);
  for (bool flip : {false, true}) {
    check_winograd({.x = {2, 3, 8, 8}, .w = {4, 3, 3, 3}, .border = BorderMode(1), .flip = flip}, 5e-5);
    check_winograd({.x = {3, 5, 13, 17}, .w = {7, 5, 3, 3}, .border = BorderMode("valid"), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 8, 6, 5}, .w = {8, 2, 3, 3}, .border = BorderMode({{4, 3}, {0, 5}}), .groups = 4, .flip = flip}, 5e-5);
    check_winograd({.x = {2, 3, 13, 11}, .w = {4, 3, 3, 3}, .dilation = {2, 2}, .border = BorderMode(2), .flip = flip}, 5e-5);
    check_winograd({.x = {1, 2, 8, 7, 7}, .w = {3, 2, 1, 3, 3}, .border = BorderMode(2), .flip = flip}, 5e-5);
  }
  check_winograd({.x = {2, 20, 9, 30}, .w = {35, 20, 3, 3}, .border = BorderMode(1)}, 5e-5);
}

/// Runs float32 `a` on `p` (fixed random operands) and returns its output.
std::vector<float> run_float(const ConvAlgorithm& a, const ConvProblem& p, ThreadPool* pool) {
  std::mt19937 rng(99);
  auto x = random_vec<float>(p.x_numel(), rng), w = random_vec<float>(p.w_numel(), rng),
       y = random_vec<float>(p.y_numel(), rng);
  run_poisoned(a, p, pool, x, w, y);
  return output_of(p, x, w, y);
}

/// p's result with no pool, bit for bit, with 1, 2 and 3 threads too.
void check_same_bits_on_any_pool(const ConvAlgorithm& a, const ConvProblem& p) {
  ThreadPool one(1), two(2), three(3);
  const std::vector<float> first = run_float(a, p, nullptr);
  for (ThreadPool* pool : {&one, &two, &three}) {
    const std::vector<float> other = run_float(a, p, pool);
    INFO(pool->size() << " threads");
    CHECK(std::memcmp(first.data(), other.data(), first.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu.winograd grad weights in chunks: every workspace limit, the same bits on any pool", "[cpu][winograd]") {
  // Enough tiles (and channels) for several chunks of tiles at full workspace on any L2 up
  // to 2 MiB: with 2..8 hardware threads each chunk then goes to a slice with its own S.
  // Smaller workspace limits shrink the chunks, then fall back to V, D and S shared by the
  // threads. Every plan must match the reference and give the same bits with no pool and
  // with 1, 2 or 3 threads (the slices are per hardware thread, not per pool thread).
  const ConvAlgorithm& a = algo("cpu.winograd");
  const i64 batch = convgraph::test::sanitized_build() ? 2 : 5;
  ConvProblem p = make({.dir = ConvDirection::grad_weights, .x = {batch, 20, 46, 45}, .w = {24, 20, 3, 3},
                        .border = BorderMode(1), .dtype = DType::float32});
  const std::size_t full = a.workspace_bytes(p);
  ThreadPool two(2);
  int plans = 0;
  for (std::size_t limit = full; plans < 8; limit = limit * 3 / 5) {
    p.workspace_limit = limit;
    if (!a.applicable(p).is_ok()) break;
    INFO("workspace limit " << limit << " of " << full);
    CHECK(a.workspace_bytes(p) <= limit);
    CHECK(rel_error(a, p, &two) <= 5e-5);
    check_same_bits_on_any_pool(a, p);
    ++plans;
  }
  CHECK(plans >= 3);
}

TEST_CASE("cpu.winograd grad weights in one chunk: halves of channel blocks, the same bits on any pool", "[cpu][winograd]") {
  // Few tiles (at most 18 here): one chunk, computed per block of 64 x 64 channels in two
  // halves of the output-channel blocks, each with its own input-channel half. Odd block
  // counts, groups (the halves split within and between groups), 3D (depth taps as
  // channels), flips, and one block (an empty second half) must all match the reference
  // and give the same bits with no pool and with 1, 2 or 3 threads.
  const ConvAlgorithm& a = algo("cpu.winograd");
  const std::vector<Spec> specs = {
      {.dir = ConvDirection::grad_weights, .x = {2, 130, 10, 10}, .w = {136, 130, 3, 3}, .border = BorderMode(1),
       .dtype = DType::float32},
      {.dir = ConvDirection::grad_weights, .x = {2, 140, 9, 9}, .w = {132, 70, 3, 3}, .border = BorderMode(1),
       .groups = 2, .flip = true, .dtype = DType::float32},
      {.dir = ConvDirection::grad_weights, .x = {1, 24, 4, 8, 8}, .w = {72, 24, 3, 3, 3}, .border = BorderMode(1),
       .flip = true, .dtype = DType::float32},
      {.dir = ConvDirection::grad_weights, .x = {1, 3, 6, 7}, .w = {1, 3, 3, 3}, .dtype = DType::float32},
  };
  ThreadPool two(2);
  for (const Spec& s : specs) {
    const ConvProblem p = make(s);
    INFO(p.key());
    REQUIRE(a.applicable(p).is_ok());
    CHECK(rel_error(a, p, &two) <= 5e-5);
    check_same_bits_on_any_pool(a, p);
  }
}

TEST_CASE("cpu.winograd dilated: phases batched, or one at a time under a workspace limit", "[cpu][winograd]") {
  // Dilation (3, 2) on 10 x 9: six phases, in groups of equal sub-images of 2, 2, 1 and 1,
  // each group one engine run at full workspace; under a tighter limit each phase runs
  // alone in a shared buffer. Every plan, every direction: the reference, and the same bits
  // with no pool and with 1, 2 or 3 threads.
  const ConvAlgorithm& a = algo("cpu.winograd");
  ThreadPool two(2);
  for (ConvDirection dir : kDirs) {
    ConvProblem p = make({.dir = dir, .x = {3, 6, 10, 9}, .w = {8, 6, 3, 3}, .dilation = {3, 2},
                          .border = BorderMode({{3, 3}, {2, 2}}), .dtype = DType::float32});
    // Each plan (workspace size) once, down to the smallest that applies.
    std::size_t last = 0;
    int plans = 0;
    for (std::size_t limit = a.workspace_bytes(p); limit > 0; limit = limit * 15 / 16) {
      p.workspace_limit = limit;
      if (!a.applicable(p).is_ok()) break;
      const std::size_t need = a.workspace_bytes(p);
      CHECK(need <= limit);
      if (need == last) continue;
      last = need;
      INFO(p.key() << ", workspace " << need);
      CHECK(rel_error(a, p, &two) <= 5e-5);
      check_same_bits_on_any_pool(a, p);
      ++plans;
    }
    CHECK(plans >= 2);
  }
}

TEST_CASE("cpu.winograd dilated with every phase empty needs no workspace", "[cpu][winograd]") {
  // 2x1 images, width dilation 2, pads past the kernel: every output reads only padding
  // along the width, so each phase is empty, forward and grad inputs need 0 bytes and the
  // written side is all zeros (it refused to run without a workspace buffer).
  const ConvAlgorithm& a = algo("cpu.winograd");
  for (ConvDirection dir : kDirs) {
    const ConvProblem p = make({.dir = dir, .x = {2, 17, 2, 1}, .w = {13, 17, 3, 3}, .dilation = {1, 2},
                                .border = BorderMode({{3, 2}, {3, 1}}), .dtype = DType::float32});
    INFO(p.key());
    REQUIRE(a.applicable(p).is_ok());
    if (dir != ConvDirection::grad_weights) CHECK(a.workspace_bytes(p) == 0);  // grad weights sums groups
    CHECK(rel_error(a, p, nullptr) <= 5e-5);
  }
}

TEST_CASE("cpu.winograd declines what it does not do", "[cpu][winograd]") {
  const ConvAlgorithm& a = algo("cpu.winograd");
  auto reason = [&](const Spec& s) {
    const Status st = a.applicable(make(s));
    CHECK_FALSE(st.is_ok());
    return st.reason();
  };
  CHECK(reason({.x = {1, 2, 9, 9}, .w = {2, 2, 3, 3}, .stride = {2, 2}, .dtype = DType::float32}).find("stride") != std::string::npos);
  CHECK(reason({.x = {1, 2, 9, 9}, .w = {2, 2, 5, 5}, .dtype = DType::float32}).find("5x5") != std::string::npos);
  CHECK(reason({.x = {1, 2, 9}, .w = {2, 2, 3}, .dtype = DType::float32}).find("2D") != std::string::npos);
  CHECK(reason({.x = {1, 2, 4, 9, 9}, .w = {2, 2, 3, 3, 3}, .dilation = {1, 1, 2}, .dtype = DType::float32})
            .find("3D dilation 1x2") != std::string::npos);
  CHECK(reason({.x = {1, 2, 4, 9, 9}, .w = {2, 2, 3, 3, 3}, .stride = {1, 2, 1}, .dtype = DType::float32})
            .find("stride 2x1") != std::string::npos);
  ConvProblem dil = make({.dir = ConvDirection::grad_weights, .x = {2, 4, 9, 9}, .w = {4, 4, 3, 3}, .dilation = {1, 2},
                          .dtype = DType::float32});
  dil.workspace_limit = 256;  // below its gathered sub-images
  CHECK(a.applicable(dil).reason().find("dilation 1x2 needs") != std::string::npos);
  CHECK(reason({.x = {1, 2, 9, 9}, .w = {2, 2, 3, 3}, .dtype = DType::float64}).find("float32") != std::string::npos);
  // A limit below the default blocking shrinks the blocks; one far below declines.
  ConvProblem limited = make({.x = {4, 8, 40, 40}, .w = {8, 8, 3, 3}, .border = BorderMode(1), .dtype = DType::float32});
  REQUIRE(a.applicable(limited).is_ok());
  limited.workspace_limit = a.workspace_bytes(limited) - 1;
  REQUIRE(a.applicable(limited).is_ok());
  CHECK(a.workspace_bytes(limited) <= limited.workspace_limit);
  CHECK(rel_error(a, limited) <= 5e-5);
  limited.workspace_limit = 4096;
  const Status ws = a.applicable(limited);
  CHECK_FALSE(ws.is_ok());
  CHECK(ws.reason().find("workspace") != std::string::npos);
  // grad_weights' chunks of tiles shrink under a limit too (accumulating over chunks).
  ConvProblem gw = make({.dir = ConvDirection::grad_weights, .x = {3, 8, 20, 24}, .w = {8, 8, 3, 3},
                         .border = BorderMode(1), .flip = true, .dtype = DType::float32});
  const std::size_t full = a.workspace_bytes(gw);
  gw.workspace_limit = full - 1;
  REQUIRE(a.applicable(gw).is_ok());
  CHECK(a.workspace_bytes(gw) <= gw.workspace_limit);
  CHECK(rel_error(a, gw) <= 5e-5);
  gw.workspace_limit = 4096;
  CHECK(a.applicable(gw).reason().find("workspace") != std::string::npos);
  // Too small a workspace at run time is a MemoryError naming the sizes.
  gw.workspace_limit = std::numeric_limits<std::size_t>::max();
  std::vector<float> x(static_cast<std::size_t>(gw.x_numel())), w(static_cast<std::size_t>(gw.w_numel())),
      y(static_cast<std::size_t>(gw.y_numel()));
  std::vector<float> small(16);
  ConvContext ctx;
  ctx.workspace = small.data();
  ctx.workspace_bytes = small.size() * sizeof(float);
  CHECK_THROWS_AS(a.run(gw, ConvTensors{x.data(), w.data(), y.data(), {}}, ctx), MemoryError);
  CHECK_THROWS_WITH(a.run(gw, ConvTensors{x.data(), w.data(), y.data(), {}}, ctx),
                    Catch::Contains("cpu.winograd: workspace of 64 bytes, need"));
  const auto tags = a.tags();
  CHECK(std::find(tags.begin(), tags.end(), "conv_winograd") != tags.end());
  CHECK(std::find(tags.begin(), tags.end(), "fast_run") != tags.end());
}

TEST_CASE("cpu.winograd grad weights on a realistic layer stays within the fp32 bound", "[cpu][winograd]") {
  // Each weight's transform-domain sum runs over N x 49 tiles here: the case where
  // rounding could grow with the batch. One image under the sanitizers (the float64
  // reference dominates, about 30x slower there).
  const ConvAlgorithm& a = algo("cpu.winograd");
  const i64 batch = convgraph::test::sanitized_build() ? 1 : 8;
  const ConvProblem p = make({.dir = ConvDirection::grad_weights, .x = {batch, 32, 28, 28}, .w = {32, 32, 3, 3},
                              .border = BorderMode(1), .dtype = DType::float32});
  const double err = rel_error(a, p);
  INFO(p.key() << " relative error " << err);
  CHECK(err <= 5e-5);
  std::printf("cpu.winograd %s: relative error %.3g\n", p.key().c_str(), err);
}
