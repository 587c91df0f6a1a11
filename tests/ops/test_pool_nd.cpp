// Pooling over 1, 2 and 3 trailing axes (one op for every rank): forward and both
// gradients against a brute-force reference that walks each window of the padded grid,
// over sweeps of windows, strides, paddings and border modes, in the serial and the
// parallel paths; verify_grad for every op; bad options and ranks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <convgraph/convgraph.hpp>

#include "convgraph/backends/cpu/cpu_isa.hpp"
#include "ops/pool_internal.hpp"
#include "support/conv_cases.hpp"  // runnable_cpu_levels
#include "support/pool_reference.hpp"
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <utility>

using namespace convgraph;
using convgraph::test::distinct_tensor;
using convgraph::test::starts;

namespace {

/// Steps an index vector through the box [0, ends) in row-major order; false at the end.
bool next_index(std::vector<std::int64_t>& i, const std::vector<std::int64_t>& ends) {
  for (std::size_t a = i.size(); a-- > 0;) {
    if (++i[a] < ends[a]) return true;
    i[a] = 0;
  }
  return false;
}

/// Calls fn(output element, input elements of the window in row-major order, padded-cell
/// count) for every window of every plane; returns the output shape (empty if none).
Shape for_windows(const Shape& xs, const PoolOptions& o,
                  const std::function<void(std::int64_t, const std::vector<std::int64_t>&, std::int64_t)>& fn) {
  const std::size_t d = o.window.size(), lead = xs.size() - d;
  const auto stride = o.stride.empty() ? o.window : o.stride;
  const auto pad = o.padding.empty() ? std::vector<std::int64_t>(d, 0) : o.padding;
  std::vector<std::int64_t> n(d), win(d), outs(d);
  std::vector<std::vector<std::int64_t>> st(d);
  Shape ys(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(lead));
  std::int64_t planes = 1, volume = 1;
  for (std::size_t a = 0; a < lead; ++a) planes *= xs[a];
  for (std::size_t a = 0; a < d; ++a) {
    n[a] = xs[lead + a];
    win[a] = o.window[a];
    st[a] = starts(n[a], o.window[a], stride[a], pad[a], o.ignore_border);
    outs[a] = static_cast<std::int64_t>(st[a].size());
    if (outs[a] == 0) return {};
    ys.push_back(outs[a]);
    volume *= n[a];
  }
  std::int64_t at = 0;
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    std::vector<std::int64_t> oi(d, 0);
    do {
      std::vector<std::int64_t> cells_in, wi(d, 0);
      std::int64_t cells = 0;
      do {
        bool in_padded = true, inside = true;
        std::int64_t flat = 0;
        for (std::size_t a = 0; a < d; ++a) {
          const std::int64_t pc = st[a][static_cast<std::size_t>(oi[a])] + wi[a];
          in_padded = in_padded && pc < n[a] + 2 * pad[a];
          const std::int64_t c = pc - pad[a];
          inside = inside && c >= 0 && c < n[a];
          flat = flat * n[a] + c;
        }
        if (!in_padded) continue;
        ++cells;
        if (inside) cells_in.push_back(pl * volume + flat);
      } while (next_index(wi, win));
      fn(at++, cells_in, cells);
    } while (next_index(oi, outs));
  }
  return ys;
}

struct Reference {
  Tensor max, avg, gx_max, gx_avg;
};

/// Forward outputs and the gradients for output gradient gy (shaped like the outputs).
Reference reference(const Tensor& x, const PoolOptions& o, const Tensor& gy) {
  Reference r;
  r.gx_max = Tensor::zeros(DType::float64, x.shape());
  r.gx_avg = Tensor::zeros(DType::float64, x.shape());
  std::vector<double> mx, av;
  const Shape ys = for_windows(x.shape(), o, [&](std::int64_t j, const std::vector<std::int64_t>& in, std::int64_t cells) {
    std::int64_t best = in[0];
    double sum = 0;
    for (std::int64_t i : in) {
      if (x.get(i) > x.get(best)) best = i;
      sum += x.get(i);
    }
    const double count = static_cast<double>(o.include_padding_in_average ? cells : std::ssize(in));
    mx.push_back(x.get(best));
    av.push_back(sum / count);
    if (!gy.defined()) return;
    r.gx_max.set(best, r.gx_max.get(best) + gy.get(j));
    for (std::int64_t i : in) r.gx_avg.set(i, r.gx_avg.get(i) + gy.get(j) / count);
  });
  r.max = Tensor::from(mx, ys, DType::float64);
  r.avg = Tensor::from(av, ys, DType::float64);
  return r;
}

