// GPU-free checks of the CUDA algorithms' arithmetic: the same drivers (conv_drivers.hpp)
// and per-element kernel functions (kernel_math.hpp) that run on the GPU, executed on the
// host with stand-ins of identical semantics for what only a GPU provides:
//   cuBLAS strided-batched GEMM -> a column-major loop (with cuBLAS's argument checks),
//   cuFFT R2C / C2R              -> unnormalised separable DFTs with the same layouts,
//   cuDNN with symmetric pads    -> the CPU reference on the explicitly padded problem.
// Every memory access of the emulated kernels is bounds-checked against the buffers the
// GPU code would own; outputs and scratch start as NaN, so unwritten elements show up.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <complex>
#include <limits>
#include <map>
#include <vector>

#include "backends/cuda/conv_drivers.hpp"
#include "convgraph/backends/cpu/reference.hpp"
#include "support/child_process.hpp"  // sanitized_build
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

using namespace convgraph;
using namespace convgraph::cuda;
using namespace convgraph::testing;
using kernels::ColGeometry;
using kernels::GatherSpec;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Buffers a device kernel may touch; every emulated access is checked against them.
struct Arena {
  struct Range {
    const char* begin;
    const char* end;
  };
  std::vector<Range> ranges;
  template <class T>
  void add(const std::vector<T>& v) {
    const char* b = reinterpret_cast<const char*>(v.data());
    ranges.push_back({b, b + v.size() * sizeof(T)});
  }
  template <class T>
  const T* check(const T* p, long long i) const {
    const char* at = reinterpret_cast<const char*>(p + i);
    for (const Range& r : ranges)
      if (at >= r.begin && at + sizeof(T) <= r.end) return p + i;
    FAIL("emulated kernel accessed memory outside its buffers (element " << i << ")");
    return p;
  }
};

void emulate_gather(const Arena& mem, const double* src, double* dst, const GatherSpec& s, double scale) {
  for (long long i = 0; i < kernels::gather_total(s); ++i) {
    const long long from = kernels::gather_source(s, i);
    *const_cast<double*>(mem.check(dst, i)) = from >= 0 ? *mem.check(src, from) * scale : 0.0;
  }
}

/// cuda.corrmm's Ops with host loops; gemm follows cuBLAS's column-major contract.
template <class T>
struct HostCorrOps {
  const Arena& mem;
  long gemms = 0;
  void im2col(const T* x, T* col, const ColGeometry& g) {
    for (long long i = 0; i < kernels::col_rows(g) * kernels::col_cols(g); ++i) {
      const long long from = kernels::im2col_source(g, i);
      *const_cast<T*>(mem.check(col, i)) = from >= 0 ? *mem.check(x, from) : T(0);
    }
  }
  void col2im(const T* col, T* x, const ColGeometry& g) {
    // col2im_value reads col directly; check its whole extent once instead.
    mem.check(col, kernels::col_rows(g) * kernels::col_cols(g) - 1);
    for (long long i = 0; i < kernels::image_size(g); ++i) *const_cast<T*>(mem.check(x, i)) = kernels::col2im_value(col, g, i);
  }
  void gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, long long sa, const T* b, int ldb,
            long long sb, T beta, T* c, int ldc, long long sc, int batch) {
    // cuBLAS rejects these with CUBLAS_STATUS_INVALID_VALUE.
    REQUIRE(m >= 0);
    REQUIRE(n >= 0);
    REQUIRE(k >= 0);
    REQUIRE(lda >= std::max(1, ta ? k : m));
    REQUIRE(ldb >= std::max(1, tb ? n : k));
    REQUIRE(ldc >= std::max(1, m));
    ++gemms;
    for (int bi = 0; bi < batch; ++bi)
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double acc = 0;
          for (int l = 0; l < k; ++l) {
            const T av = *mem.check(a, bi * sa + (ta ? l + static_cast<long long>(i) * lda : i + static_cast<long long>(l) * lda));
            const T bv = *mem.check(b, bi * sb + (tb ? j + static_cast<long long>(l) * ldb : l + static_cast<long long>(j) * ldb));
            acc += static_cast<double>(av) * static_cast<double>(bv);
          }
          T* out = const_cast<T*>(mem.check(c, bi * sc + i + static_cast<long long>(j) * ldc));
          *out = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : beta * static_cast<double>(*out)));
        }
  }
};

// ---- cuFFT stand-in: separable DFT with cuFFT's R2C / C2R layouts ------------------------

using cd = std::complex<double>;

