// The CUDA algorithm list, the cuDNN algorithm table and its static limits, the GPU-free
// workspace planning of cuda.corrmm / cuda.fft, and the clean refusal without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"

#if CONVGRAPH_WITH_CUDA
#include "backends/cuda/conv_cuda.hpp"
#include "backends/cuda/cudnn_algorithms.hpp"

using namespace convgraph;
using namespace convgraph::cuda;

namespace {

ConvProblem make(ConvDirection dir, int ndim, std::vector<std::int64_t> x, std::vector<std::int64_t> w,
                 BorderMode border = "valid", std::vector<std::int64_t> stride = {},
                 std::vector<std::int64_t> dil = {}, DType dtype = DType::float32,
                 std::optional<DType> compute = std::nullopt, std::int64_t groups = 1) {
  ConvParams p;
  p.ndim = ndim;
  p.border = std::move(border);
  p.stride = std::move(stride);
  p.dilation = std::move(dil);
  p.groups = groups;
  p.compute_dtype = compute;
  return ConvProblem::make(dir, p, x, w, dtype, "test");
}

const CudnnAlgoInfo& algo(ConvDirection d, std::string_view suffix) {
  for (const CudnnAlgoInfo& a : cudnn_algorithm_table())
    if (a.direction == d && a.suffix == suffix) return a;
  FAIL("no cuDNN algorithm " << suffix);
  return cudnn_algorithm_table().front();
}

Status check(const CudnnAlgoInfo& a, const ConvProblem& p) {
  CudnnConvPlan plan;
  if (Status s = plan_cudnn_conv(p, plan); !s) return s;
  return cudnn_static_check(a, p, plan);
}

const auto F = ConvDirection::forward;
const auto BD = ConvDirection::grad_inputs;
const auto BF = ConvDirection::grad_weights;

}  // namespace

TEST_CASE("the table lists every cuDNN 9 algorithm once per direction", "[cuda_algos]") {
  const auto table = cudnn_algorithm_table();
  REQUIRE(table.size() == 21);
  std::set<std::string> names;
  std::map<ConvDirection, std::set<int>> enums;
  for (const CudnnAlgoInfo& a : table) {
    names.insert(a.name());
    enums[a.direction].insert(a.algo);
    CHECK(a.name() == "cuda.cudnn." + std::string(direction_name(a.direction)) + "." + std::string(a.suffix));
  }
  CHECK(names.size() == 21);
  CHECK(enums[F] == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});  // CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
  CHECK(enums[BD] == std::set<int>{0, 1, 2, 3, 4, 5});      // BWD_DATA_ALGO_COUNT = 6
  CHECK(enums[BF] == std::set<int>{0, 1, 2, 3, 4, 5, 6});   // BWD_FILTER_ALGO_COUNT = 7
  for (const char* n :
       {"cuda.cudnn.fwd.implicit_gemm", "cuda.cudnn.fwd.implicit_precomp_gemm", "cuda.cudnn.fwd.gemm",
        "cuda.cudnn.fwd.direct", "cuda.cudnn.fwd.fft", "cuda.cudnn.fwd.fft_tiling", "cuda.cudnn.fwd.winograd",
        "cuda.cudnn.fwd.winograd_nonfused", "cuda.cudnn.bwd_data.algo_0", "cuda.cudnn.bwd_data.algo_1",
        "cuda.cudnn.bwd_data.fft", "cuda.cudnn.bwd_data.fft_tiling", "cuda.cudnn.bwd_data.winograd",
        "cuda.cudnn.bwd_data.winograd_nonfused", "cuda.cudnn.bwd_filter.algo_0", "cuda.cudnn.bwd_filter.algo_1",
        "cuda.cudnn.bwd_filter.fft", "cuda.cudnn.bwd_filter.algo_3", "cuda.cudnn.bwd_filter.winograd",
        "cuda.cudnn.bwd_filter.winograd_nonfused", "cuda.cudnn.bwd_filter.fft_tiling"})
    CHECK(names.count(n) == 1);
  // Grouped by direction; each group starts with its robust general-purpose algorithm.
  CHECK(table[0].name() == "cuda.cudnn.fwd.implicit_precomp_gemm");
  CHECK(table[8].name() == "cuda.cudnn.bwd_data.algo_1");
  CHECK(table[14].name() == "cuda.cudnn.bwd_filter.algo_1");
  // cuDNN's own notes: ALGO_0 (both backward) and BWD_FILTER ALGO_3 use atomics.
  CHECK_FALSE(algo(BD, "algo_0").deterministic);
  CHECK_FALSE(algo(BF, "algo_0").deterministic);
  CHECK_FALSE(algo(BF, "algo_3").deterministic);
  CHECK(algo(BD, "algo_1").deterministic);
  CHECK_FALSE(algo(F, "direct").implemented);
  CHECK_FALSE(algo(BF, "winograd").implemented);
}