Shape pooled_shape(const Shape& xs, const PoolOptions& o) { return for_windows(xs, o, [](auto, const auto&, auto) {}); }

std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

std::string describe(const PoolOptions& o) {
  return msg("window ", list(o.window), " stride ", list(o.stride), " pad ", list(o.padding), " ignore_border ",
             o.ignore_border, " inc_pad ", o.include_padding_in_average);
}

/// Forward and both gradient ops in one function against the reference; false when the
/// options give no output for this shape.
bool check_against_reference(const Shape& shape, const PoolOptions& o, DType dt, unsigned seed) {
  const Shape ys = pooled_shape(shape, o);
  if (ys.empty()) return false;
  INFO(shape_to_string(shape) << " " << describe(o) << " " << dtype_name(dt));
  const Tensor x = distinct_tensor(shape, seed), gy = distinct_tensor(ys, seed + 1);
  Var vx = input(dt, shape), vg = input(dt, ys);
  const auto out = compile({vx, vg}, {max_pool(vx, o), avg_pool(vx, o), max_pool_grad(vx, vg, o),
                                      avg_pool_grad(vx, vg, o)})({x.astype(dt), gy.astype(dt)});
  // float32: round the operands first so only the kernel's own rounding remains.
  const Reference want = reference(x.astype(dt).astype(DType::float64), o, gy.astype(dt).astype(DType::float64));
  // float32: a few roundings of values as large as the inputs (the ramp grows with size).
  double scale = 0;
  for (const Tensor* t : {&x, &gy})
    for (std::int64_t i = 0; i < t->numel(); ++i) scale = std::max(scale, std::abs(t->get(i)));
  const double tol = dt == DType::float32 ? 1e-6 * scale : 1e-12;
  REQUIRE(out[0].shape() == ys);
  CHECK(max_abs_diff(out[0].astype(DType::float64), want.max) == 0);
  CHECK(max_abs_diff(out[1].astype(DType::float64), want.avg) <= tol);
  CHECK(max_abs_diff(out[2].astype(DType::float64), want.gx_max) <= tol);
  CHECK(max_abs_diff(out[3].astype(DType::float64), want.gx_avg) <= tol);
  return true;
}

PoolOptions options(std::vector<std::int64_t> w, std::vector<std::int64_t> s, std::vector<std::int64_t> p, bool ib,
                    bool inc = false) {
  return PoolOptions{std::move(w), std::move(s), std::move(p), ib, inc};
}

/// Options with every pooled axis alike (the padding only where it is below the window).
std::vector<PoolOptions> sweep(std::size_t d, const std::vector<std::vector<std::int64_t>>& windows) {
  std::vector<PoolOptions> out;
  for (const auto& w : windows)
    for (std::int64_t s : {1, 2, 3})
      for (std::int64_t p : {0, 1})
        for (bool ib : {true, false})
          for (bool inc : {false, true}) {
            if (p >= *std::min_element(w.begin(), w.end()) || (p > 0 && !ib) || (inc && p == 0 && ib)) continue;
            std::vector<std::int64_t> st(d, s);
            if (d > 1) st[0] = 4 - s;  // strides differ between axes
            out.push_back(options(w, st, std::vector<std::int64_t>(d, p), ib, inc));
          }
  return out;
}

}  // namespace

