// Row-wise softmax / log_softmax over the last axis with their fused gradients, and the
// class-index take / scatter pair of categorical cross-entropy. One block per row
// (grid-stride over rows); row sums are accumulated in double, as on the CPU. The
// per-element formulas are kernel_math.hpp's.
#include <cstdint>

#include "backends/cuda/kernel_math.hpp"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/op_launch.hpp"

namespace convgraph::gpu::launch {

using cuda::kernels::blocks_for;
using cuda::kernels::kThreads;
namespace km = cuda::kernels;  // the per-element formulas (kernel_math.hpp), tested on the host

namespace {

/// Sum / max of one value per thread over the block; every thread gets the result.
template <class V, bool kMax>
__device__ V block_reduce(V v, V* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) {
      const V o = scratch[threadIdx.x + s];
      if constexpr (kMax) scratch[threadIdx.x] = cuda::kernels::softmax_max(scratch[threadIdx.x], o);
      else scratch[threadIdx.x] += o;
    }
    __syncthreads();
  }
  const V r = scratch[0];
  __syncthreads();  // scratch is reused by the caller's next reduction
  return r;
}

unsigned row_blocks(long long rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

template <class T>
__global__ void softmax_kernel(bool log_out, const T* x, T* y, long long rows, long long n) {
  __shared__ double scratch[kThreads];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    // Subtracting the row maximum keeps exp() from overflowing.
    double m = static_cast<double>(xr[0]);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) m = km::softmax_max(m, static_cast<double>(xr[j]));
    const T mx = static_cast<T>(block_reduce<double, true>(m, scratch));
    double s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
      const T e = km::softmax_exp(xr[j], mx);
      s += e;
      if (!log_out) yr[j] = e;
    }
    s = block_reduce<double, false>(s, scratch);
    if (log_out) {
      for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] = km::log_softmax_value(xr[j], mx, s);
    } else {
      const T inv = km::softmax_scale<T>(s);
      for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= inv;
    }
  }
}

template <class T>
__global__ void softmax_grad_kernel(bool log_out, const T* gy, const T* y, T* gx, long long rows, long long n) {
  __shared__ double scratch[kThreads];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *g = gy + r * n, *yr = y + r * n;
    T* o = gx + r * n;
    double s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += km::softmax_grad_term(log_out, g[j], yr[j]);
    const T st = static_cast<T>(block_reduce<double, false>(s, scratch));
    for (long long j = threadIdx.x; j < n; j += blockDim.x) o[j] = km::softmax_grad_value(log_out, g[j], yr[j], st);
  }
}

template <class T, class I>
__global__ void take_class_kernel(const T* p, const I* idx, T* out, long long rows, long long n) {
  CG_GRID_STRIDE_LOOP(r, rows) {
    const long long c = static_cast<long long>(idx[r]);
    out[r] = km::class_in_range(c, n) ? p[r * n + c] : static_cast<T>(nan(""));  // the CPU throws instead
  }
}

template <class T, class I>
__global__ void scatter_class_kernel(const T* g, const I* idx, T* out, long long rows, long long n) {
  CG_GRID_STRIDE_LOOP(r, rows) {
    const long long c = static_cast<long long>(idx[r]);
    if (km::class_in_range(c, n)) out[r * n + c] = g[r];
  }
}

template <class F>
void by_float(bool is_double, F&& f) {
  if (is_double) f(double{});
  else f(float{});
}

template <class F>
void by_float_index(bool is_double, bool idx64, F&& f) {
  by_float(is_double, [&](auto z) {
    if (idx64) f(z, std::int64_t{});
    else f(z, std::int32_t{});
  });
}

}  // namespace

void softmax(bool log, bool is_double, const void* x, void* y, long long rows, long long n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  by_float(is_double, [&](auto z) {
    using T = decltype(z);
    softmax_kernel<T><<<row_blocks(rows), kThreads, 0, stream>>>(log, static_cast<const T*>(x), static_cast<T*>(y), rows, n);
  });
  CG_CUDA_CHECK_LAUNCH();
}

void softmax_grad(bool log, bool is_double, const void* gy, const void* y, void* out, long long rows, long long n,
                  cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  by_float(is_double, [&](auto z) {
    using T = decltype(z);
    softmax_grad_kernel<T><<<row_blocks(rows), kThreads, 0, stream>>>(log, static_cast<const T*>(gy), static_cast<const T*>(y),
                                                                       static_cast<T*>(out), rows, n);
  });
  CG_CUDA_CHECK_LAUNCH();
}

void take_class(bool is_double, bool idx64, const void* p, const void* idx, void* out, long long rows, long long n,
                cudaStream_t stream) {
  if (rows == 0) return;
  by_float_index(is_double, idx64, [&](auto z, auto iz) {
    using T = decltype(z);
    using I = decltype(iz);
    take_class_kernel<T, I><<<blocks_for(rows), kThreads, 0, stream>>>(static_cast<const T*>(p), static_cast<const I*>(idx),
                                                                        static_cast<T*>(out), rows, n);
  });
  CG_CUDA_CHECK_LAUNCH();
}

void scatter_class(bool is_double, bool idx64, const void* g, const void* idx, void* out, long long rows, long long n,
                   cudaStream_t stream) {
  if (rows == 0) return;
  by_float_index(is_double, idx64, [&](auto z, auto iz) {
    using T = decltype(z);
    using I = decltype(iz);
    scatter_class_kernel<T, I><<<blocks_for(rows), kThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const I*>(idx),
                                                                           static_cast<T*>(out), rows, n);
  });
  CG_CUDA_CHECK_LAUNCH();
}

}  // namespace convgraph::gpu::launch
