// Tensor-level entry points of the CUDA DSL kernels (include/.../cuda/op_kernels.hpp):
// checks, index plans, and cuBLAS for matmul.
#include "backends/cuda/op_kernels.hpp"

#include <algorithm>
#include <array>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_handles.hpp"
#include "backends/cuda/op_launch.hpp"
#include "backends/cuda/strided_plan.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/elementwise_info.hpp"
#include "ops/matmul_shape.hpp"
#include "ops/reduce_info.hpp"
#include "ops/softmax_info.hpp"

namespace convgraph::gpu {

namespace {

launch::Elem elem(DType t) {
  switch (t) {
    case DType::float16: return launch::Elem::f16;
    case DType::bfloat16: return launch::Elem::bf16;
    case DType::float32: return launch::Elem::f32;
    case DType::float64: return launch::Elem::f64;
    case DType::int32: return launch::Elem::i32;
    case DType::int64: return launch::Elem::i64;
    case DType::boolean: return launch::Elem::b8;
  }
  throw TypeError("cuda kernels: unknown dtype");
}

/// Every operand must be a contiguous GPU tensor (the runtime guarantees it; a direct
/// caller may not).
void check_device(const char* op, std::initializer_list<const Tensor*> ts) {
  cuda::require_gpu(op);
  for (const Tensor* t : ts) {
    if (t->device() != DeviceKind::cuda)
      throw DeviceError(msg(op, ": operand of shape ", shape_to_string(t->shape()), " lives on ",
                            device_name(t->device()), "; the CUDA kernel needs it on cuda"));
    if (!t->is_contiguous()) throw ValueError(msg(op, ": operand of shape ", shape_to_string(t->shape()), " is not contiguous"));
  }
}

}  // namespace

bool elementwise_dtype_supported(DType t) {
  return t == DType::float32 || t == DType::float64 || t == DType::int32 || t == DType::int64 || t == DType::boolean;
}

void unary(detail::UnaryKind op, double pa, double pb, const Tensor& x, Tensor& out, void* stream) {
  check_device("cuda unary", {&x, &out});
  launch::unary(op, elem(x.dtype()), x.raw(), out.raw(), x.numel(), pa, pb, cuda::as_stream(stream));
}

void binary(detail::BinaryKind op, const Tensor& a, const Tensor& b, Tensor& out, void* stream) {
  check_device("cuda binary", {&a, &b, &out});
  const BroadcastPlan p = plan_broadcast({a.shape(), b.shape()}, out.shape());
  launch::binary(op, elem(a.dtype()), a.raw(), b.raw(), out.raw(), p, cuda::as_stream(stream));
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out, void* stream) {
  check_device("cuda where", {&cond, &a, &b, &out});
  const BroadcastPlan p = plan_broadcast({cond.shape(), a.shape(), b.shape()}, out.shape());
  launch::where(elem(a.dtype()), cond.raw(), a.raw(), b.raw(), out.raw(), p, cuda::as_stream(stream));
}

void cast(const Tensor& x, Tensor& out, void* stream) {
  check_device("cuda cast", {&x, &out});
  launch::cast(elem(x.dtype()), x.raw(), elem(out.dtype()), out.raw(), x.numel(), cuda::as_stream(stream));
}

void fill(Tensor& out, double value, void* stream) {
  check_device("cuda fill", {&out});
  launch::fill(elem(out.dtype()), out.raw(), out.numel(), value, cuda::as_stream(stream));
}

void reduce(Reduce kind, const Tensor& x, const std::vector<int>& axes, Tensor& out, void* stream) {
  check_device("cuda reduce", {&x, &out});
  const ReducePlan p = plan_reduce(x.shape(), axes);
  if ((kind == Reduce::max || kind == Reduce::min) && p.red_count == 0 && p.out_count > 0)
    throw ValueError(msg(kind == Reduce::max ? "max" : "min", ": zero-size reduction of ", shape_to_string(x.shape()),
                         " has no identity"));
  launch::reduce(static_cast<launch::ReduceCode>(kind), elem(x.dtype()), x.raw(), out.raw(), p, cuda::as_stream(stream));
}

void broadcast_copy(const Tensor& x, Tensor& out, double scale, void* stream) {
  check_device("cuda broadcast_copy", {&x, &out});
  const BroadcastPlan p = plan_broadcast({x.shape()}, out.shape());
  launch::broadcast_copy(elem(x.dtype()), x.raw(), out.raw(), p, scale, cuda::as_stream(stream));
}

void softmax(bool log, const Tensor& x, Tensor& out, void* stream) {
  check_device("cuda softmax", {&x, &out});
  const std::int64_t n = x.rank() ? x.shape().back() : 1;
  launch::softmax(log, x.dtype() == DType::float64, x.raw(), out.raw(), n ? x.numel() / n : 0, n,
                  cuda::as_stream(stream));
}

void softmax_grad(bool log, const Tensor& gy, const Tensor& y, Tensor& out, void* stream) {
  check_device("cuda softmax_grad", {&gy, &y, &out});
  const std::int64_t n = y.rank() ? y.shape().back() : 1;
  launch::softmax_grad(log, y.dtype() == DType::float64, gy.raw(), y.raw(), out.raw(), n ? y.numel() / n : 0, n,
                       cuda::as_stream(stream));
}

void take_class(const Tensor& p, const Tensor& idx, Tensor& out, void* stream) {
  check_device("cuda take_class", {&p, &idx, &out});
  launch::take_class(p.dtype() == DType::float64, idx.dtype() == DType::int64, p.raw(), idx.raw(), out.raw(),
                     out.numel(), p.shape().back(), cuda::as_stream(stream));
}

void scatter_class(const Tensor& g, const Tensor& idx, Tensor& out, void* stream) {
  check_device("cuda scatter_class", {&g, &idx, &out});
  const cudaStream_t s = cuda::as_stream(stream);
  launch::fill(elem(out.dtype()), out.raw(), out.numel(), 0.0, s);
  launch::scatter_class(out.dtype() == DType::float64, idx.dtype() == DType::int64, g.raw(), idx.raw(), out.raw(),
                        g.numel(), out.shape().back(), s);
}

// Row-major C (m x n) = A (m x k) * B (k x n) is column-major C^T = B^T * A^T: cuBLAS gets
// B first, with the row-major leading dimensions as is, and no transposes.
void matmul(const Tensor& a, const Tensor& b, Tensor& out, const Shape& batch, const Shape& a_batch,
            const Shape& b_batch, std::int64_t m, std::int64_t k, std::int64_t n, void* stream) {
  check_device("cuda matmul", {&a, &b, &out});
  if (a.dtype() != DType::float32 && a.dtype() != DType::float64)
    throw TypeError(msg("cuda matmul: cuBLAS path covers float32/float64, got ", dtype_name(a.dtype())));
  const cudaStream_t s = cuda::as_stream(stream);
  const std::int64_t nb = numel(batch);
  if (nb == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    launch::fill(elem(out.dtype()), out.raw(), out.numel(), 0.0, s);
    return;
  }
  // cuBLAS takes sizes and leading dimensions as int; batches larger than that are split.
  const int M = checked_int(m, "cuda matmul", "m (rows of a)");
  const int N = checked_int(n, "cuda matmul", "n (columns of b)");
  const int K = checked_int(k, "cuda matmul", "k (columns of a)");
  const bool dbl = a.dtype() == DType::float64;
  const std::size_t es = dtype_size(a.dtype());
  cublasHandle_t h = cuda::cublas_handle(s);
  auto gemm = [&](const char* pa, const char* pb, char* pc, long long sa, long long sb, long long count) {
    constexpr long long kMaxBatch = 1LL << 30;
    for (long long first = 0; first < count; first += kMaxBatch) {
      const int c = static_cast<int>(std::min(kMaxBatch, count - first));
      const char* a0 = pa + static_cast<std::size_t>(first * sa) * es;
      const char* b0 = pb + static_cast<std::size_t>(first * sb) * es;
      char* c0 = pc + static_cast<std::size_t>(first * m * n) * es;
      if (dbl) {
        const double one = 1, zero = 0;
        CG_CUBLAS_CHECK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one,
                                                  reinterpret_cast<const double*>(b0), N, sb,
                                                  reinterpret_cast<const double*>(a0), K, sa, &zero,
                                                  reinterpret_cast<double*>(c0), N, m * n, c));
      } else {
        const float one = 1, zero = 0;
        CG_CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one,
                                                  reinterpret_cast<const float*>(b0), N, sb,
                                                  reinterpret_cast<const float*>(a0), K, sa, &zero,
                                                  reinterpret_cast<float*>(c0), N, m * n, c));
      }
    }
  };
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  char* pc = static_cast<char*>(out.raw());
  const std::int64_t na = numel(a_batch), nbb = numel(b_batch);
  // One strided-batched call when each operand is either whole (not broadcast) or a
  // single matrix repeated (stride 0); mixed broadcasts fall back to a call per matrix.
  if ((na == nb || na == 1) && (nbb == nb || nbb == 1)) {
    gemm(pa, pb, pc, na == 1 ? 0 : m * k, nbb == 1 ? 0 : k * n, nb);
    return;
  }
  const Shape sa = contiguous_strides(a_batch), sb = contiguous_strides(b_batch);
  for (std::int64_t i = 0; i < nb; ++i) {
    std::int64_t rem = i, oa = 0, ob = 0;
    for (std::size_t d = batch.size(); d-- > 0;) {
      const std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      if (a_batch[d] != 1) oa += idx * sa[d];
      if (b_batch[d] != 1) ob += idx * sb[d];
    }
    gemm(pa + static_cast<std::size_t>(oa * m * k) * es, pb + static_cast<std::size_t>(ob * k * n) * es,
         pc + static_cast<std::size_t>(i * m * n) * es, 0, 0, 1);
  }
}

}  // namespace convgraph::gpu