TEST_CASE("pool nd: 1-D, 2-D and 3-D pooling and gradients match the reference", "[ops][pool]") {
  int checked = 0;
  for (const auto& o : sweep(1, {{1}, {2}, {3}, {4}}))
    for (const Shape& shape : {Shape{2, 3, 7}, Shape{9}, Shape{1, 1, 2}})
      checked += check_against_reference(shape, o, DType::float64, 31);
  for (const auto& o : sweep(2, {{2, 2}, {3, 2}, {1, 3}}))
    for (const Shape& shape : {Shape{2, 2, 5, 7}, Shape{4, 6}}) checked += check_against_reference(shape, o, DType::float64, 32);
  for (const auto& o : sweep(3, {{2, 2, 2}, {3, 2, 1}, {1, 3, 2}, {2, 3, 3}}))
    for (const Shape& shape : {Shape{2, 5, 4, 6}, Shape{1, 2, 4, 5, 3}})
      checked += check_against_reference(shape, o, DType::float64, 33);
  CHECK(checked > 250);
}

TEST_CASE("pool nd: large inputs take the parallel row and plane paths, float32", "[ops][pool]") {
  // Disjoint windows (parallel over output rows), overlapping ones (over planes), padding,
  // a stride larger than the window (gaps that the gradient must zero) and partial windows.
  CHECK(check_against_reference({2, 16, 8, 12, 12}, options({2, 2, 2}, {}, {}, true), DType::float32, 41));
  CHECK(check_against_reference({2, 16, 8, 12, 12}, options({3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true), DType::float32, 42));
  CHECK(check_against_reference({4, 20, 24, 24}, options({2, 2}, {}, {}, true), DType::float32, 43));
  CHECK(check_against_reference({8, 20, 23, 25}, options({2, 3}, {3, 4}, {}, false), DType::float32, 44));
  CHECK(check_against_reference({4, 16, 31, 29}, options({3, 3}, {2, 2}, {1, 1}, true, true), DType::float32, 45));
  CHECK(check_against_reference({16, 40, 97}, options({3}, {2}, {1}, true), DType::float64, 46));
  CHECK(check_against_reference({16, 40, 96}, options({2}, {}, {}, true), DType::float32, 47));
  // 3x3 windows of stride 2 (float32: the shared-row path; tasks start mid-plane), and float64.
  CHECK(check_against_reference({8, 16, 33, 34}, options({3, 3}, {2, 2}, {}, false), DType::float32, 48));
  CHECK(check_against_reference({4, 16, 32, 32}, options({3, 3}, {2, 2}, {1, 1}, true), DType::float32, 49));
  CHECK(check_against_reference({4, 16, 31, 29}, options({3, 3}, {2, 2}, {1, 1}, true), DType::float64, 50));
  CHECK(check_against_reference({4, 16, 32, 30}, options({3, 3}, {2, 2}, {}, true, true), DType::float64, 51));
}

TEST_CASE("pool nd: defaults, int dtypes, ties and NaN", "[ops][pool]") {
  Var v1 = input(DType::float64, {2, 6}), v3 = input(DType::float64, {1, 4, 4, 4});
  CHECK(max_pool1d(v1).shape() == Shape{2, 3});
  CHECK(avg_pool3d(v3).shape() == Shape{1, 2, 2, 2});
  CHECK(max_pool(v3, options({2, 2, 2}, {}, {}, true)).node()->op->name() == "max_pool3d");
  CHECK(avg_pool(v1, options({3}, {}, {}, true)).node()->op->name() == "avg_pool1d");
  // int64 max pooling in 3-D, against the float reference.
  const Tensor x = distinct_tensor({2, 3, 4, 5}, 51);
  Tensor xi = x.astype(DType::float64);
  for (std::int64_t i = 0; i < xi.numel(); ++i) xi.set(i, std::round(10 * xi.get(i)));
  Var vi = input(DType::int64, x.shape());
  const PoolOptions o3 = options({2, 2, 3}, {1, 2, 2}, {}, false);
  const Tensor yi = compile({vi}, {max_pool(vi, o3)})({xi.astype(DType::int64)})[0];
  CHECK(max_abs_diff(yi.astype(DType::float64), reference(xi, o3, Tensor()).max) == 0);
  // Ties go to the first maximum in row-major order of the window (depth, row, column).
  Tensor ties = Tensor::zeros(DType::float64, {2, 2, 2});
  ties.set(3, 1.0);  // (0, 1, 1)
  ties.set(5, 1.0);  // (1, 0, 1)
  ties.set(6, 1.0);  // (1, 1, 0)
  Var vt = input(DType::float64, {2, 2, 2});
  const Tensor gt = compile({vt}, {grad(sum(max_pool3d(vt)), vt)})({ties})[0];
  CHECK(gt.to_vector() == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0});
  // A NaN is the maximum, and takes the gradient.
  const Tensor xn = Tensor::from({1, NAN, 3, 2}, {4}, DType::float64);
  Var vn = input(DType::float64, {4});
  const auto outn = compile({vn}, {max_pool1d(vn, options({4}, {}, {}, true)), grad(sum(max_pool1d(vn, options({4}, {}, {}, true))), vn)})({xn});
  CHECK(std::isnan(outn[0].get(0)));
  CHECK(outn[1].to_vector() == std::vector<double>{0, 1, 0, 0});
}