TEST_CASE("documented static limits of the cuDNN algorithms", "[cuda_algos]") {
  const ConvProblem conv3x3 = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1);
  const ConvProblem conv5x5 = make(F, 2, {2, 4, 16, 16}, {8, 4, 5, 5}, 2);
  const ConvProblem strided = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {2, 2});
  const ConvProblem dilated = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 2, {}, {2, 2});
  const ConvProblem conv3d = make(F, 3, {1, 2, 8, 8, 8}, {3, 2, 3, 3, 3}, 1);
  const ConvProblem conv1d = make(F, 1, {2, 3, 40}, {4, 3, 3});
  const ConvProblem f64 = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {}, {}, DType::float64);
  const ConvProblem true_half = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {}, {}, DType::float16);
  const ConvProblem pseudo_half =
      make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {}, {}, DType::float16, DType::float32);

  SECTION("general algorithms take almost everything") {
    for (const ConvProblem* p : {&conv3x3, &conv5x5, &strided, &dilated, &conv3d, &conv1d, &f64, &pseudo_half}) {
      INFO(p->key());
      CHECK(check(algo(F, "implicit_gemm"), *p));
      CHECK(check(algo(F, "implicit_precomp_gemm"), *p));
    }
    CHECK_FALSE(check(algo(F, "implicit_gemm"), true_half));  // not TRUE_HALF
    CHECK(check(algo(F, "implicit_precomp_gemm"), true_half));
    const ConvProblem true_half_3d = make(F, 3, {1, 2, 8, 8, 8}, {3, 2, 3, 3, 3}, 1, {}, {}, DType::float16);
    CHECK_FALSE(check(algo(F, "implicit_precomp_gemm"), true_half_3d));
    CHECK(check(algo(F, "gemm"), conv3x3));
    CHECK_FALSE(check(algo(F, "gemm"), conv3d));
  }
  SECTION("winograd: 2D, 3x3, stride 1, dilation 1, float or pseudo-half") {
    const CudnnAlgoInfo& w = algo(F, "winograd");
    CHECK(check(w, conv3x3));
    CHECK(check(w, pseudo_half));
    CHECK_THAT(check(w, conv5x5).reason(), Catch::Contains("5x5"));
    CHECK_THAT(check(w, strided).reason(), Catch::Contains("stride 1"));
    CHECK_THAT(check(w, dilated).reason(), Catch::Contains("dilation 1"));
    CHECK_FALSE(check(w, conv3d));
    CHECK_FALSE(check(w, conv1d));
    CHECK_FALSE(check(w, f64));
    CHECK_FALSE(check(w, true_half));
  }
  SECTION("winograd_nonfused: 3x3 or 5x5, 5x5 not in true half") {
    const CudnnAlgoInfo& w = algo(F, "winograd_nonfused");
    CHECK(check(w, conv3x3));
    CHECK(check(w, conv5x5));
    CHECK(check(w, true_half));
    const ConvProblem half5 = make(F, 2, {2, 4, 16, 16}, {8, 4, 5, 5}, 2, {}, {}, DType::float16);
    CHECK_FALSE(check(w, half5));
    CHECK_FALSE(check(w, f64));
    CHECK_FALSE(check(w, make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 5}, 1)));
  }
  SECTION("fft: 2D, stride 1, input + 2 pad <= 256, filter > pad") {
    const CudnnAlgoInfo& fft = algo(F, "fft");
    CHECK(check(fft, conv3x3));
    CHECK(check(fft, make(F, 2, {1, 1, 254, 20}, {1, 1, 3, 3}, 1)));
    CHECK_THAT(check(fft, make(F, 2, {1, 1, 255, 20}, {1, 1, 3, 3}, 1)).reason(), Catch::Contains("256"));
    CHECK_THAT(check(fft, make(F, 2, {1, 1, 20, 20}, {1, 1, 3, 3}, 3)).reason(), Catch::Contains("exceed the padding"));
    CHECK_FALSE(check(fft, strided));
    CHECK_FALSE(check(fft, dilated));
    CHECK_FALSE(check(fft, conv3d));
    CHECK_FALSE(check(fft, f64));
    // Asymmetric (3, 0) padding: cuDNN sees pad 0 on an explicitly padded input.
    const BorderMode asym(std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 0}, {3, 0}});
    CHECK(check(fft, make(F, 2, {1, 1, 20, 20}, {1, 1, 3, 3}, asym)));
  }
  SECTION("fft_tiling: filter <= 32 in 2D, <= 16 in 3D") {
    const CudnnAlgoInfo& t = algo(F, "fft_tiling");
    CHECK(check(t, conv3x3));
    CHECK(check(t, conv3d));
    CHECK(check(t, make(F, 2, {1, 1, 40, 40}, {1, 1, 32, 3})));
    CHECK_FALSE(check(t, make(F, 2, {1, 1, 40, 40}, {1, 1, 33, 3})));
    CHECK(check(t, make(F, 3, {1, 1, 20, 20, 20}, {1, 1, 16, 3, 3})));
    CHECK_FALSE(check(t, make(F, 3, {1, 1, 20, 20, 20}, {1, 1, 17, 3, 3})));
    CHECK_FALSE(check(t, strided));
  }
  SECTION("unimplemented algorithms never apply") {
    CHECK_THAT(check(algo(F, "direct"), conv3x3).reason(), Catch::Contains("does not implement"));
    CHECK_FALSE(check(algo(BF, "winograd"), make(BF, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1)));
  }
  SECTION("backward directions") {
    const ConvProblem bd = make(BD, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1);
    const ConvProblem bf = make(BF, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1);
    const ConvProblem bd3 = make(BD, 3, {1, 2, 8, 8, 8}, {3, 2, 3, 3, 3}, 1);
    const ConvProblem bf3 = make(BF, 3, {1, 2, 8, 8, 8}, {3, 2, 3, 3, 3}, 1);
    for (const char* s : {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"})
      CHECK(check(algo(BD, s), bd));
    for (const char* s : {"algo_0", "algo_1", "fft", "algo_3", "winograd_nonfused", "fft_tiling"})
      CHECK(check(algo(BF, s), bf));
    for (const char* s : {"algo_0", "algo_1", "fft_tiling"}) CHECK(check(algo(BD, s), bd3));
    for (const char* s : {"fft", "winograd", "winograd_nonfused"}) CHECK_FALSE(check(algo(BD, s), bd3));
    for (const char* s : {"algo_0", "algo_1", "algo_3"}) CHECK(check(algo(BF, s), bf3));
    for (const char* s : {"fft", "fft_tiling", "winograd_nonfused"}) CHECK_FALSE(check(algo(BF, s), bf3));
    // float16 accumulation is refused for backward convolutions, float32 accumulation is fine.
    const ConvProblem bd_half = make(BD, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {}, {}, DType::float16);
    CHECK_THAT(check(algo(BD, "algo_1"), bd_half).reason(), Catch::Contains("float16 accumulation"));
    const ConvProblem bd_pseudo = make(BD, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1, {}, {}, DType::float16, DType::float32);
    CHECK(check(algo(BD, "algo_1"), bd_pseudo));
  }
  SECTION("an algorithm only computes its own direction") {
    CHECK_THAT(check(algo(BD, "algo_1"), conv3x3).reason(), Catch::Contains("bwd_data, not fwd"));
  }
}

TEST_CASE("register_cuda_conv_algorithms lists cuDNN, then corrmm, then fft", "[cuda_algos]") {
  AlgorithmRegistry r;
  register_cuda_conv_algorithms(r);
  const auto& all = r.all();
  REQUIRE(all.size() == 23);
  const auto table = cudnn_algorithm_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    CHECK(all[i]->name() == table[i].name());
    CHECK(all[i]->tags() == std::vector<std::string>{"conv_dnn", "cudnn", "fast_run", "fast_compile"});
  }
  CHECK(all[21]->name() == "cuda.corrmm");
  CHECK(all[21]->tags() == std::vector<std::string>{"conv_gemm", "fast_run", "fast_compile"});
  CHECK(all[22]->name() == "cuda.fft");
  CHECK(all[22]->tags() == std::vector<std::string>{"conv_fft"});
  for (const auto& a : all) CHECK(a->device() == DeviceKind::cuda);
  // The process-wide registry holds them too, ahead of the CPU algorithms.
  const AlgorithmRegistry& b = AlgorithmRegistry::builtin();
  REQUIRE(b.find("cuda.corrmm") != nullptr);
  REQUIRE(b.find("cuda.cudnn.fwd.winograd") != nullptr);
  CHECK(b.all().front()->name() == "cuda.cudnn.fwd.implicit_precomp_gemm");
}

