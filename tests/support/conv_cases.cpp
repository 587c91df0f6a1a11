#include "support/conv_cases.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "convgraph/core/error.hpp"

namespace convgraph::testing {

std::vector<CpuIsa> runnable_cpu_levels() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_isa_supported(isa)) out.push_back(isa);
  return out;
}

ConvCase make_conv_case(std::string name, std::vector<std::int64_t> x, std::vector<std::int64_t> w,
                        BorderMode border, std::vector<std::int64_t> stride, std::vector<std::int64_t> dilation,
                        bool flip, std::int64_t groups) {
  ConvCase c;
  c.name = std::move(name);
  c.params.ndim = static_cast<int>(x.size()) - 2;
  c.params.border = std::move(border);
  c.params.stride = std::move(stride);
  c.params.dilation = std::move(dilation);
  c.params.filter_flip = flip;
  c.params.groups = groups;
  c.x_shape = std::move(x);
  c.w_shape = std::move(w);
  return c;
}

using i64 = std::int64_t;
using Axes = std::vector<i64>;

ConvProblem ConvCase::problem(ConvDirection dir, DType dtype) const {
  return ConvProblem::make(dir, params, x_shape, w_shape, dtype, name);
}

namespace {

std::string axes_str(const Axes& v) {
  std::ostringstream os;
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? "x" : "") << v[i];
  return os.str();
}

/// Output size >= 1 on every axis, computed the way docs/DESIGN.md states it.
bool geometry_ok(const ConvParams& params, const Axes& in, const Axes& ker) {
  const ConvParams p = params.normalized("sweep");
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const i64 dk = (ker[ua] - 1) * p.dilation[ua] + 1;
    const auto [p0, p1] = p.border.axis_pads(a, dk);
    if (in[ua] + p0 + p1 - dk < 0) return false;
  }
  return true;
}

struct Builder {
  std::vector<ConvCase> cases;

  void add(const std::string& tag, int ndim, i64 N, i64 C, i64 K, i64 G, const Axes& in,
           const Axes& ker, BorderMode border, const Axes& stride, const Axes& dil, bool flip) {
    ConvParams p;
    p.ndim = ndim;
    p.border = std::move(border);
    p.stride = stride;
    p.dilation = dil;
    p.filter_flip = flip;
    p.groups = G;
    if (!geometry_ok(p, in, ker)) return;
    ConvCase c;
    std::ostringstream name;
    name << tag << ' ' << ndim << "d n" << N << " c" << C << " k" << K << " g" << G << " i"
         << axes_str(in) << " f" << axes_str(ker) << ' ' << p.border.to_string() << " s"
         << axes_str(stride) << " d" << axes_str(dil) << (flip ? " conv" : " xcorr");
    c.name = name.str();
    c.params = p;
    c.x_shape = {N, C};
    c.w_shape = {K, C / G};
    c.x_shape.insert(c.x_shape.end(), in.begin(), in.end());
    c.w_shape.insert(c.w_shape.end(), ker.begin(), ker.end());
    cases.push_back(std::move(c));
  }
};

struct NdSetup {
  int ndim;
  Axes in;
  std::vector<Axes> kernels;        // odd, even/mixed, pointwise
  std::vector<BorderMode> borders;  // valid, full, half, int, per-axis, asymmetric
  std::vector<Axes> strides;        // 1, 2, 3, mixed
  std::vector<Axes> dilations;      // 1, 2
};

