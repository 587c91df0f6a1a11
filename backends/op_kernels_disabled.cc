// Built instead of backends/cuda/op_kernels.cpp when convgraph is configured without
// CUDA: every CUDA DSL kernel throws DeviceError carrying cuda_info().reason. Device
// placement never puts a node on the GPU in such a build (optimize() refuses device=cuda
// first), so these are only reached by direct calls.
#include "convgraph/backends/cuda.hpp"
#include "backends/cuda/op_kernels.hpp"
#include "convgraph/backends/kernel_registry.hpp"

namespace convgraph::gpu {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(msg("cuda ", op, ": no CUDA kernels: ", cuda_info().reason));
}
}  // namespace

bool elementwise_dtype_supported(DType t) {
  return t == DType::float32 || t == DType::float64 || t == DType::int32 || t == DType::int64 || t == DType::boolean;
}

void unary(detail::UnaryKind, double, double, const Tensor&, Tensor&, void*) { no_cuda("unary"); }
void binary(detail::BinaryKind, const Tensor&, const Tensor&, Tensor&, void*) { no_cuda("binary"); }
void where(const Tensor&, const Tensor&, const Tensor&, Tensor&, void*) { no_cuda("where"); }
void cast(const Tensor&, Tensor&, void*) { no_cuda("cast"); }
void fill(Tensor&, double, void*) { no_cuda("fill"); }
void reduce(Reduce, const Tensor&, const std::vector<int>&, Tensor&, void*) { no_cuda("reduce"); }
void broadcast_copy(const Tensor&, Tensor&, double, void*) { no_cuda("broadcast_copy"); }
void softmax(bool, const Tensor&, Tensor&, void*) { no_cuda("softmax"); }
void softmax_grad(bool, const Tensor&, const Tensor&, Tensor&, void*) { no_cuda("softmax_grad"); }
void take_class(const Tensor&, const Tensor&, Tensor&, void*) { no_cuda("take_class"); }
void scatter_class(const Tensor&, const Tensor&, Tensor&, void*) { no_cuda("scatter_class"); }
void matmul(const Tensor&, const Tensor&, Tensor&, const Shape&, const Shape&, const Shape&, std::int64_t, std::int64_t,
            std::int64_t, void*) {
  no_cuda("matmul");
}

}  // namespace convgraph::gpu

namespace convgraph {
void register_cuda_kernels(KernelRegistry&) {}  // no CUDA kernels in this build
}  // namespace convgraph
