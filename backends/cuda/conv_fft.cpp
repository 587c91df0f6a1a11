// cuda.fft: cuFFT convolution for stride 1, all three directions. Geometry in
// include/backends/cuda/conv_cuda.hpp, the step sequence in conv_drivers.hpp
// (fft_run), the multiply-accumulate kernel in conv_fft.cu.
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

#include "backends/cuda/conv_drivers.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/registration.hpp"
#include "convgraph/backends/cuda.hpp"
#include "backends/cuda/conv_cuda.hpp"

namespace convgraph::cuda {

namespace {

constexpr const char* kFftName = "cuda.fft";

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

std::shared_ptr<FftPlans> make_plans(const ConvProblem& p, const FftGeometry& g) {
  auto plans = std::make_shared<FftPlans>();
  const bool dbl = p.dtype == DType::float64;
  const std::int64_t batch[3] = {p.N * p.C, p.K * p.Cg(), p.N * p.K};
  long long n[3];
  for (int a = 0; a < g.ndim; ++a) n[a] = g.size[static_cast<std::size_t>(a)];
  const FftFamily out = fft_output_family(p.direction);
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

/// The driver's steps on the GPU: gathers and the multiply-accumulate are kernels on
/// `stream`, the transforms are the cached plans (already bound to `stream` and the work
/// area by run()).
struct GpuFftOps {
  cudaStream_t stream;
  FftPlans* plans;
  bool dbl;
  void gather(const void* src, void* dst, const kernels::GatherSpec& s, double scale) {
    kernels::gather_nd(dbl ? kernels::Elem::f64 : kernels::Elem::f32, src, dst, s, scale, stream);
  }
  void r2c(FftFamily f, void* real, void* spectrum) {
    if (dbl)
      CG_CUFFT_CHECK(cufftExecD2Z(plans->plan[f], static_cast<cufftDoubleReal*>(real),
                                  static_cast<cufftDoubleComplex*>(spectrum)));
    else
      CG_CUFFT_CHECK(cufftExecR2C(plans->plan[f], static_cast<cufftReal*>(real), static_cast<cufftComplex*>(spectrum)));
  }
  void c2r(FftFamily f, void* spectrum, void* real) {
    // Multi-dimensional C2R may overwrite its input; the spectrum is not needed after.
    if (dbl)
      CG_CUFFT_CHECK(cufftExecZ2D(plans->plan[f], static_cast<cufftDoubleComplex*>(spectrum),
                                  static_cast<cufftDoubleReal*>(real)));
    else
      CG_CUFFT_CHECK(cufftExecC2R(plans->plan[f], static_cast<cufftComplex*>(spectrum), static_cast<cufftReal*>(real)));
  }
  void mac(kernels::MacMode mode, const void* a, const void* b, void* out, const kernels::MacShape& s) {
    kernels::spectral_mac(mode, dbl, a, b, out, s, stream);
  }
};

class CudaFft final : public ConvAlgorithm {
 public:
  std::string name() const override { return kFftName; }
  DeviceKind device() const override { return DeviceKind::cuda; }
  std::vector<std::string> tags() const override { return {"conv_fft"}; }

  Status applicable(const ConvProblem& p) const override {
    if (!cuda_info().available) return Status::no(msg(kFftName, ": no usable GPU: ", cuda_info().reason));
    if (Status s = fft_static_check(p); !s) return s;
    if (std::string why; !own_kernels_loadable(&why)) return Status::no(msg(kFftName, ": ", why));
    try {
      const std::size_t ws = workspace_bytes(p);
      if (ws > p.workspace_limit)
        return Status::no(msg(kFftName, ": needs ", ws, " bytes of workspace, the limit is ", p.workspace_limit));
    } catch (const Error& e) {
      return Status::no(msg(kFftName, ": ", e.what()));
    }
    return Status::ok();
  }

  std::size_t workspace_bytes(const ConvProblem& p) const override {
    const FftGeometry g = fft_geometry(p);
    if (!cuda_info().available || !fft_static_check(p)) return g.buffer_bytes();
    return g.buffer_bytes() + plans_for(p, g)->work_bytes;
  }

  void run(const ConvProblem& p, const ConvTensors& t, const ConvContext& ctx) const override {
    require_gpu(kFftName);
    if (Status s = fft_static_check(p); !s) throw ValueError(msg("cannot run ", p.key(), ": ", s.reason()));
    const FftGeometry g = fft_geometry(p);
    const std::shared_ptr<FftPlans> plans = plans_for(p, g);
    check_workspace(kFftName, ctx, g.buffer_bytes() + plans->work_bytes);
    const cudaStream_t stream = as_stream(ctx.stream);
    const FftBuffers b = fft_carve(p, g, ctx.workspace);
    std::lock_guard lock(plans->mu);  // a plan's stream and work area are per-plan state
    for (int f = 0; f < 3; ++f) {
      CG_CUFFT_CHECK(cufftSetStream(plans->plan[f], stream));
      CG_CUFFT_CHECK(cufftSetWorkArea(plans->plan[f], b.work));
    }
    GpuFftOps ops{stream, plans.get(), p.dtype == DType::float64};
    void* const tensor[3] = {t.x, t.w, t.y};
    fft_run(p, g, tensor, b, ops);
  }
};

}  // namespace

void register_fft_algorithm(AlgorithmRegistry& r) { r.add(std::make_shared<CudaFft>()); }

}  // namespace convgraph::cuda