TEST_CASE("without a GPU every CUDA algorithm declines, saying why, and run() throws", "[cuda_algos]") {
  const CudaInfo& info = cuda_info();
  if (info.available) {
    WARN("SKIPPED: a GPU is present (" << info.device_name << "): the no-GPU refusal path is not exercised");
    return;
  }
  REQUIRE_FALSE(info.reason.empty());
  AlgorithmRegistry r;
  register_cuda_conv_algorithms(r);
  const ConvProblem p = make(F, 2, {2, 4, 16, 16}, {8, 4, 3, 3}, 1);
  for (const auto& a : r.all()) {
    INFO(a->name());
    for (ConvDirection d : {F, BD, BF}) {
      ConvProblem q = p;
      q.direction = d;
      const Status s = a->applicable(q);
      REQUIRE_FALSE(s);
      CHECK_THAT(s.reason(), Catch::Contains(info.reason));
      CHECK_THAT(s.reason(), Catch::Contains("no usable GPU"));
      CHECK_NOTHROW(a->workspace_bytes(q));
      CHECK_THROWS_AS(a->run(q, ConvTensors{}, ConvContext{}), DeviceError);
    }
  }
}

TEST_CASE("cuda.corrmm: static limits and its one-sample column workspace", "[cuda_algos]") {
  CHECK(corrmm_static_check(make(F, 1, {2, 3, 40}, {4, 3, 3})));
  CHECK(corrmm_static_check(make(BD, 2, {2, 4, 9, 9}, {4, 2, 3, 3}, "full", {2, 2}, {2, 1}, DType::float32,
                                 std::nullopt, 2)));
  CHECK(corrmm_static_check(make(BF, 3, {1, 2, 5, 6, 7}, {3, 2, 2, 3, 1}, 1, {}, {}, DType::float64)));
  CHECK_FALSE(corrmm_static_check(make(F, 2, {1, 2, 6, 6}, {2, 2, 3, 3}, "valid", {}, {}, DType::float16)));
  CHECK_FALSE(corrmm_static_check(
      make(F, 2, {1, 2, 6, 6}, {2, 2, 3, 3}, "valid", {}, {}, DType::float32, DType::float64)));
  // C * prod(kernel) * prod(out) elements
  const ConvProblem p = make(F, 2, {8, 6, 12, 10}, {4, 3, 3, 2}, 1, {2, 1}, {}, DType::float32, std::nullopt, 2);
  CHECK(corrmm_workspace_bytes(p) == std::size_t(6 * 3 * 2) * std::size_t(p.out_numel()) * 4);
  const ConvProblem q = make(BF, 3, {1, 2, 5, 6, 7}, {3, 2, 2, 3, 1}, 1, {}, {}, DType::float64);
  CHECK(corrmm_workspace_bytes(q) == std::size_t(2 * 2 * 3 * 1) * std::size_t(q.out_numel()) * 8);
}