namespace convgraph {

namespace {

// The CUDA kernels' own enum, mapped by name rather than cast by declaration order.
gpu::Reduce cuda_reduce(detail::ReduceKind k) {
  switch (k) {
    case detail::ReduceKind::sum: return gpu::Reduce::sum;
    case detail::ReduceKind::mean: return gpu::Reduce::mean;
    case detail::ReduceKind::max: return gpu::Reduce::max;
    case detail::ReduceKind::min: return gpu::Reduce::min;
  }
  throw ValueError("reduce: unknown kind");
}

Status dtype_ok(DType t, bool allow_bool) {
  if (gpu::elementwise_dtype_supported(t) && (allow_bool || t != DType::boolean)) return Status::ok();
  return Status::no(msg("the CUDA elementwise kernels do not cover ", dtype_name(t)));
}

Status float_ok(const char* what, DType t) {
  if (t == DType::float32 || t == DType::float64) return Status::ok();
  return Status::no(msg("the CUDA ", what, " kernel covers float32/float64, not ", dtype_name(t)));
}


void register_elementwise(KernelRegistry& r) {
  r.add("elementwise.unary", DeviceKind::cuda,
        {[](const Op&, const std::vector<TensorType>& in) { return dtype_ok(in[0].dtype, false); },
         [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           const detail::ElementwiseInfo i = detail::elementwise_info(op);
           gpu::unary(i.unary, i.param[0], i.param[1], in[0], out, ctx.stream);
         }});
  r.add("elementwise.binary", DeviceKind::cuda,
        {[](const Op&, const std::vector<TensorType>& in) { return dtype_ok(in[0].dtype, true); },
         [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::binary(detail::elementwise_info(op).binary, in[0], in[1], out, ctx.stream);
         }});
  r.add("elementwise.where", DeviceKind::cuda,
        {nullptr, [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::where(in[0], in[1], in[2], out, ctx.stream);
         }});
  r.add("elementwise.cast", DeviceKind::cuda,
        {nullptr, [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::cast(in[0], out, ctx.stream);
         }});
}

void register_reductions(KernelRegistry& r) {
  auto any_dtype = [](const Op&, const std::vector<TensorType>& in) { return dtype_ok(in[0].dtype, true); };
  r.add("reduce", DeviceKind::cuda,
        {any_dtype, [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           const detail::ReduceAttrs& a = detail::reduce_attrs(op);
           gpu::reduce(cuda_reduce(a.kind), in[0], a.axes, out, ctx.stream);
         }});
  r.add("sum_to", DeviceKind::cuda,
        {any_dtype, [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::reduce(gpu::Reduce::sum, in[0], detail::sum_to_axes(in[0].shape(), out.shape()), out, ctx.stream);
         }});
  r.add("broadcast_to", DeviceKind::cuda,
        {[](const Op& op, const std::vector<TensorType>& in) {
           return detail::broadcast_attrs(op).mean ? float_ok("broadcast_mean_grad", in[0].dtype)
                                                   : dtype_ok(in[0].dtype, true);
         },
         [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           const detail::BroadcastAttrs& a = detail::broadcast_attrs(op);
           const Tensor g = in[0].reshape(a.source_shape(in[0].shape(), out.rank()));
           gpu::broadcast_copy(g, out, a.scale(in[0].shape(), out.shape()), ctx.stream);
         }});
  r.add("fill", DeviceKind::cuda,
        {nullptr, [](const Op& op, const std::vector<Tensor>&, Tensor& out, const ExecContext& ctx) {
           gpu::fill(out, detail::fill_value(op), ctx.stream);
         }});
}

void register_nnet(KernelRegistry& r) {
  r.add("softmax", DeviceKind::cuda,
        {nullptr, [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::softmax(detail::softmax_is_log(op), in[0], out, ctx.stream);
         }});
  r.add("softmax_grad", DeviceKind::cuda,
        {nullptr, [](const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::softmax_grad(detail::softmax_is_log(op), in[0], in[1], out, ctx.stream);
         }});
  r.add("take_class", DeviceKind::cuda,
        {nullptr, [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::take_class(in[0], in[1], out, ctx.stream);
         }});
  r.add("scatter_class", DeviceKind::cuda,
        {nullptr, [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           gpu::scatter_class(in[0], in[1], out, ctx.stream);
         }});
  r.add("matmul", DeviceKind::cuda,
        {[](const Op&, const std::vector<TensorType>& in) { return float_ok("matmul", in[0].dtype); },
         [](const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
           const detail::MatmulShape s =
               detail::matmul_shape({in[0].dtype(), in[0].shape()}, {in[1].dtype(), in[1].shape()});
           gpu::matmul(in[0], in[1], out, s.batch, s.a_batch, s.b_batch, s.m, s.k, s.n, ctx.stream);
         }});
}

}  // namespace

// The CUDA kernels of the DSL ops, under the keys the ops name (ops/*.cpp).
void register_cuda_kernels(KernelRegistry& r) {
  register_elementwise(r);
  register_reductions(r);
  register_nnet(r);
}

}  // namespace convgraph