std::vector<NdSetup> setups() {
  using Pairs = std::vector<std::pair<i64, i64>>;
  NdSetup d1{1, {41}, {{3}, {4}, {1}},
             {BorderMode("valid"), BorderMode("full"), BorderMode("half"), BorderMode(1),
              BorderMode({2}), BorderMode(Pairs{{3, 0}})},
             {{1}, {2}, {3}, {5}},
             {{1}, {2}}};
  NdSetup d2{2, {5, 37}, {{3, 3}, {2, 4}, {1, 1}},
             {BorderMode("valid"), BorderMode("full"), BorderMode("half"), BorderMode(1),
              BorderMode({0, 2}), BorderMode(Pairs{{2, 0}, {0, 3}})},
             {{1, 1}, {2, 2}, {3, 3}, {1, 3}},
             {{1, 1}, {2, 2}}};
  NdSetup d3{3, {3, 4, 18}, {{3, 3, 3}, {2, 3, 4}, {1, 1, 1}},
             {BorderMode("valid"), BorderMode("full"), BorderMode("half"), BorderMode(1),
              BorderMode({1, 0, 2}), BorderMode(Pairs{{1, 0}, {0, 2}, {2, 1}})},
             {{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {2, 1, 3}},
             {{1, 1, 1}, {2, 2, 2}}};
  return {d1, d2, d3};
}

}  // namespace