TEST_CASE("pool nd: disjoint windows of long rows: ties and NaN in max pooling and its gradient", "[ops][pool]") {
  // Rows of 8 or more windows that share no input take the vectorised gradient path. Few
  // distinct values make ties everywhere; some NaNs. The rule: a window's maximum is its
  // first NaN in row-major order, else its first maximum; the gradient goes there, and
  // inputs in no window (gaps, the end of a partial window) get 0.
  struct Case {
    Shape shape;
    PoolOptions o;
  };
  const std::vector<Case> cases = {
      {{3, 5, 13, 37}, options({2, 2}, {}, {}, true)},
      {{2, 3, 11, 40}, options({2, 3}, {3, 4}, {}, false)},
      {{2, 4, 10, 30}, options({2, 2}, {}, {1, 1}, true)},
      {{2, 4, 9, 31}, options({3, 3}, {}, {}, false)},
      {{4, 50}, options({3}, {3}, {}, false)},
      {{2, 3, 5, 6, 34}, options({2, 2, 2}, {}, {}, true)},
      {{2, 3, 5, 7, 40}, options({1, 2, 3}, {2, 3, 3}, {}, false)},
  };
  std::mt19937 rng(61);
  for (const Case& c : cases)
    for (DType dt : {DType::float32, DType::float64, DType::int32}) {
      const bool is_float = dt != DType::int32;
      Tensor x(DType::float64, c.shape);
      for (std::int64_t i = 0; i < x.numel(); ++i)
        x.set(i, is_float && rng() % 29 == 0 ? NAN : static_cast<double>(rng() % 4) - 1.0);
      if (is_float) {  // -inf then the lowest finite value: the maximum is the second
        x.set(0, -INFINITY);
        x.set(1, dt == DType::float32 ? -3.4028234663852886e38 : std::numeric_limits<double>::lowest());
      }
      std::vector<double> want_y, gyv;
      Tensor want_gx = Tensor::zeros(DType::float64, c.shape);
      const Shape ys = for_windows(c.shape, c.o, [&](std::int64_t j, const std::vector<std::int64_t>& in, std::int64_t) {
        std::int64_t best = in[0];
        for (std::int64_t i : in) {
          if (std::isnan(x.get(best))) break;
          if (std::isnan(x.get(i)) || x.get(i) > x.get(best)) best = i;
        }
        want_y.push_back(x.get(best));
        gyv.push_back(static_cast<double>(j % 251) + 1.0);
        want_gx.set(best, gyv.back());
      });
      INFO(shape_to_string(c.shape) << " " << describe(c.o) << " " << dtype_name(dt));
      Var vx = input(dt, c.shape), vg = input(dt, ys);
      const auto out = compile({vx, vg}, {max_pool(vx, c.o), max_pool_grad(vx, vg, c.o)})(
          {x.astype(dt), Tensor::from(gyv, ys, DType::float64).astype(dt)});
      const std::vector<double> y = out[0].astype(DType::float64).to_vector(),
                                gx = out[1].astype(DType::float64).to_vector(), wgx = want_gx.to_vector();
      REQUIRE(y.size() == want_y.size());
      bool same_y = true;
      for (std::size_t i = 0; i < y.size(); ++i)
        same_y &= std::isnan(want_y[i]) ? std::isnan(y[i]) : y[i] == want_y[i];
      CHECK(same_y);
      CHECK(gx == wgx);
    }
}

