// Strided reductions (sum / mean / max / min over any set of axes) from a ReducePlan.
// Few long reductions (e.g. a loss summed to a scalar) take one block per output and a
// shared-memory tree; many short ones (a bias gradient over the batch) one thread per
// output, whose neighbours read neighbouring addresses.
#include <cstdint>

#include "backends/cuda/kernel_math.hpp"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/op_launch.hpp"

namespace convgraph::gpu::launch {

using cuda::kernels::kThreads;

namespace {

using cuda::kernels::RedOp;
template <class T>
using Acc = cuda::kernels::ReduceAcc<T>;

// The arithmetic is kernel_math.hpp's (tested on the host against the CPU kernel).
__host__ __device__ constexpr RedOp red_op(ReduceCode k) {
  return k == ReduceCode::sum ? RedOp::sum : k == ReduceCode::mean ? RedOp::mean : k == ReduceCode::max ? RedOp::max : RedOp::min;
}
template <class T, ReduceCode K>
__device__ Acc<T> identity() {
  return cuda::kernels::reduce_identity<T>(red_op(K));
}
template <class T, ReduceCode K>
__device__ Acc<T> combine(Acc<T> a, Acc<T> b) {
  return cuda::kernels::reduce_combine<Acc<T>>(red_op(K), a, b);
}
template <class T, ReduceCode K>
__device__ T finish(Acc<T> a, long long count) {
  return cuda::kernels::reduce_finish<T>(red_op(K), a, count);
}

template <class T, ReduceCode K>
__global__ void reduce_per_thread(const T* x, T* y, ReducePlan p) {
  CG_GRID_STRIDE_LOOP(o, p.out_count) {
    const T* base = x + strided_offset(p.kept_shape, p.kept_strides, p.kept_rank, o);
    Acc<T> acc = identity<T, K>();
    for (long long j = 0; j < p.red_count; ++j)
      acc = combine<T, K>(acc, static_cast<Acc<T>>(base[strided_offset(p.red_shape, p.red_strides, p.red_rank, j)]));
    y[o] = finish<T, K>(acc, p.red_count);
  }
}

template <class T, ReduceCode K>
__global__ void reduce_per_block(const T* x, T* y, ReducePlan p) {
  __shared__ Acc<T> part[kThreads];
  for (long long o = blockIdx.x; o < p.out_count; o += gridDim.x) {
    const T* base = x + strided_offset(p.kept_shape, p.kept_strides, p.kept_rank, o);
    Acc<T> acc = identity<T, K>();
    for (long long j = threadIdx.x; j < p.red_count; j += blockDim.x)
      acc = combine<T, K>(acc, static_cast<Acc<T>>(base[strided_offset(p.red_shape, p.red_strides, p.red_rank, j)]));
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] = combine<T, K>(part[threadIdx.x], part[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = finish<T, K>(part[0], p.red_count);
    __syncthreads();  // part[] is reused by the next output
  }
}

template <class T, ReduceCode K>
void run(const void* x, void* y, const ReducePlan& p, cudaStream_t stream) {
  const T* in = static_cast<const T*>(x);
  T* out = static_cast<T*>(y);
  // A block per output pays off once each output sums many elements and there are too
  // few outputs to fill the GPU with one thread each.
  if (p.red_count >= 256 && p.out_count < (1 << 16)) {
    const unsigned grid = static_cast<unsigned>(p.out_count < 65535 ? p.out_count : 65535);
    reduce_per_block<T, K><<<grid, kThreads, 0, stream>>>(in, out, p);
  } else {
    reduce_per_thread<T, K><<<cuda::kernels::blocks_for(p.out_count), kThreads, 0, stream>>>(in, out, p);
  }
  CG_CUDA_CHECK_LAUNCH();
}

template <class T>
void run_kind(ReduceCode op, const void* x, void* y, const ReducePlan& p, cudaStream_t stream) {
  switch (op) {
    case ReduceCode::sum: run<T, ReduceCode::sum>(x, y, p, stream); return;
    case ReduceCode::mean: run<T, ReduceCode::mean>(x, y, p, stream); return;
    case ReduceCode::max: run<T, ReduceCode::max>(x, y, p, stream); return;
    case ReduceCode::min: run<T, ReduceCode::min>(x, y, p, stream); return;
  }
}

}  // namespace

void reduce(ReduceCode op, Elem t, const void* x, void* y, const ReducePlan& p, cudaStream_t stream) {
  if (p.out_count == 0) return;
  switch (t) {
    case Elem::f32: run_kind<float>(op, x, y, p, stream); return;
    case Elem::f64: run_kind<double>(op, x, y, p, stream); return;
    case Elem::i32: run_kind<std::int32_t>(op, x, y, p, stream); return;
    case Elem::i64: run_kind<std::int64_t>(op, x, y, p, stream); return;
    case Elem::b8:
      if (op == ReduceCode::max) { run<bool, ReduceCode::max>(x, y, p, stream); return; }
      if (op == ReduceCode::min) { run<bool, ReduceCode::min>(x, y, p, stream); return; }
      break;
    default: break;
  }
  throw TypeError("reduce: no CUDA kernel for this dtype");
}

}  // namespace convgraph::gpu::launch