/// In-place unnormalised DFT of every line of a row-major array along `axis`.
void dft_axis(std::vector<cd>& v, const std::vector<long long>& dims, std::size_t axis, int sign) {
  const long long n = dims[axis];
  long long inner = 1;
  for (std::size_t a = axis + 1; a < dims.size(); ++a) inner *= dims[a];
  const long long outer = static_cast<long long>(v.size()) / (n * inner);
  std::vector<cd> tw(static_cast<std::size_t>(n)), line(static_cast<std::size_t>(n));
  for (long long t = 0; t < n; ++t)
    tw[static_cast<std::size_t>(t)] = std::polar(1.0, sign * 2.0 * M_PI * static_cast<double>(t) / static_cast<double>(n));
  for (long long o = 0; o < outer; ++o)
    for (long long in = 0; in < inner; ++in) {
      const auto at = [&](long long t) { return static_cast<std::size_t>((o * n + t) * inner + in); };
      for (long long f = 0; f < n; ++f) {
        cd acc = 0;
        for (long long t = 0; t < n; ++t) acc += v[at(t)] * tw[static_cast<std::size_t>((f * t) % n)];
        line[static_cast<std::size_t>(f)] = acc;
      }
      for (long long f = 0; f < n; ++f) v[at(f)] = line[static_cast<std::size_t>(f)];
    }
}

struct Cx {
  double x, y;
};

struct HostFftOps {
  const ConvProblem& p;
  const FftGeometry& g;
  const Arena& mem;
  std::vector<long long> dims() const {
    std::vector<long long> d;
    for (int a = 0; a < g.ndim; ++a) d.push_back(g.size[static_cast<std::size_t>(a)]);
    return d;
  }
  void gather(const void* src, void* dst, const GatherSpec& s, double scale) {
    emulate_gather(mem, static_cast<const double*>(src), static_cast<double*>(dst), s, scale);
  }
  void r2c(FftFamily f, void* real, void* spectrum) {
    const auto d = dims();
    const long long R = g.real_per_signal, H = g.complex_per_signal, last = d.back();
    const double* r = static_cast<const double*>(real);
    Cx* out = static_cast<Cx*>(spectrum);
    for (long long s = 0; s < fft_family_count(p, f); ++s) {
      std::vector<cd> v(static_cast<std::size_t>(R));
      for (long long i = 0; i < R; ++i) v[static_cast<std::size_t>(i)] = *mem.check(r, s * R + i);
      for (std::size_t a = 0; a < d.size(); ++a) dft_axis(v, d, a, -1);
      for (long long h = 0; h < H; ++h) {  // keep the non-redundant half of the last axis
        const long long row = h / (last / 2 + 1), j = h % (last / 2 + 1);
        const cd c = v[static_cast<std::size_t>(row * last + j)];
        *const_cast<Cx*>(mem.check(out, s * H + h)) = {c.real(), c.imag()};
      }
    }
  }
  void c2r(FftFamily f, void* spectrum, void* real) {
    const auto d = dims();
    const long long R = g.real_per_signal, H = g.complex_per_signal, last = d.back(), half = last / 2 + 1;
    const Cx* in = static_cast<const Cx*>(spectrum);
    double* r = static_cast<double*>(real);
    for (long long s = 0; s < fft_family_count(p, f); ++s) {
      std::vector<cd> v(static_cast<std::size_t>(R));
      for (long long i = 0; i < R; ++i) {  // Hermitian completion of the half spectrum
        long long rest = i;
        std::vector<long long> idx(d.size());
        for (std::size_t a = d.size(); a-- > 0;) {
          idx[a] = rest % d[a];
          rest /= d[a];
        }
        bool mirrored = idx.back() >= half;
        if (mirrored)
          for (std::size_t a = 0; a < d.size(); ++a) idx[a] = (d[a] - idx[a]) % d[a];
        long long h = 0;
        for (std::size_t a = 0; a + 1 < d.size(); ++a) h = h * d[a] + idx[a];
        h = h * half + idx.back();
        const Cx c = *mem.check(in, s * H + h);
        v[static_cast<std::size_t>(i)] = mirrored ? cd(c.x, -c.y) : cd(c.x, c.y);
      }
      for (std::size_t a = 0; a < d.size(); ++a) dft_axis(v, d, a, +1);
      for (long long i = 0; i < R; ++i) *const_cast<double*>(mem.check(r, s * R + i)) = v[static_cast<std::size_t>(i)].real();
    }
  }
  void mac(kernels::MacMode mode, const void* a, const void* b, void* out, const kernels::MacShape& s) {
    for (long long i = 0; i < kernels::mac_total(mode, s); ++i)
      *const_cast<Cx*>(mem.check(static_cast<Cx*>(out), i)) =
          kernels::mac_value(mode, static_cast<const Cx*>(a), static_cast<const Cx*>(b), s, i);
  }
};