TEST_CASE("pool nd: float32 vector paths at every CPU level: ties, signed zeros, NaN, borders, overlaps",
          "[ops][pool][isa]") {
  // float32 with column stride 1 or 2 folds whole output rows in vector registers (stride 2
  // splits loads into even and odd columns; rows shorter than a vector take masked or
  // staged loads). Few distinct values (with -0 and +0) make ties everywhere: the maximum
  // and the gradient's target are the first maximum in row-major order (a NaN if there is
  // one), bit for bit, and the sign of a zero maximum is the first one's; overlapping
  // windows add their gradients. Average pooling and its gradient to float32 rounding.
  struct Case {
    Shape shape;
    PoolOptions o;
  };
  const std::vector<Case> cases = {
      {{3, 4, 8, 8}, options({2, 2}, {}, {}, true)},               // short rows, one partial vector
      {{2, 3, 9, 37}, options({2, 2}, {}, {}, true)},              // odd sizes, a full vector and a tail
      {{2, 2, 7, 35}, options({2, 2}, {}, {}, false)},             // ceil mode: clipped last window
      {{2, 3, 9, 33}, options({3, 3}, {2, 2}, {1, 1}, true)},      // overlapping, padding
      {{2, 2, 6, 21}, options({3, 3}, {2, 2}, {1, 1}, true, true)},
      {{2, 2, 6, 19}, options({2, 3}, {1, 1}, {}, true)},          // stride 1
      {{2, 2, 5, 23}, options({1, 4}, {1, 2}, {0, 1}, true)},      // a 4-wide window of stride 2
      {{3, 70}, options({2}, {}, {}, true)},                       // 1-D
      {{2, 2, 5, 6, 34}, options({2, 2, 2}, {}, {}, true)},        // 3-D
      {{1, 2, 5, 5, 17}, options({3, 3, 3}, {2, 2, 2}, {1, 1, 1}, true)},
      // 2x2 windows tiling the planes: one stream of half-vector chunks, paired across rows
      {{1, 3, 2, 24}, options({2, 2}, {}, {}, true)},              // an odd number of chunks: a lone last one
      {{2, 3, 4, 48}, options({2, 2}, {}, {}, true)},              // several chunks a row, pairs across rows
      {{5, 2, 16}, options({2, 2}, {}, {}, true)},                 // one output row a plane
      {{3, 1, 6, 8}, options({2, 2}, {}, {}, false)},              // ceil mode that tiles exactly
      // AVX-512's quarter chunks (4 outputs): output rows of 12 and 20, groups of 4 chunks
      // across rows and planes, a short last group
      {{2, 3, 6, 24}, options({2, 2}, {}, {}, true)},
      {{3, 2, 4, 40}, options({2, 2}, {}, {}, true)},
      // 3x3 windows of stride 2: each input row folded once, rows and columns shared by
      // two windows; the gradient sums them in registers, padding 0 or 1 on each axis
      {{2, 2, 8, 32}, options({3, 3}, {2, 2}, {1, 1}, true)},      // whole vectors, a padded first column
      {{1, 2, 9, 65}, options({3, 3}, {2, 2}, {1, 1}, true)},      // odd sizes: a clipped last row and column
      {{2, 2, 8, 16}, options({3, 3}, {2, 2}, {}, true)},          // no padding: an uncovered last row and column
      {{2, 2, 9, 47}, options({3, 3}, {2, 2}, {}, false)},         // ceil mode: clipped last windows
      {{2, 2, 10, 40}, options({3, 3}, {2, 2}, {0, 1}, true, true)},  // padding on one axis only
      {{2, 2, 7, 23}, options({3, 3}, {2, 2}, {1, 0}, true)},
      {{3, 4, 1}, options({3, 3}, {2, 2}, {1, 1}, true, true)},    // one column: both side columns missing
      {{2, 3, 2, 2}, options({3, 3}, {2, 2}, {}, false)},          // one window, its last row and column missing
      {{2, 5, 3}, options({3, 3}, {2, 2}, {1, 1}, true)},
  };
  int checked = 0;
  for (CpuIsa level : convgraph::testing::runnable_cpu_levels()) {
    ScopedCpuIsa scope(level);
    std::mt19937 rng(71);
    for (const Case& c : cases)
      for (int nan_rate : {0, 23}) {
        Tensor x(DType::float64, c.shape);
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          const unsigned r = static_cast<unsigned>(rng() % 5);
          x.set(i, nan_rate && rng() % static_cast<unsigned>(nan_rate) == 0 ? NAN : r == 0 ? -0.0 : double(r) - 2.0);
        }
        std::vector<double> want_y, want_avg, gyv;
        Tensor want_gx = Tensor::zeros(DType::float64, c.shape), want_gavg = Tensor::zeros(DType::float64, c.shape);
        const Shape ys = for_windows(c.shape, c.o, [&](std::int64_t j, const std::vector<std::int64_t>& in, std::int64_t cells) {
          std::int64_t best = in[0];
          double sum = 0;
          for (std::int64_t i : in) {
            sum += x.get(i);
            if (std::isnan(x.get(best))) continue;
            if (std::isnan(x.get(i)) || x.get(i) > x.get(best)) best = i;
          }
          want_y.push_back(x.get(best));
          gyv.push_back(static_cast<double>(j % 13) - 6.0);
          want_gx.set(best, want_gx.get(best) + gyv.back());
          const double count = static_cast<double>(c.o.include_padding_in_average ? cells : std::ssize(in));
          want_avg.push_back(sum / count);
          for (std::int64_t i : in) want_gavg.set(i, want_gavg.get(i) + gyv.back() / count);
        });
        INFO(cpu_isa_name(level) << " " << shape_to_string(c.shape) << " " << describe(c.o) << " NaN 1/" << nan_rate);
        Var vx = input(DType::float32, c.shape), vg = input(DType::float32, ys);
        const auto out = compile({vx, vg}, {max_pool(vx, c.o), max_pool_grad(vx, vg, c.o), avg_pool(vx, c.o),
                                            avg_pool_grad(vx, vg, c.o)})(
            {x.astype(DType::float32), Tensor::from(gyv, ys, DType::float64).astype(DType::float32)});
        const std::vector<double> y = out[0].astype(DType::float64).to_vector(),
                                  gx = out[1].astype(DType::float64).to_vector();
        REQUIRE(y.size() == want_y.size());
        bool same_y = true;
        for (std::size_t i = 0; i < y.size(); ++i)
          same_y &= std::isnan(want_y[i]) ? std::isnan(y[i]) : y[i] == want_y[i] && std::signbit(y[i]) == std::signbit(want_y[i]);
        CHECK(same_y);
        CHECK(gx == want_gx.to_vector());
        const Tensor avg = out[2].astype(DType::float64), gavg = out[3].astype(DType::float64);
        const std::vector<double> av = avg.to_vector();
        bool avg_ok = true;
        for (std::size_t i = 0; i < av.size(); ++i)
          avg_ok &= std::isnan(want_avg[i]) ? std::isnan(av[i]) : std::abs(av[i] - want_avg[i]) <= 1e-6;
        CHECK(avg_ok);
        CHECK(max_abs_diff(gavg, want_gavg) <= 1e-5);
        ++checked;
      }
  }
  CHECK(checked >= 20);
}

