// Every CUDA convolution algorithm against the CPU reference (float64 accumulation) over
// the shared sweep (tests/support/conv_cases.hpp), every direction. Needs a GPU: each
// case skips itself with "SKIPPED: no GPU: <reason>" where there is none.
//
// Tolerances, relative to max(1, max |reference|): float64 1e-9; float32 1e-4 for
// cuda.corrmm and 2e-3 for cuDNN and cuda.fft (FFT/Winograd transforms round more);
// float16 data with float32 accumulation 1e-2, with float16 accumulation 5e-2, bfloat16
// 5e-2 (against a reference computed from the same rounded inputs).
// Outputs and workspaces start as NaN garbage; inputs must come back unchanged.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"
#include "support/conv_cases.hpp"
#include "support/conv_run.hpp"

#if CONVGRAPH_WITH_CUDA
#include "backends/cuda/device.hpp"
#include "support/skip_without_gpu.hpp"

using namespace convgraph;
using namespace convgraph::testing;

namespace {


std::vector<const ConvAlgorithm*> cuda_algorithms() {
  std::vector<const ConvAlgorithm*> out;
  for (const auto& a : AlgorithmRegistry::builtin().all())
    if (a->device() == DeviceKind::cuda) out.push_back(a.get());
  return out;
}

bool is_cudnn(const ConvAlgorithm& a) { return a.name().rfind("cuda.cudnn.", 0) == 0; }

double tolerance(const ConvAlgorithm& a, const ConvProblem& p) {
  switch (p.dtype) {
    case DType::float64: return 1e-9;
    case DType::float32: return a.name() == "cuda.corrmm" ? 1e-4 : 2e-3;
    case DType::float16: return p.compute == DType::float16 ? 5e-2 : 1e-2;
    default: return 5e-2;
  }
}

Tensor host_tensor(const std::vector<double>& v, const std::vector<std::int64_t>& shape, DType dt) {
  Tensor t(dt, shape);
  for (std::size_t i = 0; i < v.size(); ++i) t.set(static_cast<std::int64_t>(i), v[i]);
  return t;
}

/// Values as the GPU sees them in `dt` (float16/bfloat16 round), back as doubles.
std::vector<double> rounded(const std::vector<double>& v, DType dt) {
  if (dt == DType::float32 || dt == DType::float64) return v;
  return host_tensor(v, {static_cast<std::int64_t>(v.size())}, dt).to_vector();
}

struct GpuRun {
  std::vector<double> out;
  bool inputs_intact = true;
};

/// Uploads the operands (the output as NaN), runs `algo` on the current stream with a
/// NaN-filled workspace of workspace_bytes(p), downloads the output and the inputs.
GpuRun run_gpu(const ConvAlgorithm& algo, const ConvProblem& p, const ConvOperands& ops) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ConvOperands in = ops;
  std::vector<double>& out = output_of(in, p.direction);
  std::fill(out.begin(), out.end(), nan);
  const Tensor dx = to_device(host_tensor(in.x, p.x_shape(), p.dtype), DeviceKind::cuda);
  const Tensor dw = to_device(host_tensor(in.w, p.w_shape(), p.dtype), DeviceKind::cuda);
  const Tensor dy = to_device(host_tensor(in.y, p.y_shape(), p.dtype), DeviceKind::cuda);
  const std::size_t ws = algo.workspace_bytes(p);
  Tensor dws;
  if (ws > 0) {
    const auto words = static_cast<std::int64_t>((ws + 3) / 4);
    dws = to_device(Tensor::full(DType::float32, {words}, nan), DeviceKind::cuda);
  }
  ConvContext ctx;
  ctx.workspace = ws ? dws.raw() : nullptr;
  ctx.workspace_bytes = ws;
  ctx.stream = current_stream();
  algo.run(p, ConvTensors{dx.raw(), dw.raw(), dy.raw(), {}}, ctx);
  synchronize_stream(ctx.stream);
  GpuRun r;
  const Tensor* written = p.direction == ConvDirection::forward ? &dy : p.direction == ConvDirection::grad_inputs ? &dx : &dw;
  r.out = to_device(*written, DeviceKind::cpu).to_vector();
  const auto same = [&](const Tensor& d, const std::vector<double>& v) {
    return &d == written || to_device(d, DeviceKind::cpu).to_vector() == rounded(v, p.dtype);
  };
  r.inputs_intact = same(dx, in.x) && same(dw, in.w) && same(dy, in.y);
  return r;
}

