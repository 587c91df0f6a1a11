// ConvProblem -> cuDNN descriptor parameters (plan_cudnn_conv): GPU-free, runs in every
// build (backends/cudnn_plan.cpp is compiled with or without CUDA).
#include <catch2/catch.hpp>

#include <array>
#include <vector>

#include "backends/cuda/cudnn_plan.hpp"

using namespace convgraph;
using namespace convgraph::cuda;

namespace {

ConvProblem make(ConvDirection dir, int ndim, std::vector<std::int64_t> x, std::vector<std::int64_t> w,
                 BorderMode border, std::vector<std::int64_t> stride = {}, std::vector<std::int64_t> dil = {},
                 bool flip = false, std::int64_t groups = 1, DType dtype = DType::float32,
                 std::optional<DType> compute = std::nullopt) {
  ConvParams p;
  p.ndim = ndim;
  p.border = std::move(border);
  p.stride = std::move(stride);
  p.dilation = std::move(dil);
  p.filter_flip = flip;
  p.groups = groups;
  p.compute_dtype = compute;
  return ConvProblem::make(dir, p, x, w, dtype, "test");
}

CudnnConvPlan plan_of(const ConvProblem& p) {
  CudnnConvPlan plan;
  const Status s = plan_cudnn_conv(p, plan);
  INFO(s.reason());
  REQUIRE(s.is_ok());
  return plan;
}

std::vector<int> dims(const CudnnShape& s) { return {s.dims.begin(), s.dims.begin() + s.nb_dims}; }
std::vector<int> strides(const CudnnShape& s) { return {s.strides.begin(), s.strides.begin() + s.nb_dims}; }

}  // namespace

TEST_CASE("2D problems map to 4-d packed descriptors", "[cuda_plan]") {
  const ConvProblem p = make(ConvDirection::forward, 2, {8, 6, 12, 9}, {4, 6, 5, 3}, "half", {2, 1}, {1, 2});
  const CudnnConvPlan plan = plan_of(p);
  CHECK(plan.spatial_dims == 2);
  CHECK(dims(plan.x) == std::vector<int>{8, 6, 12, 9});
  CHECK(strides(plan.x) == std::vector<int>{6 * 12 * 9, 12 * 9, 9, 1});
  CHECK(dims(plan.w) == std::vector<int>{4, 6, 5, 3});
  CHECK(strides(plan.w) == std::vector<int>{6 * 5 * 3, 5 * 3, 3, 1});
  CHECK(dims(plan.y) == std::vector<int>{8, 4, static_cast<int>(p.out[0]), static_cast<int>(p.out[1])});
  // half: pad = dilated kernel / 2 = (5 / 2, 5 / 2) with kernel (5, 3) and dilation (1, 2).
  CHECK(plan.pad[0] == 2);
  CHECK(plan.pad[1] == 2);
  CHECK(plan.stride[0] == 2);
  CHECK(plan.stride[1] == 1);
  CHECK(plan.dilation[0] == 1);
  CHECK(plan.dilation[1] == 2);
  CHECK(plan.groups == 1);
  CHECK(plan.mode == CudnnConvMode::cross_correlation);
  CHECK_FALSE(plan.explicit_pad.needed);
  CHECK(plan.explicit_pad.bytes == 0);
  CHECK(plan.cudnn_workspace_offset() == 0);
}

TEST_CASE("3D problems map to 5-d descriptors", "[cuda_plan]") {
  const ConvProblem p =
      make(ConvDirection::grad_weights, 3, {2, 4, 7, 8, 9}, {6, 4, 3, 2, 1}, BorderMode({1, 0, 2}), {1, 2, 3});
  const CudnnConvPlan plan = plan_of(p);
  CHECK(plan.spatial_dims == 3);
  CHECK(dims(plan.x) == std::vector<int>{2, 4, 7, 8, 9});
  CHECK(strides(plan.x) == std::vector<int>{4 * 7 * 8 * 9, 7 * 8 * 9, 8 * 9, 9, 1});
  CHECK(dims(plan.w) == std::vector<int>{6, 4, 3, 2, 1});
  CHECK(dims(plan.y) == std::vector<int>{2, 6, static_cast<int>(p.out[0]), static_cast<int>(p.out[1]),
                                         static_cast<int>(p.out[2])});
  CHECK(plan.pad == std::array<int, 3>{1, 0, 2});
  CHECK(plan.stride == std::array<int, 3>{1, 2, 3});
  CHECK(plan.dilation == std::array<int, 3>{1, 1, 1});
}