TEST_CASE("cuda.fft: stride 1 only, 2-3-5-7-smooth sizes covering the full linear size", "[cuda_algos]") {
  CHECK(fft_good_size(1) == 1);
  CHECK(fft_good_size(11) == 12);
  CHECK(fft_good_size(13) == 14);
  CHECK(fft_good_size(17) == 18);
  CHECK(fft_good_size(97) == 98);
  CHECK(fft_good_size(121) == 125);
  CHECK(fft_good_size(1024) == 1024);
  for (std::int64_t n = 1; n < 2000; ++n) {
    const std::int64_t g = fft_good_size(n);
    std::int64_t r = g;
    for (std::int64_t f : {2, 3, 5, 7})
      while (r % f == 0) r /= f;
    REQUIRE(r == 1);
    REQUIRE(g >= n);
    if (g > n) REQUIRE(fft_good_size(g - 1) == g);  // smallest
  }
  CHECK_FALSE(fft_static_check(make(F, 2, {1, 2, 9, 9}, {2, 2, 3, 3}, 1, {1, 2})));
  CHECK_FALSE(fft_static_check(make(F, 2, {1, 2, 9, 9}, {2, 2, 3, 3}, 1, {}, {}, DType::float16, DType::float32)));
  CHECK(fft_static_check(make(BD, 3, {1, 2, 5, 6, 7}, {4, 2, 2, 3, 1}, 1, {}, {2, 1, 1})));

  // 2D: in (9, 10), pads (1,1)/(0,2), kernel 3x3: full sizes 11 and 12 -> F = (12, 12)
  const BorderMode border(std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {0, 2}});
  const ConvProblem p = make(F, 2, {2, 6, 9, 10}, {4, 3, 3, 3}, border, {}, {}, DType::float32, std::nullopt, 2);
  REQUIRE(fft_static_check(p));
  const FftGeometry g = fft_geometry(p);
  CHECK(g.size == Axes3{12, 12, 1});
  CHECK(g.real_per_signal == 144);
  CHECK(g.complex_per_signal == 12 * 7);
  CHECK(g.real_bytes == std::size_t(std::max({2 * 6, 4 * 3, 2 * 4}) * 144 * 4));
  const auto aligned = [](std::size_t v) { return (v + 255) / 256 * 256; };
  CHECK(g.spectra_bytes == aligned(12 * 84 * 8) + aligned(12 * 84 * 8) + aligned(8 * 84 * 8));
  CHECK(g.buffer_bytes() == aligned(g.real_bytes) + g.spectra_bytes);
  // 1D float64
  const ConvProblem q = make(BF, 1, {3, 2, 20}, {5, 2, 4}, "full", {}, {3}, DType::float64);
  const FftGeometry h = fft_geometry(q);
  CHECK(h.size[0] == fft_good_size(20 + 2 * 9));
  CHECK(h.complex_per_signal == h.size[0] / 2 + 1);
}

#else

TEST_CASE("no CUDA algorithms are registered without CUDA", "[cuda_algos]") {
  convgraph::AlgorithmRegistry r;
  convgraph::register_cuda_conv_algorithms(r);
  CHECK(r.all().empty());
}

#endif