/// Every `stride`-th case of the sweep, plus all of its named edge cases.
std::vector<ConvCase> sampled_cases(long stride) {
  std::vector<ConvCase> out;
  long i = 0;
  for (ConvCase& c : conv_sweep_cases())
    if (c.name.rfind("sweep", 0) != 0 || i++ % stride == 0) out.push_back(std::move(c));
  return out;
}

}  // namespace

TEST_CASE("emulated cuda.corrmm (im2col/col2im + column-major GEMM) matches the reference", "[cuda_emulation]") {
  long runs = 0;
  std::uint64_t seed = 3;
  // Every 2nd sweep case; under the sanitizers (about 30x slower) every 8th.
  const long stride = convgraph::test::sanitized_build() ? 8 : 2;
  for (const ConvCase& c : sampled_cases(stride))
    for (ConvDirection dir : kAllDirections)
      for (DType dtype : {DType::float64, DType::float32}) {
        const ConvProblem p = c.problem(dir, dtype);
        REQUIRE(corrmm_static_check(p));
        const ConvOperands ops = make_operands(c.problem(dir, DType::float64), seed++);
        const std::vector<double> ref = reference_output(c.problem(dir, DType::float64), ops);
        const auto run = [&](auto zero) {
          using T = decltype(zero);
          std::vector<T> x(ops.x.begin(), ops.x.end()), w(ops.w.begin(), ops.w.end()), y(ops.y.begin(), ops.y.end());
          std::vector<T>& out = dir == ConvDirection::forward ? y : dir == ConvDirection::grad_inputs ? x : w;
          std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());
          std::vector<T> col(corrmm_workspace_bytes(p) / sizeof(T), std::numeric_limits<T>::quiet_NaN());
          Arena mem;
          mem.add(x);
          mem.add(w);
          mem.add(y);
          mem.add(col);
          HostCorrOps<T> host{mem};
          corrmm_run<T>(p, x.data(), w.data(), y.data(), col.data(), host);
          CHECK(host.gemms == p.N);
          return std::vector<double>(out.begin(), out.end());
        };
        const std::vector<double> got = dtype == DType::float64 ? run(0.0) : run(0.0f);
        const double err = max_abs_diff(got, ref) / std::max(1.0, max_abs(ref));
        INFO(c.name << " " << p.key());
        REQUIRE(err <= (dtype == DType::float64 ? 1e-12 : 1e-5));
        ++runs;
      }
  CHECK(runs > 1000 / stride);
}

TEST_CASE("emulated cuda.fft (gather + R2C + spectral MAC + C2R) matches the reference", "[cuda_emulation]") {
  long runs = 0;
  std::uint64_t seed = 5;
  for (const ConvCase& c : sampled_cases(6))
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p = c.problem(dir, DType::float64);
      if (!fft_static_check(p)) {
        CHECK(p.stride != Axes3{1, 1, 1});  // only strided problems are refused
        continue;
      }
      const FftGeometry g = fft_geometry(p);
      for (int a = 0; a < p.ndim; ++a) {
        const auto ua = static_cast<std::size_t>(a);
        REQUIRE(g.size[ua] >= p.out[ua] + p.dilated_kernel(a) - 1);  // no circular wrap
      }
      const ConvOperands ops = make_operands(p, seed++);
      const std::vector<double> ref = reference_output(p, ops);
      std::vector<double> x = ops.x, w = ops.w, y = ops.y;
      std::vector<double>& out = dir == ConvDirection::forward ? y : dir == ConvDirection::grad_inputs ? x : w;
      std::fill(out.begin(), out.end(), kNaN);
      std::vector<double> ws(g.buffer_bytes() / sizeof(double), kNaN);  // cuFFT's work area: not used here
      Arena mem;
      mem.add(x);
      mem.add(w);
      mem.add(y);
      mem.add(ws);
      const FftBuffers b = fft_carve(p, g, ws.data());
      REQUIRE(static_cast<char*>(b.work) == reinterpret_cast<char*>(ws.data()) + g.buffer_bytes());
      HostFftOps host{p, g, mem};
      void* const tensor[3] = {x.data(), w.data(), y.data()};
      fft_run(p, g, tensor, b, host);
      const double err = max_abs_diff(out, ref) / std::max(1.0, max_abs(ref));
      INFO(c.name << " " << p.key());
      REQUIRE(err <= 1e-10);
      ++runs;
    }
  CHECK(runs > 100);
}