std::vector<ConvCase> conv_sweep_cases() {
  Builder b;
  constexpr i64 kC = 6, kK = 6;
  const i64 groups[] = {1, 2, kC};
  for (const NdSetup& s : setups()) {
    // 1D and 2D: the full product. 3D: the full product except the kernel, which rotates
    // with the case index so each kernel still meets every other parameter often.
    i64 index = 0;
    for (const BorderMode& border : s.borders)
      for (const Axes& stride : s.strides)
        for (const Axes& dil : s.dilations)
          for (bool flip : {false, true})
            for (i64 G : groups) {
              if (s.ndim < 3) {
                for (const Axes& ker : s.kernels)
                  b.add("sweep", s.ndim, 2, kC, kK, G, s.in, ker, border, stride, dil, flip);
              } else {
                const Axes& ker = s.kernels[static_cast<std::size_t>(index % 3)];
                b.add("sweep", s.ndim, 2, kC, kK, G, s.in, ker, border, stride, dil, flip);
              }
              ++index;
            }
  }

  using Pairs = std::vector<std::pair<i64, i64>>;
  // Kernel larger than the input: only full mode (or enough padding) gives an output.
  b.add("big-kernel", 1, 2, 3, 4, 1, {4}, {7}, "full", {1}, {1}, true);
  b.add("big-kernel", 1, 2, 3, 4, 1, {4}, {3}, "full", {2}, {3}, false);
  b.add("big-kernel", 2, 2, 4, 4, 2, {3, 4}, {5, 6}, "full", {1, 1}, {1, 1}, true);
  b.add("big-kernel", 2, 1, 3, 2, 1, {3, 2}, {4, 5}, "full", {2, 3}, {1, 2}, false);
  b.add("big-kernel", 3, 1, 2, 3, 1, {2, 3, 3}, {3, 4, 5}, "full", {1, 1, 1}, {1, 1, 1}, true);
  // Kernel equal to the input: a single output position.
  b.add("kernel=input", 2, 2, 3, 5, 1, {4, 5}, {4, 5}, "valid", {1, 1}, {1, 1}, true);
  b.add("kernel=input", 3, 2, 2, 3, 1, {2, 3, 4}, {2, 3, 4}, "valid", {1, 1, 1}, {1, 1, 1}, false);
  // Padding wider than the kernel: whole outputs read only zeros.
  b.add("pad>kernel", 1, 2, 2, 3, 1, {9}, {2}, Pairs{{5, 4}}, {1}, {1}, false);
  b.add("pad>kernel", 2, 1, 2, 2, 1, {4, 6}, {2, 2}, Pairs{{4, 0}, {1, 5}}, {2, 1}, {1, 1}, true);
  // Stride larger than the dilated kernel: some inputs are never read (zero gradient).
  b.add("stride>kernel", 1, 2, 3, 3, 1, {30}, {2}, "valid", {5}, {1}, true);
  b.add("stride>kernel", 2, 2, 2, 4, 2, {9, 40}, {2, 2}, 1, {4, 5}, {1, 2}, false);
  b.add("stride>kernel", 3, 1, 2, 2, 1, {5, 5, 21}, {1, 2, 2}, "valid", {3, 2, 4}, {1, 1, 1}, true);
  // Full register blocks (8+ channels per group) and rows wide enough for vector tiles.
  b.add("wide", 2, 1, 16, 24, 1, {6, 40}, {3, 3}, "half", {1, 1}, {1, 1}, true);
  b.add("wide", 2, 2, 16, 24, 2, {5, 70}, {3, 3}, 1, {1, 2}, {1, 1}, false);
  b.add("wide", 1, 3, 17, 19, 1, {80}, {5}, Pairs{{3, 1}}, {1}, {2}, true);
  b.add("wide", 3, 1, 9, 10, 1, {3, 3, 36}, {3, 1, 3}, "half", {1, 1, 1}, {1, 1, 1}, false);
  b.add("wide", 1, 2, 12, 16, 4, {100}, {5}, "full", {2}, {3}, false);
  // Pointwise: stride 1 without padding (no im2col) and strided or padded (im2col).
  b.add("pointwise", 2, 3, 16, 12, 1, {7, 9}, {1, 1}, "valid", {1, 1}, {1, 1}, true);
  b.add("pointwise", 2, 3, 16, 12, 4, {7, 9}, {1, 1}, "valid", {1, 1}, {1, 1}, false);
  b.add("pointwise", 2, 2, 8, 8, 1, {7, 9}, {1, 1}, "valid", {2, 2}, {1, 1}, false);
  b.add("pointwise", 2, 2, 8, 8, 1, {7, 9}, {1, 1}, 1, {1, 1}, {1, 1}, false);
  b.add("pointwise", 3, 2, 8, 4, 2, {3, 4, 5}, {1, 1, 1}, "valid", {1, 1, 1}, {2, 2, 2}, true);
  // Depthwise with a channel multiplier, and a single image.
  b.add("depthwise", 2, 2, 4, 8, 4, {6, 20}, {3, 3}, "half", {1, 1}, {1, 1}, true);
  b.add("depthwise", 2, 1, 8, 8, 8, {7, 23}, {3, 3}, 1, {2, 2}, {2, 1}, false);
  // Spans beyond the direct kernels' 1024-element windows (their one-position fallbacks).
  b.add("huge-span", 1, 1, 2, 3, 1, {1300}, {3}, "valid", {1}, {600}, true);
  b.add("huge-span", 1, 1, 2, 2, 1, {1500}, {2}, 1, {1}, {1}, false);
  // Uneven everything.
  b.add("odd", 2, 3, 5, 7, 1, {11, 13}, {3, 5}, Pairs{{1, 2}, {3, 0}}, {2, 3}, {2, 1}, true);
  b.add("odd", 3, 2, 3, 5, 1, {5, 6, 7}, {2, 3, 2}, Pairs{{0, 1}, {2, 0}, {1, 1}}, {2, 1, 3}, {1, 2, 2}, false);
  return b.cases;
}

std::vector<ConvCase> conv_chunking_cases() {
  Builder b;
  b.add("chunk", 2, 3, 8, 10, 1, {12, 30}, {3, 3}, "half", {1, 1}, {1, 1}, true);
  b.add("chunk", 2, 2, 8, 8, 2, {9, 17}, {3, 2}, std::vector<std::pair<i64, i64>>{{2, 0}, {1, 1}},
        {2, 1}, {1, 2}, false);
  b.add("chunk", 3, 2, 4, 6, 1, {4, 6, 9}, {3, 3, 3}, 1, {1, 1, 1}, {1, 1, 1}, false);
  b.add("chunk", 1, 4, 6, 4, 2, {150}, {5}, "valid", {2}, {1}, true);
  b.add("chunk", 2, 3, 8, 6, 1, {10, 12}, {1, 1}, "valid", {1, 1}, {1, 1}, false);
  return b.cases;
}

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& e : v) e = static_cast<double>(static_cast<float>(dist(rng)));
  return v;
}

std::vector<double> integer_values(std::size_t n, std::uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    throw ValueError(msg("max_abs_diff: sizes ", a.size(), " and ", b.size(), " differ"));
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  long double s = 0.0L;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return static_cast<double>(s);
}

}  // namespace convgraph::testing
