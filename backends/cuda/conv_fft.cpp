// cuda.fft: cuFFT convolution for stride 1, all three directions (plan in
// include/convgraph/backends/cuda/conv_cuda.hpp; multiply-accumulate in conv_fft.cu).
//
// Per axis, with x_pad = x zero-padded by (pre, post), h = the filter dilated (and
// flipped for true convolution) and every signal zero-padded to F >= in + pre + post:
//   forward       y[o]  = sum_j x_pad[j] h[j - o]    ->  Y  = X . conj(H)
//   grad_inputs   dx_pad[j] = sum_o dy[o] h[j - o]   ->  DX = DY . H
//   grad_weights  dh[m] = sum_j x_pad[j] dy[j - m]   ->  DH = X . conj(DY)
// F >= in + pre + post = out + dilated_kernel - 1 keeps every circular wrap out of the
// cropped range, so the circular results equal the linear ones.
#include <algorithm>
#include <climits>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/registration.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/backends/cuda/conv_cuda.hpp"

namespace convgraph::cuda {

namespace {
constexpr const char* kName = "cuda.fft";
constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
}  // namespace

std::int64_t fft_good_size(std::int64_t n) {
  if (n <= 1) return 1;
  for (std::int64_t m = n;; ++m) {
    std::int64_t r = m;
    for (std::int64_t f : {2, 3, 5, 7})
      while (r % f == 0) r /= f;
    if (r == 1) return m;
  }
}

Status fft_static_check(const ConvProblem& p) {
  const bool f32 = p.dtype == DType::float32 && p.compute == DType::float32;
  const bool f64 = p.dtype == DType::float64 && p.compute == DType::float64;
  if (!f32 && !f64)
    return Status::no(msg(kName, ": runs float32/float32 and float64/float64 only, got ", dtype_name(p.dtype), "/",
                          dtype_name(p.compute)));
  if (p.ndim < 1 || p.ndim > 3) return Status::no(msg(kName, ": ", p.ndim, " spatial dimensions (1-3 supported)"));
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    if (p.stride[ua] != 1) return Status::no(msg(kName, ": needs stride 1 on every axis (axis ", a, " has ", p.stride[ua], ")"));
    if (p.in[ua] + p.pad_pre[ua] + p.pad_post[ua] > INT_MAX / 2)
      return Status::no(msg(kName, ": padded extent of axis ", a, " is too large for cuFFT"));
  }
  return Status::ok();
}

std::size_t FftGeometry::buffer_bytes() const { return align_up(real_bytes) + spectra_bytes; }

FftGeometry fft_geometry(const ConvProblem& p) {
  FftGeometry g;
  g.ndim = p.ndim;
  g.real_per_signal = 1;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    g.size[ua] = fft_good_size(p.in[ua] + p.pad_pre[ua] + p.pad_post[ua]);
    g.real_per_signal *= g.size[ua];
  }
  const auto last = static_cast<std::size_t>(p.ndim - 1);
  g.complex_per_signal = g.real_per_signal / g.size[last] * (g.size[last] / 2 + 1);
  const std::size_t es = dtype_size(p.dtype);
  const std::int64_t nx = p.N * p.C, nw = p.K * p.Cg(), ny = p.N * p.K;
  g.real_bytes = static_cast<std::size_t>(std::max({nx, nw, ny}) * g.real_per_signal) * es;
  const auto spectra = [&](std::int64_t n) { return align_up(static_cast<std::size_t>(n * g.complex_per_signal) * 2 * es); };
  g.spectra_bytes = spectra(nx) + spectra(nw) + spectra(ny);
  return g;
}