TEST_CASE("1D problems run as 2D with a unit height axis", "[cuda_plan]") {
  const ConvProblem p = make(ConvDirection::forward, 1, {3, 2, 17}, {5, 2, 4}, 3, {2}, {3});
  const CudnnConvPlan plan = plan_of(p);
  CHECK(plan.spatial_dims == 2);
  CHECK(dims(plan.x) == std::vector<int>{3, 2, 1, 17});
  CHECK(strides(plan.x) == std::vector<int>{34, 17, 17, 1});
  CHECK(dims(plan.w) == std::vector<int>{5, 2, 1, 4});
  CHECK(dims(plan.y) == std::vector<int>{3, 5, 1, static_cast<int>(p.out[0])});
  CHECK(plan.pad[0] == 0);
  CHECK(plan.stride[0] == 1);
  CHECK(plan.dilation[0] == 1);
  CHECK(plan.pad[1] == 3);
  CHECK(plan.stride[1] == 2);
  CHECK(plan.dilation[1] == 3);
}

TEST_CASE("groups go to the group count and the filter's channel dim", "[cuda_plan]") {
  const ConvProblem p = make(ConvDirection::grad_inputs, 2, {2, 12, 9, 9}, {8, 3, 3, 3}, 1, {}, {}, false, 4);
  const CudnnConvPlan plan = plan_of(p);
  CHECK(plan.groups == 4);
  CHECK(dims(plan.w) == std::vector<int>{8, 3, 3, 3});
  CHECK(dims(plan.x) == std::vector<int>{2, 12, 9, 9});
  CHECK(dims(plan.y) == std::vector<int>{2, 8, 9, 9});
  // depthwise
  const ConvProblem dw = make(ConvDirection::forward, 2, {1, 16, 5, 5}, {16, 1, 3, 3}, "valid", {}, {}, false, 16);
  CHECK(plan_of(dw).groups == 16);
}

TEST_CASE("filter_flip selects CUDNN_CONVOLUTION, otherwise cross-correlation", "[cuda_plan]") {
  const auto mode = [](bool flip) {
    return plan_of(make(ConvDirection::forward, 2, {1, 1, 5, 5}, {1, 1, 3, 3}, "valid", {}, {}, flip)).mode;
  };
  CHECK(mode(true) == CudnnConvMode::convolution);
  CHECK(mode(false) == CudnnConvMode::cross_correlation);
  CHECK(static_cast<int>(CudnnConvMode::convolution) == 0);  // CUDNN_CONVOLUTION
  CHECK(static_cast<int>(CudnnConvMode::cross_correlation) == 1);
}

TEST_CASE("asymmetric padding: symmetric minimum to cuDNN, the rest as an explicit padded copy", "[cuda_plan]") {
  // axis 0 pads (1, 2), axis 1 pads (3, 0)
  const BorderMode border(std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {3, 0}});
  const ConvProblem p = make(ConvDirection::forward, 2, {2, 3, 10, 11}, {4, 3, 3, 3}, border, {2, 1});
  const CudnnConvPlan plan = plan_of(p);
  const CudnnPadPlan& pad = plan.explicit_pad;
  REQUIRE(pad.needed);
  CHECK(plan.pad[0] == 1);
  CHECK(plan.pad[1] == 0);
  CHECK(pad.extra_pre == Axes3{0, 3, 0});
  CHECK(pad.extra_post == Axes3{1, 0, 0});
  CHECK(pad.padded_in == Axes3{11, 14, 1});
  CHECK(dims(plan.x) == std::vector<int>{2, 3, 11, 14});
  CHECK(pad.bytes == std::size_t{2 * 3 * 11 * 14 * 4});
  CHECK(plan.cudnn_workspace_offset() == (pad.bytes + 255) / 256 * 256);
  CHECK(plan.cudnn_workspace_offset() % kCudnnWorkspaceAlign == 0);
  // The output cuDNN computes from xp with the symmetric pad is the problem's output.
  CHECK(dims(plan.y) == std::vector<int>{2, 4, static_cast<int>(p.out[0]), static_cast<int>(p.out[1])});
  for (int a = 0; a < 2; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    const std::int64_t cudnn_out =
        (pad.padded_in[ua] + 2 * plan.pad[ua] - p.dilated_kernel(a)) / p.stride[ua] + 1;
    CHECK(cudnn_out == p.out[ua]);
  }
  // Same plan for every direction: the buffer is xp (forward, grad_weights) or dxp (grad_inputs).
  const ConvProblem gi = make(ConvDirection::grad_inputs, 2, {2, 3, 10, 11}, {4, 3, 3, 3}, border, {2, 1});
  CHECK(plan_of(gi).explicit_pad.bytes == pad.bytes);
}

TEST_CASE("the explicit pad plan preserves every output size", "[cuda_plan]") {
  // Exhaustive over small 1D geometries: xp with min(pre, post) symmetric padding gives the
  // same output extent as the asymmetric original, for any stride and dilation.
  int checked = 0;
  for (std::int64_t in = 1; in <= 9; ++in)
    for (std::int64_t k = 1; k <= 4; ++k)
      for (std::int64_t pre = 0; pre <= 4; ++pre)
        for (std::int64_t post = 0; post <= 4; ++post)
          for (std::int64_t s = 1; s <= 3; ++s)
            for (std::int64_t d = 1; d <= 2; ++d) {
              const std::int64_t dk = (k - 1) * d + 1;
              if (in + pre + post < dk) continue;
              const BorderMode border(std::vector<std::pair<std::int64_t, std::int64_t>>{{pre, post}});
              const ConvProblem p = make(ConvDirection::forward, 1, {1, 1, in}, {1, 1, k}, border, {s}, {d});
              const CudnnConvPlan plan = plan_of(p);
              CHECK(plan.explicit_pad.needed == (pre != post));
              CHECK(plan.pad[1] == std::min(pre, post));
              CHECK(plan.y.dims[3] == p.out[0]);
              CHECK((plan.x.dims[3] + 2 * plan.pad[1] - dk) / s + 1 == p.out[0]);
              ++checked;
            }
  CHECK(checked > 1000);
}