TEST_CASE("pool nd: relu's fused gradient on the 2x2 stream and 3x3 stride 2 at every CPU level, same bits as unfused",
          "[ops][pool][isa]") {
  // The fused op masks gy where its window's maximum is not > 0 (NaN, zeros of both signs,
  // negatives); it must give exactly where(x > 0, max_pool_grad, 0).
  const PoolOptions w2 = options({2, 2}, {}, {}, true), w3 = options({3, 3}, {2, 2}, {1, 1}, true),
                    w3_ceil = options({3, 3}, {2, 2}, {}, false);
  const std::vector<std::pair<Shape, PoolOptions>> cases = {
      {{1, 3, 2, 24}, w2}, {{2, 3, 4, 48}, w2}, {{3, 4, 8, 8}, w2}, {{2, 3, 8, 32}, w3}, {{2, 2, 9, 37}, w3_ceil},
  };
  for (CpuIsa level : convgraph::testing::runnable_cpu_levels()) {
    ScopedCpuIsa scope(level);
    std::mt19937 rng(83);
    for (const auto& [shape, o] : cases) {
      INFO(cpu_isa_name(level) << " " << shape_to_string(shape) << " " << describe(o));
      Tensor x(DType::float64, shape);
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const unsigned r = static_cast<unsigned>(rng() % 5);
        x.set(i, rng() % 29 == 0 ? NAN : r == 0 ? -0.0 : double(r) - 2.0);
      }
      const Shape ys = pooled_shape(shape, o);
      const Tensor xf = x.astype(DType::float32), gy = distinct_tensor(ys, 84).astype(DType::float32);
      detail::PoolParams p = detail::PoolParams::from("max_pool2d", o, detail::PoolMode::max, 2);
      p.relu_grad = true;
      Var vx = input(DType::float32, shape), vg = input(DType::float32, ys);
      const Var plain = max_pool_grad(vx, vg, o);
      const Tensor fused = compile({vx, vg}, {detail::pool_grad(p, vx, vg)})({xf, gy})[0];
      const Tensor want = compile({vx, vg}, {where(vx > 0.0, plain, zeros_like(plain))},
                                  Mode::fast_run().excluding("grad_fusion"))({xf, gy})[0];
      const std::vector<double> a = fused.astype(DType::float64).to_vector(),
                                b = want.astype(DType::float64).to_vector();
      bool same = a.size() == b.size();
      for (std::size_t i = 0; same && i < a.size(); ++i) same = std::memcmp(&a[i], &b[i], sizeof(double)) == 0;
      CHECK(same);
    }
  }
}