namespace {

enum Family { kX = 0, kW = 1, kY = 2 };

/// Three cuFFT plans for one problem: R2C for the two inputs' families, C2R for the
/// output's. They share one caller-provided work area (auto-allocation is off).
struct FftPlans {
  std::mutex mu;  // a plan's stream and work area are per-plan state
  cufftHandle plan[3] = {0, 0, 0};
  bool created[3] = {false, false, false};
  std::size_t work_bytes = 0;
  ~FftPlans() {
    for (int i = 0; i < 3; ++i)
      if (created[i]) cufftDestroy(plan[i]);
  }
};

Family output_family(ConvDirection d) {
  return d == ConvDirection::forward ? kY : d == ConvDirection::grad_inputs ? kX : kW;
}

std::shared_ptr<FftPlans> make_plans(const ConvProblem& p, const FftGeometry& g) {
  auto plans = std::make_shared<FftPlans>();
  const bool dbl = p.dtype == DType::float64;
  const std::int64_t batch[3] = {p.N * p.C, p.K * p.Cg(), p.N * p.K};
  long long n[3];
  for (int a = 0; a < g.ndim; ++a) n[a] = g.size[static_cast<std::size_t>(a)];
  const Family out = output_family(p.direction);
  for (int f = 0; f < 3; ++f) {
    const bool inverse = f == out;
    const cufftType type = dbl ? (inverse ? CUFFT_Z2D : CUFFT_D2Z) : (inverse ? CUFFT_C2R : CUFFT_R2C);
    CG_CUFFT_CHECK(cufftCreate(&plans->plan[f]));
    plans->created[f] = true;
    CG_CUFFT_CHECK(cufftSetAutoAllocation(plans->plan[f], 0));
    std::size_t work = 0;
    CG_CUFFT_CHECK(cufftMakePlanMany64(plans->plan[f], g.ndim, n, nullptr, 1, 0, nullptr, 1, 0, type, batch[f], &work));
    plans->work_bytes = std::max(plans->work_bytes, work);
  }
  return plans;
}

/// Plans are costly to build (milliseconds), so they are cached per problem. The map
/// is leaked on purpose: destroying plans during static destruction may run after the
/// CUDA runtime has gone.
std::shared_ptr<FftPlans> plans_for(const ConvProblem& p, const FftGeometry& g) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<FftPlans>>;
  ConvProblem keyed = p;
  keyed.workspace_limit = std::numeric_limits<std::size_t>::max();
  const std::string key = keyed.key();
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  auto plans = make_plans(p, g);
  std::lock_guard lock(mu);
  if (cache->size() >= 64) {  // bound the cache: drop entries nobody is using
    for (auto it = cache->begin(); it != cache->end();)
      it = it->second.use_count() == 1 ? cache->erase(it) : std::next(it);
  }
  return cache->emplace(key, plans).first->second;
}

struct Buffers {
  void* real;
  void* spectra[3];
  void* work;
};

Buffers carve(const ConvProblem& p, const FftGeometry& g, void* workspace) {
  const std::size_t es = dtype_size(p.dtype);
  const std::int64_t count[3] = {p.N * p.C, p.K * p.Cg(), p.N * p.K};
  char* at = static_cast<char*>(workspace);
  Buffers b{};
  b.real = at;
  at += align_up(g.real_bytes);
  for (int f = 0; f < 3; ++f) {
    b.spectra[f] = at;
    at += align_up(static_cast<std::size_t>(count[f] * g.complex_per_signal) * 2 * es);
  }
  b.work = at;
  return b;
}

/// The gather that moves one family between its tensor and the FFT-sized real buffer.
/// to_fft: tensor -> padded signal; otherwise padded signal -> tensor (crop).
kernels::GatherSpec family_spec(const ConvProblem& p, const FftGeometry& g, Family f, bool to_fft) {
  kernels::GatherSpec s;
  s.batch = f == kX ? p.N * p.C : f == kW ? p.K * p.Cg() : p.N * p.K;
  for (int a = 0; a < p.ndim; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const std::int64_t extent = f == kX ? p.in[ua] : f == kW ? p.kernel[ua] : p.out[ua];
    s.dst[a] = to_fft ? g.size[ua] : extent;
    s.src[a] = to_fft ? extent : g.size[ua];
    const std::int64_t d = p.dilation[ua], span = (p.kernel[ua] - 1) * d;
    if (f == kX) {
      s.add[a] = to_fft ? -p.pad_pre[ua] : p.pad_pre[ua];
    } else if (f == kW) {
      // h[m] = w[m / d] (cross-correlation) or w[(span - m) / d] (convolution), and back.
      if (to_fft) {
        s.mul[a] = p.flip ? -1 : 1;
        s.add[a] = p.flip ? span : 0;
        s.div[a] = d;
      } else {
        s.mul[a] = p.flip ? -d : d;
        s.add[a] = p.flip ? span : 0;
      }
    }
  }
  return s;
}

class CudaFft final : public ConvAlgorithm {
 public:
  std::string name() const override { return kName; }
  DeviceKind device() const override { return DeviceKind::cuda; }
  std::vector<std::string> tags() const override { return {"conv_fft"}; }