/// The edge cases plus every `stride`-th case of the big product sweep (default 4;
/// CONVGRAPH_CUDA_SWEEP_STRIDE=1 runs all).
std::vector<ConvCase> gpu_cases() {
  long stride = 4;
  if (const char* e = std::getenv("CONVGRAPH_CUDA_SWEEP_STRIDE")) stride = std::max(1L, std::atol(e));
  std::vector<ConvCase> out;
  long i = 0;
  for (ConvCase& c : conv_sweep_cases())
    if (c.name.rfind("sweep", 0) != 0 || i++ % stride == 0) out.push_back(std::move(c));
  return out;
}

struct Stats {
  long checked = 0, declined = 0;
  double max_err = 0;
};

}  // namespace

TEST_CASE("GPU: every CUDA algorithm matches the reference over the sweep (float32, float64)", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const auto cases = gpu_cases();
  const auto algos = cuda_algorithms();
  std::map<std::string, std::map<DType, Stats>> stats;
  // cuDNN guarantees no algorithm for a given problem (its heuristics may decline e.g. a
  // dilation of 600), so declines are reported, not failed; but cuDNN must run some
  // problems of every direction and rank, or our descriptors are wrong.
  std::map<std::pair<ConvDirection, int>, long> cudnn_runs;
  std::vector<std::string> no_cudnn;
  long runs = 0;
  std::uint64_t seed = 11;
  for (const ConvCase& c : cases)
    for (ConvDirection dir : kAllDirections) {
      const ConvProblem p64 = c.problem(dir, DType::float64);
      const ConvOperands ops = make_operands(p64, seed++);
      const std::vector<double> ref = reference_output(p64, ops);
      const double scale = std::max(1.0, max_abs(ref));
      for (DType dtype : {DType::float32, DType::float64}) {
        const ConvProblem p = c.problem(dir, dtype);
        cudnn_runs.emplace(std::pair{dir, p.ndim}, 0);
        bool any_cudnn = false;
        for (const ConvAlgorithm* a : algos) {
          Stats& st = stats[a->name()][dtype];
          const Status ok = a->applicable(p);
          if (!ok) {
            ++st.declined;
            if (a->name() == "cuda.corrmm") FAIL("cuda.corrmm declined " << p.key() << ": " << ok.reason());
            if (a->name() == "cuda.fft" && p.stride == Axes3{1, 1, 1})
              FAIL("cuda.fft declined stride-1 " << p.key() << ": " << ok.reason());
            continue;
          }
          GpuRun r;
          try {
            r = run_gpu(*a, p, ops);
          } catch (const DeviceContextError& e) {
            FAIL(a->name() << " lost the CUDA context on " << c.name << " " << p.key() << ": " << e.what());
          } catch (const std::exception& e) {
            // cuDNN may refuse at run time what its queries accepted: then it is declined
            // from now on. Anything else is a failure.
            const Status now = a->applicable(p);
            if (is_cudnn(*a) && !now && now.reason().find("at run time") != std::string::npos) {
              ++st.declined;
              continue;
            }
            FAIL(a->name() << " threw on " << c.name << " " << p.key() << ": " << e.what());
          }
          if (is_cudnn(*a)) {
            any_cudnn = true;
            ++cudnn_runs[{dir, p.ndim}];
          }
          const double err = max_abs_diff(r.out, ref) / scale;
          st.max_err = std::max(st.max_err, err);
          ++st.checked;
          ++runs;
          if (!(err <= tolerance(*a, p)) || !r.inputs_intact)
            FAIL(a->name() << " on " << c.name << " " << p.key() << ": relative error " << err << " (tolerance "
                           << tolerance(*a, p) << ")" << (r.inputs_intact ? "" : ", and it modified an input"));
        }
        if (!any_cudnn) no_cudnn.push_back(c.name + " " + p.key());
      }
    }
  std::printf("CUDA conv sweep: %zu cases, %ld runs checked\n", cases.size(), runs);
  for (const auto& [name, per] : stats)
    for (const auto& [dt, st] : per)
      std::printf("  %-40s %-8s checked %5ld declined %5ld max rel err %.3g\n", name.c_str(),
                  std::string(dtype_name(dt)).c_str(), st.checked, st.declined, st.max_err);
  std::printf("CUDA conv sweep: %zu problems no cuDNN algorithm ran%s\n", no_cudnn.size(), no_cudnn.empty() ? "" : ":");
  for (std::size_t i = 0; i < no_cudnn.size() && i < 40; ++i) std::printf("  no cuDNN: %s\n", no_cudnn[i].c_str());
  for (const auto& [key, n] : cudnn_runs) {
    INFO("cuDNN ran no " << direction_name(key.first) << " problem of rank " << key.second);
    CHECK(n > 0);
  }
  CHECK(runs > 0);
}