TEST_CASE("pool nd: gradients pass verify_grad in 1-D and 3-D", "[ops][pool][grad]") {
  struct Case {
    Shape shape;
    PoolOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 7}, options({2}, {}, {}, true)},
      {{2, 8}, options({3}, {2}, {1}, true, true)},
      {{3, 7}, options({3}, {2}, {}, false)},
      {{1, 4, 4, 5}, options({2, 2, 2}, {}, {}, true)},
      {{1, 5, 4, 5}, options({3, 2, 3}, {2, 1, 2}, {1, 0, 1}, true)},
      {{1, 5, 5, 4}, options({2, 3, 2}, {2, 2, 1}, {}, false, true)},
  };
  for (const auto& c : cases) {
    INFO(shape_to_string(c.shape) << " " << describe(c.o));
    const Tensor x = distinct_tensor(c.shape, 61);
    const Tensor gy = distinct_tensor(pooled_shape(c.shape, c.o), 62);
    const PoolOptions& o = c.o;
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return max_pool(v[0], o); }, {x}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return avg_pool(v[0], o); }, {x}));
    Var xc = constant(x);
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return max_pool_grad(xc, v[0], o); }, {gy}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return avg_pool_grad(xc, v[0], o); }, {gy}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return max_pool_grad_grad(xc, v[0], o); }, {x}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(pow(max_pool(v[0], o), 2.0)), v[0]); }, {x}));
    CHECK_NOTHROW(verify_grad([&](const auto& v) { return grad(sum(pow(avg_pool(v[0], o), 2.0)), v[0]); }, {x}));
  }
}