  Status applicable(const ConvProblem& p) const override {
    if (!cuda_info().available) return Status::no(msg(kName, ": no usable GPU: ", cuda_info().reason));
    if (Status s = fft_static_check(p); !s) return s;
    if (std::string why; !own_kernels_loadable(&why)) return Status::no(msg(kName, ": ", why));
    try {
      const std::size_t ws = workspace_bytes(p);
      if (ws > p.workspace_limit)
        return Status::no(msg(kName, ": needs ", ws, " bytes of workspace, the limit is ", p.workspace_limit));
    } catch (const Error& e) {
      return Status::no(msg(kName, ": ", e.what()));
    }
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    const FftGeometry g = fft_geometry(p);
    if (!cuda_info().available || !fft_static_check(p)) return g.buffer_bytes();
    return g.buffer_bytes() + plans_for(p, g)->work_bytes;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    require_gpu(kName);
    if (Status s = fft_static_check(p); !s) throw ValueError(msg("cannot run ", p.key(), ": ", s.reason()));
    const FftGeometry g = fft_geometry(p);
    const std::shared_ptr<FftPlans> plans = plans_for(p, g);
    check_workspace(kName, ctx, g.buffer_bytes() + plans->work_bytes);
    const cudaStream_t stream = as_stream(ctx.stream);
    const bool dbl = p.dtype == DType::float64;
    const kernels::Elem elem = dbl ? kernels::Elem::f64 : kernels::Elem::f32;
    const Buffers b = carve(p, g, ctx.workspace);
    void* tensor[3] = {t.x, t.w, t.y};

    std::lock_guard lock(plans->mu);
    for (int f = 0; f < 3; ++f) {
      CG_CUFFT_CHECK(cufftSetStream(plans->plan[f], stream));
      CG_CUFFT_CHECK(cufftSetWorkArea(plans->plan[f], b.work));
    }
    const Family out = output_family(p.direction);
    for (int f = 0; f < 3; ++f) {  // the two inputs into the frequency domain
      if (f == out) continue;
      kernels::gather_nd(elem, tensor[f], b.real, family_spec(p, g, Family(f), true), 1.0, stream);
      if (dbl)
        CG_CUFFT_CHECK(cufftExecD2Z(plans->plan[f], static_cast<cufftDoubleReal*>(b.real),
                                    static_cast<cufftDoubleComplex*>(b.spectra[f])));
      else
        CG_CUFFT_CHECK(cufftExecR2C(plans->plan[f], static_cast<cufftReal*>(b.real),
                                    static_cast<cufftComplex*>(b.spectra[f])));
    }
    kernels::MacShape shape;
    shape.N = p.N;
    shape.C = p.C;
    shape.K = p.K;
    shape.G = p.G;
    shape.freq = g.complex_per_signal;
    switch (p.direction) {
      case ConvDirection::forward:
        kernels::spectral_mac(kernels::MacMode::forward, dbl, b.spectra[kX], b.spectra[kW], b.spectra[kY], shape, stream);
        break;
      case ConvDirection::grad_inputs:
        kernels::spectral_mac(kernels::MacMode::grad_inputs, dbl, b.spectra[kY], b.spectra[kW], b.spectra[kX], shape,
                              stream);
        break;
      case ConvDirection::grad_weights:
        kernels::spectral_mac(kernels::MacMode::grad_weights, dbl, b.spectra[kX], b.spectra[kY], b.spectra[kW], shape,
                              stream);
        break;
    }
    if (dbl)
      CG_CUFFT_CHECK(cufftExecZ2D(plans->plan[out], static_cast<cufftDoubleComplex*>(b.spectra[out]),
                                  static_cast<cufftDoubleReal*>(b.real)));
    else
      CG_CUFFT_CHECK(cufftExecC2R(plans->plan[out], static_cast<cufftComplex*>(b.spectra[out]),
                                  static_cast<cufftReal*>(b.real)));
    // cuFFT transforms are unnormalised: the round trip multiplies by prod(F).
    kernels::gather_nd(elem, b.real, tensor[out], family_spec(p, g, out, false),
                       1.0 / static_cast<double>(g.real_per_signal), stream);
  }
};

}  // namespace

void register_fft_algorithm(AlgorithmRegistry& r) { r.add(std::make_shared<CudaFft>()); }

}  // namespace convgraph::cuda