TEST_CASE("GPU: cuDNN in float16 and bfloat16", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const auto cases = conv_chunking_cases();
  long runs = 0;
  for (const ConvCase& c : cases)
    for (ConvDirection dir : kAllDirections)
      for (auto [dtype, compute] : {std::pair{DType::float16, DType::float32}, std::pair{DType::float16, DType::float16},
                                    std::pair{DType::bfloat16, DType::float32}}) {
        ConvProblem p = c.problem(dir, dtype);
        p.compute = compute;
        ConvOperands ops = make_operands(c.problem(dir, DType::float64), 21);
        ops.x = rounded(ops.x, dtype);
        ops.w = rounded(ops.w, dtype);
        ops.y = rounded(ops.y, dtype);
        const ConvProblem p64 = c.problem(dir, DType::float64);
        const std::vector<double> ref = reference_output(p64, ops);
        const double scale = std::max(1.0, max_abs(ref));
        for (const ConvAlgorithm* a : cuda_algorithms()) {
          if (!is_cudnn(*a) || !a->applicable(p)) continue;
          GpuRun r;
          try {
            r = run_gpu(*a, p, ops);
          } catch (const DeviceContextError&) {
            throw;
          } catch (const DeviceError& e) {
            INFO(a->name() << " " << p.key() << ": " << e.what());
            CHECK_FALSE(a->applicable(p));  // a run-time NOT_SUPPORTED: declined from now on
            continue;
          }
          const double err = max_abs_diff(r.out, ref) / scale;
          INFO(a->name() << " " << p.key() << " relative error " << err);
          CHECK(err <= tolerance(*a, p));
          CHECK(r.inputs_intact);
          ++runs;
        }
      }
  std::printf("CUDA half-precision checks: %ld runs\n", runs);
  CHECK(runs > 0);
}

TEST_CASE("GPU: algorithms honour the workspace limit and reject a short workspace", "[cuda]") {
  SKIP_WITHOUT_GPU();
  const ConvCase c = conv_chunking_cases().front();
  ConvProblem p = c.problem(ConvDirection::forward, DType::float32);
  const ConvAlgorithm* corrmm = AlgorithmRegistry::builtin().find("cuda.corrmm");
  REQUIRE(corrmm != nullptr);
  REQUIRE(corrmm->applicable(p));
  const std::size_t need = corrmm->workspace_bytes(p);
  REQUIRE(need > 0);
  p.workspace_limit = need - 1;
  CHECK_THAT(corrmm->applicable(p).reason(), Catch::Contains("workspace"));
  // cuDNN documents no algorithm as workspace-free, so the limit is checked on whatever
  // cuDNN algorithm applies: at its own need it applies, one byte below it declines.
  long limited = 0;
  for (const auto& a : AlgorithmRegistry::builtin().all()) {
    if (!is_cudnn(*a)) continue;
    ConvProblem q = c.problem(ConvDirection::forward, DType::float32);
    if (!a->applicable(q)) continue;
    const std::size_t ws = a->workspace_bytes(q);
    q.workspace_limit = ws;
    CHECK(a->applicable(q));
    if (ws == 0) continue;
    q.workspace_limit = ws - 1;
    INFO(a->name() << " needs " << ws << " bytes");
    CHECK_THAT(a->applicable(q).reason(), Catch::Contains("workspace"));
    ++limited;
  }
  std::printf("cuDNN forward algorithms with a workspace checked against the limit: %ld\n", limited);
  ConvContext small;
  small.workspace_bytes = 16;
  CHECK_THROWS_AS(corrmm->run(c.problem(ConvDirection::forward, DType::float32), ConvTensors{}, small), MemoryError);
}

#else

TEST_CASE("GPU convolution tests need a CUDA build", "[cuda]") {
  WARN("SKIPPED: no GPU: " << convgraph::cuda_info().reason);
}

#endif