TEST_CASE("pool nd: bad options and ranks raise typed errors naming op and values", "[ops][pool][errors]") {
  using Catch::Contains;
  Var x4 = input(DType::float32, {1, 2, 4, 4});
  CHECK_THROWS_AS(max_pool(x4, options({2, 2, 2, 2}, {}, {}, true)), ValueError);
  CHECK_THROWS_WITH(max_pool(x4, options({2, 2, 2, 2}, {}, {}, true)),
                    Contains("max_pool") && Contains("(2, 2, 2, 2)") && Contains("1, 2 or 3 entries"));
  CHECK_THROWS_WITH(avg_pool(x4, options({}, {}, {}, true)), Contains("avg_pool") && Contains("1, 2 or 3 entries"));
  CHECK_THROWS_AS(max_pool3d(x4, options({2, 2}, {}, {}, true)), ValueError);
  CHECK_THROWS_WITH(max_pool3d(x4, options({2, 2}, {}, {}, true)),
                    Contains("max_pool3d") && Contains("window (2, 2)") && Contains("3 entries"));
  CHECK_THROWS_WITH(avg_pool1d(x4, options({2}, {1, 1}, {}, true)),
                    Contains("avg_pool1d") && Contains("stride (1, 1)") && Contains("1 entries"));
  CHECK_THROWS_WITH(max_pool(x4, options({2, 2, 2}, {}, {0, 0}, true)),
                    Contains("max_pool") && Contains("padding (0, 0)") && Contains("3 entries"));
  CHECK_THROWS_AS(max_pool(x4, options({2, 0, 2}, {}, {}, true)), ValueError);
  CHECK_THROWS_WITH(max_pool(x4, options({2, 0, 2}, {}, {}, true)), Contains("window (2, 0, 2)") && Contains(">= 1"));
  CHECK_THROWS_WITH(max_pool(x4, options({2, 2, 2}, {1, -1, 1}, {}, true)),
                    Contains("stride (1, -1, 1)") && Contains(">= 1"));
  CHECK_THROWS_WITH(avg_pool3d(x4, options({2, 2, 2}, {}, {0, 2, 0}, true)),
                    Contains("avg_pool3d") && Contains("padding (0, 2, 0)") && Contains("smaller than the window"));
  CHECK_THROWS_WITH(avg_pool1d(x4, options({3}, {}, {1}, false)),
                    Contains("avg_pool1d") && Contains("ignore_border"));
  // The window's length must fit the rank.
  CHECK_THROWS_AS(max_pool3d(input(DType::float32, {4, 4})), ShapeError);
  CHECK_THROWS_WITH(max_pool3d(input(DType::float32, {4, 4})),
                    Contains("max_pool3d") && Contains("rank >= 3") && Contains("(4, 4)"));
  CHECK_THROWS_WITH(avg_pool1d(input(DType::float32, {})), Contains("avg_pool1d") && Contains("rank >= 1"));
  CHECK_THROWS_AS(max_pool3d(input(DType::float32, {1, 1, 1, 5, 5})), ShapeError);
  CHECK_THROWS_WITH(max_pool3d(input(DType::float32, {1, 1, 1, 5, 5})),
                    Contains("max_pool3d") && Contains("too small") && Contains("axis 2"));
  CHECK_THROWS_AS(avg_pool3d(input(DType::int32, {2, 2, 2})), TypeError);
  CHECK_THROWS_AS(max_pool_grad(x4, input(DType::float32, {1, 2, 2, 3}), options({2, 2}, {}, {}, true)),
                  ShapeError);
  CHECK_THROWS_WITH(max_pool_grad_grad(x4, input(DType::float32, {1, 2, 4}), options({2, 2}, {}, {}, true)),
                    Contains("max_pool2d_grad_grad") && Contains("(1, 2, 4)"));
}
