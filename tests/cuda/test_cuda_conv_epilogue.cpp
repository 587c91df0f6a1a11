// Convolution epilogue fusion on the GPU (optimizer/conv_epilogue_fusion.cpp,
// backends/cuda/conv_cudnn.cpp, backends/cuda/cudnn_epilogue.cpp): a forward convolution
// placed on the GPU absorbs the bias, residual add and relu after it, and gives the
// results of the same graph on the host. Three paths, one per algorithm below:
// cuDNN's fused cudnnConvolutionBiasActivationForward (implicit_precomp_gemm with a bias),
// cuDNN's convolution followed by cuDNN tensor ops (implicit_gemm), and an algorithm that
// does not fuse (cuda.corrmm), whose caller applies the epilogue with cuDNN tensor ops.
// Needs a GPU: each case skips itself with "SKIPPED: no GPU: <reason>" where there is none.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "convgraph/backends/conv_algorithm.hpp"
#include "convgraph/backends/cuda.hpp"
#include "convgraph/ops/conv.hpp"
#include "convgraph/ops/math.hpp"
#include "convgraph/ops/nnet.hpp"
#include "convgraph/optimizer/conv_impl_op.hpp"
#include "convgraph/runtime/function.hpp"
#include "support/graph_fixtures.hpp"
#include "support/skip_without_gpu.hpp"

using namespace convgraph;
using namespace convgraph::testing;
using Catch::Contains;

namespace {

Tensor wave(DType t, const Shape& s, double phase) {
  std::vector<double> v(static_cast<std::size_t>(numel(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + phase);
  return Tensor::from(v, s, t);
}

/// device=cuda with every other convolution algorithm excluded.
Mode on_gpu_only(const std::string& algo) { return only_algorithm(algo, Mode::from_flags("device=cuda")); }

}  // namespace

TEST_CASE("GPU: conv epilogue fusion (bias, residual, relu) matches the host", "[cuda][conv_epilogue]") {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* what;
    Shape x, w;
    ConvOptions options;
  };
  const std::vector<Case> cases = {
      {"2D 3x3 half", {2, 3, 9, 10}, {8, 3, 3, 3}, {.border_mode = "half"}},
      {"2D stride 2", {2, 4, 11, 9}, {5, 4, 3, 3}, {.border_mode = "half", .subsample = {2, 2}}},
      {"1D", {3, 3, 17}, {5, 3, 4}, {}},
      {"3D", {1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, {.border_mode = "half"}},
  };
  struct Parts {
    bool bias, residual, relu;
  };
  const Parts parts[] = {{true, false, false}, {true, false, true}, {true, true, true},
                         {false, true, true},  {false, false, true}, {false, true, false}};
  const char* algorithms[] = {"cuda.cudnn.fwd.implicit_precomp_gemm", "cuda.cudnn.fwd.implicit_gemm", "cuda.corrmm"};
  for (const Case& c : cases)
    for (DType t : {DType::float32, DType::float64})
      for (const char* algo : algorithms)
        for (const Parts& p : parts) {
          INFO(c.what << ", " << dtype_name(t) << ", " << algo << ", bias " << p.bias << " residual " << p.residual
                      << " relu " << p.relu);
          Var x = input(t, c.x, "x"), w = input(t, c.w, "w");
          Var y = conv_nd(x, w, c.options);
          const Shape ys = y.shape();
          Var b = input(t, {ys[1]}, "b"), r = input(t, ys, "r");
          if (p.bias) y = bias_add(y, b);
          if (p.residual) y = y + r;
          if (p.relu) y = relu(y);
          const std::vector<Var> ins{x, w, b, r};
          Function gpu = compile(ins, {y}, on_gpu_only(algo));
          const ConvImplOp* conv = fused_conv(gpu);
          REQUIRE(conv != nullptr);
          CHECK(conv->epilogue().bias == p.bias);
          CHECK(conv->epilogue().residual == p.residual);
          CHECK((conv->epilogue().activation == ConvActivation::relu) == p.relu);
          CHECK_THAT(gpu.describe(), Contains("Conv" + conv->epilogue().text()) && Contains(algo));
          Function host = compile(ins, {y}, Mode::from_flags("device=cpu").excluding("conv_epilogue_fusion"));
          const std::vector<Tensor> args{wave(t, c.x, 0.1), wave(t, c.w, 0.7), wave(t, {ys[1]}, 1.3),
                                         wave(t, ys, 2.1)};
          const auto want = host(args)[0].to_vector(), got = gpu(args)[0].to_vector();
          REQUIRE(want.size() == got.size());
          const double tol = t == DType::float64 ? 1e-10 : 1e-4;
          std::size_t bad = 0;
          for (std::size_t i = 0; i < want.size(); ++i)
            if (!(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]))) && bad++ == 0)
              FAIL_CHECK("element " << i << ": GPU " << got[i] << " vs host " << want[i]);
          CHECK(bad == 0);
        }
}

TEST_CASE("GPU: conv epilogue fusion can be switched off", "[cuda][conv_epilogue]") {
  SKIP_WITHOUT_GPU();
  Var x = input(DType::float32, {2, 3, 8, 8}, "x"), w = input(DType::float32, {4, 3, 3, 3}, "w");
  Var b = input(DType::float32, {4}, "b");
  Var y = relu(bias_add(conv2d(x, w, {.border_mode = "half"}), b));
  CHECK(fused_conv(compile({x, w, b}, {y}, Mode::from_flags("device=cuda"))) != nullptr);
  CHECK(fused_conv(compile({x, w, b}, {y}, Mode::from_flags("device=cuda").excluding("conv_epilogue_fusion"))) ==
        nullptr);
}