TEST_CASE("cuDNN's explicit padding plan reproduces asymmetric padding exactly", "[cuda_emulation]") {
  // For every asymmetric case: cuDNN would run the plan's symmetric problem on xp (or
  // produce dxp); emulate that with the CPU reference on the padded problem.
  long runs = 0;
  std::uint64_t seed = 9;
  for (const ConvCase& c : conv_sweep_cases())
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p = c.problem(dir, DType::float64);
      CudnnConvPlan plan;
      REQUIRE(plan_cudnn_conv(p, plan));
      if (!plan.explicit_pad.needed) continue;
      ConvProblem q = p;  // what cuDNN sees
      for (int a = 0; a < p.ndim; ++a) {
        const auto ua = static_cast<std::size_t>(a);
        q.in[ua] = plan.explicit_pad.padded_in[ua];
        q.pad_pre[ua] = q.pad_post[ua] = std::min(p.pad_pre[ua], p.pad_post[ua]);
      }
      // The plan's x descriptor describes exactly q's input.
      REQUIRE(static_cast<std::size_t>(plan.x.numel()) == static_cast<std::size_t>(q.x_numel()));
      REQUIRE(plan.explicit_pad.bytes == static_cast<std::size_t>(q.x_numel()) * 8);
      const ConvOperands ops = make_operands(p, seed++);
      const std::vector<double> ref = reference_output(p, ops);
      std::vector<double> x = ops.x, w = ops.w, y = ops.y, xp(static_cast<std::size_t>(q.x_numel()), kNaN);
      Arena mem;
      mem.add(x);
      mem.add(xp);
      std::vector<double> got;
      if (dir == ConvDirection::grad_inputs) {
        reference_conv(q, ConvTensors{xp.data(), w.data(), y.data(), {}});  // dxp
        std::fill(x.begin(), x.end(), kNaN);
        emulate_gather(mem, xp.data(), x.data(), cudnn_pad_spec(p, plan.explicit_pad, true), 1.0);
        got = x;
      } else {
        emulate_gather(mem, x.data(), xp.data(), cudnn_pad_spec(p, plan.explicit_pad, false), 1.0);
        std::vector<double>& out = dir == ConvDirection::forward ? y : w;
        std::fill(out.begin(), out.end(), kNaN);
        reference_conv(q, ConvTensors{xp.data(), w.data(), y.data(), {}});
        got = out;
      }
      INFO(c.name << " " << p.key());
      REQUIRE(max_abs_diff(got, ref) <= 1e-12 * std::max(1.0, max_abs(ref)));
      ++runs;
    }
  CHECK(runs > 50);
}

TEST_CASE("the per-element gather covers pad, crop, dilate and flip", "[cuda_emulation]") {
  // 1D signal 0..4 (value = index + 1), batch 2.
  std::vector<double> src{1, 2, 3, 4, 5, 10, 20, 30, 40, 50};
  Arena mem;
  mem.add(src);
  const auto run = [&](GatherSpec s, double scale = 1.0) {
    std::vector<double> dst(static_cast<std::size_t>(kernels::gather_total(s)), kNaN);
    Arena m = mem;
    m.add(dst);
    emulate_gather(m, src.data(), dst.data(), s, scale);
    return dst;
  };
  GatherSpec s;
  s.batch = 2;
  s.src[2] = 5;
  s.dst[2] = 8;
  s.add[2] = -2;  // pad 2 before, 1 after
  CHECK(run(s) == std::vector<double>{0, 0, 1, 2, 3, 4, 5, 0, 0, 0, 10, 20, 30, 40, 50, 0});
  s.dst[2] = 3;
  s.add[2] = 1;  // crop [1, 4)
  CHECK(run(s, 0.5) == std::vector<double>{1, 1.5, 2, 10, 15, 20});
  s.dst[2] = 9;
  s.add[2] = 0;
  s.div[2] = 2;  // dilate by 2
  CHECK(run(s) == std::vector<double>{1, 0, 2, 0, 3, 0, 4, 0, 5, 10, 0, 20, 0, 30, 0, 40, 0, 50});
  s.mul[2] = -1;
  s.add[2] = 8;  // dilate and flip
  CHECK(run(s) == std::vector<double>{5, 0, 4, 0, 3, 0, 2, 0, 1, 50, 0, 40, 0, 30, 0, 20, 0, 10});
}