TEST_CASE("dtype and compute type map to cuDNN data, compute and math types", "[cuda_plan]") {
  const auto plan_for = [](DType dtype, std::optional<DType> compute, CudnnConvPlan& out) {
    return plan_cudnn_conv(make(ConvDirection::forward, 2, {1, 2, 6, 6}, {2, 2, 3, 3}, "valid", {}, {}, false, 1,
                                dtype, compute),
                           out);
  };
  CudnnConvPlan plan;
  REQUIRE(plan_for(DType::float32, std::nullopt, plan));
  CHECK(plan.data_type == CudnnDataType::float32);
  CHECK(plan.compute_type == CudnnDataType::float32);
  CHECK(plan.math == CudnnMathType::fma);  // no TF32 for a float32 compute type

  REQUIRE(plan_for(DType::float64, std::nullopt, plan));
  CHECK(plan.data_type == CudnnDataType::float64);
  CHECK(plan.compute_type == CudnnDataType::float64);

  REQUIRE(plan_for(DType::float16, DType::float32, plan));
  CHECK(plan.data_type == CudnnDataType::float16);
  CHECK(plan.compute_type == CudnnDataType::float32);
  CHECK(plan.math == CudnnMathType::tensor_op);

  REQUIRE(plan_for(DType::float16, std::nullopt, plan));  // true half
  CHECK(plan.compute_type == CudnnDataType::float16);

  REQUIRE(plan_for(DType::bfloat16, std::nullopt, plan));  // bf16 accumulates in float32
  CHECK(plan.data_type == CudnnDataType::bfloat16);
  CHECK(plan.compute_type == CudnnDataType::float32);
  REQUIRE(plan_for(DType::bfloat16, DType::float32, plan));
  CHECK(plan.compute_type == CudnnDataType::float32);

  const Status f32_in_f64 = plan_for(DType::float32, DType::float64, plan);
  REQUIRE_FALSE(f32_in_f64);
  CHECK_THAT(f32_in_f64.reason(), Catch::Contains("float32") && Catch::Contains("float64"));
  CHECK_FALSE(plan_for(DType::float32, DType::float16, plan));
  CHECK_FALSE(plan_for(DType::float64, DType::float32, plan));
  CHECK_FALSE(plan_for(DType::int32, std::nullopt, plan));

  // The enum values are cuDNN's (also static_asserted where cudnn.h is visible).
  CHECK(static_cast<int>(CudnnDataType::float32) == 0);
  CHECK(static_cast<int>(CudnnDataType::float64) == 1);
  CHECK(static_cast<int>(CudnnDataType::float16) == 2);
  CHECK(static_cast<int>(CudnnDataType::bfloat16) == 9);
  CHECK(cudnn_data_type_name(CudnnDataType::bfloat16) == "CUDNN_DATA_BFLOAT16");
}

TEST_CASE("tensors beyond the legacy API's 32-bit limits are declined", "[cuda_plan]") {
  CudnnConvPlan plan;
  // 2^31 input elements: N * C * H * W = 2048 * 1024 * 32 * 32
  const ConvProblem big = make(ConvDirection::forward, 2, {2048, 1024, 32, 32}, {1, 1024, 1, 1}, "valid");
  const Status s = plan_cudnn_conv(big, plan);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.reason(), Catch::Contains("2^31"));
  const ConvProblem ok = make(ConvDirection::forward, 2, {2047, 1024, 32, 32}, {1, 1024, 1, 1}, "valid");
  CHECK(plan_cudnn_conv(ok, plan));
}

TEST_CASE("plan text names shapes, pads, mode and types", "[cuda_plan]") {
  const BorderMode border(std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {2, 2}});
  const CudnnConvPlan plan =
      plan_of(make(ConvDirection::forward, 2, {2, 4, 8, 8}, {6, 2, 3, 3}, border, {}, {}, true, 2));
  const std::string s = plan.to_string();
  CHECK_THAT(s, Catch::Contains("x 2x4x9x8"));
  CHECK_THAT(s, Catch::Contains("w 6x2x3x3"));
  CHECK_THAT(s, Catch::Contains("pad 0,2"));
  CHECK_THAT(s, Catch::Contains("g2 conv"));
  CHECK_THAT(s, Catch::Contains("CUDNN_DATA_FLOAT/CUDNN_DATA_FLOAT"));
  CHECK_THAT(s, Catch::Contains("xpad"));
}
