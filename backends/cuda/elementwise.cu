// Elementwise DSL kernels: unary math, binary arithmetic / comparison with numpy
// broadcasting (BroadcastPlan offsets), where, cast, fill and the broadcast copy behind
// broadcast_to. Grid-stride loops. The unary and binary formulas are the rows of
// ops/elementwise_table.hpp, one kernel instance per row and type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernel_math.hpp"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/op_launch.hpp"

namespace convgraph::gpu::launch {

using cuda::kernels::blocks_for;
using cuda::kernels::kThreads;

namespace {

// ---- unary and binary: one kernel per row of ops/elementwise_table.hpp and type ----------

template <class T, class Fn>
__global__ void unary_kernel(const T* x, T* y, long long n, T a, T b) {
  CG_GRID_STRIDE_LOOP(i, n) { y[i] = Fn::apply(x[i], a, b); }
}

template <class T, class Fn>
__global__ void arith_kernel(const T* a, const T* b, T* out, BroadcastPlan p) {
  CG_GRID_STRIDE_LOOP(i, p.total) { out[i] = static_cast<T>(Fn::apply(a[plan_offset(p, 0, i)], b[plan_offset(p, 1, i)])); }
}

template <class T, class Fn>
__global__ void compare_kernel(const T* a, const T* b, bool* out, BroadcastPlan p) {
  CG_GRID_STRIDE_LOOP(i, p.total) { out[i] = Fn::apply(a[plan_offset(p, 0, i)], b[plan_offset(p, 1, i)]); }
}

// ---- where / broadcast copy (moved by element size) ---------------------------------

template <class U>
__global__ void where_kernel(const bool* c, const U* a, const U* b, U* out, BroadcastPlan p) {
  CG_GRID_STRIDE_LOOP(i, p.total) {
    out[i] = c[plan_offset(p, 0, i)] ? a[plan_offset(p, 1, i)] : b[plan_offset(p, 2, i)];
  }
}

template <class U>
__global__ void bcast_kernel(const U* x, U* y, BroadcastPlan p) {
  CG_GRID_STRIDE_LOOP(i, p.total) { y[i] = x[plan_offset(p, 0, i)]; }
}

template <class T>
__global__ void bcast_scale_kernel(const T* x, T* y, BroadcastPlan p, T scale) {
  CG_GRID_STRIDE_LOOP(i, p.total) { y[i] = x[plan_offset(p, 0, i)] * scale; }
}

int elem_size(Elem t) {
  switch (t) {
    case Elem::f16: case Elem::bf16: return 2;
    case Elem::f32: case Elem::i32: return 4;
    case Elem::f64: case Elem::i64: return 8;
    case Elem::b8: return 1;
  }
  return 0;
}

/// Calls f(U{}) with an unsigned integer type of t's size.
template <class F>
void by_size(Elem t, F&& f) {
  switch (elem_size(t)) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    default: f(std::uint64_t{}); break;
  }
}

// ---- cast / fill ----------------------------------------------------------------------

// Conversions: kernel_math.hpp's CastValue rules (tested on the host); float16 and
// bfloat16 go through double with CUDA's own conversions.
using cuda::kernels::CastValue;
using cuda::kernels::cast_load;
using cuda::kernels::cast_store;

__device__ CastValue load(Elem t, const void* p, long long i) {
  switch (t) {
    case Elem::f16: return cast_load(static_cast<double>(__half2float(static_cast<const __half*>(p)[i])));
    case Elem::bf16: return cast_load(static_cast<double>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])));
    case Elem::f32: return cast_load(static_cast<const float*>(p)[i]);
    case Elem::f64: return cast_load(static_cast<const double*>(p)[i]);
    case Elem::i32: return cast_load(static_cast<const std::int32_t*>(p)[i]);
    case Elem::i64: return cast_load(static_cast<const std::int64_t*>(p)[i]);
    case Elem::b8: return cast_load(static_cast<const bool*>(p)[i]);
  }
  return CastValue{};
}

__device__ void store(Elem t, void* p, long long i, const CastValue& v) {
  switch (t) {
    case Elem::f16: static_cast<__half*>(p)[i] = __double2half(cuda::kernels::cast_as_double(v)); break;
    case Elem::bf16: static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(cuda::kernels::cast_as_double(v)); break;
    case Elem::f32: static_cast<float*>(p)[i] = cast_store<float>(v); break;
    case Elem::f64: static_cast<double*>(p)[i] = cast_store<double>(v); break;
    case Elem::i32: static_cast<std::int32_t*>(p)[i] = cast_store<std::int32_t>(v); break;
    case Elem::i64: static_cast<std::int64_t*>(p)[i] = cast_store<std::int64_t>(v); break;
    case Elem::b8: static_cast<bool*>(p)[i] = cast_store<bool>(v); break;
  }
}

__global__ void cast_kernel(Elem from, const void* x, Elem to, void* y, long long n) {
  CG_GRID_STRIDE_LOOP(i, n) { store(to, y, i, load(from, x, i)); }
}

__global__ void fill_kernel(Elem t, void* y, long long n, double value) {
  CG_GRID_STRIDE_LOOP(i, n) { store(t, y, i, cast_load(value)); }
}

/// Calls f(T{}) for the four numeric compute types.
template <class F>
void numeric(Elem t, const char* who, F&& f) {
  switch (t) {
    case Elem::f32: f(float{}); return;
    case Elem::f64: f(double{}); return;
    case Elem::i32: f(std::int32_t{}); return;
    case Elem::i64: f(std::int64_t{}); return;
    default: break;
  }
  throw TypeError(msg(who, ": no CUDA kernel for this dtype"));
}

}  // namespace

void unary(UnaryCode op, Elem t, const void* x, void* y, long long n, double a, double b, cudaStream_t stream) {
  if (n == 0) return;
  numeric(t, "unary", [&](auto z) {
    using T = decltype(z);
    ew::visit_unary(op, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (ew::unary_applies<T>(Fn::kind)) {
        unary_kernel<T, Fn><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                                     static_cast<T>(a), static_cast<T>(b));
      } else {
        throw TypeError(msg(detail::unary_traits(op).name, ": no CUDA kernel for integer input"));
      }
    });
  });
  CG_CUDA_CHECK_LAUNCH();
}

void binary(BinaryCode op, Elem t, const void* a, const void* b, void* out, const BroadcastPlan& p,
            cudaStream_t stream) {
  if (p.total == 0) return;
  const unsigned grid = blocks_for(p.total);
  auto run = [&](auto z) {
    using T = decltype(z);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    ew::visit_binary(op, [&](auto fn) {
      using Fn = decltype(fn);
      constexpr detail::BinaryRule rule = detail::binary_traits(Fn::kind).rule;
      if constexpr (rule == detail::BinaryRule::compare)
        compare_kernel<T, Fn><<<grid, kThreads, 0, stream>>>(pa, pb, static_cast<bool*>(out), p);
      else if constexpr (std::is_same_v<T, bool> && rule == detail::BinaryRule::arith)
        throw TypeError(msg(detail::binary_traits(op).name, ": arithmetic on bool tensors"));
      else
        arith_kernel<T, Fn><<<grid, kThreads, 0, stream>>>(pa, pb, static_cast<T*>(out), p);
    });
  };
  if (t == Elem::b8) run(bool{});
  else numeric(t, "binary", run);
  CG_CUDA_CHECK_LAUNCH();
}

void where(Elem t, const void* cond, const void* a, const void* b, void* out, const BroadcastPlan& p,
           cudaStream_t stream) {
  if (p.total == 0) return;
  by_size(t, [&](auto z) {
    using U = decltype(z);
    where_kernel<U><<<blocks_for(p.total), kThreads, 0, stream>>>(static_cast<const bool*>(cond), static_cast<const U*>(a),
                                                                   static_cast<const U*>(b), static_cast<U*>(out), p);
  });
  CG_CUDA_CHECK_LAUNCH();
}

void cast(Elem from, const void* x, Elem to, void* y, long long n, cudaStream_t stream) {
  if (n == 0) return;
  if (from == to) {
    CG_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * elem_size(from), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(from, x, to, y, n);
  CG_CUDA_CHECK_LAUNCH();
}

void fill(Elem t, void* y, long long n, double value, cudaStream_t stream) {
  if (n == 0) return;
  if (value == 0) {  // all-zero bits are 0 in every type
    CG_CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<size_t>(n) * elem_size(t), stream));
    return;
  }
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(t, y, n, value);
  CG_CUDA_CHECK_LAUNCH();
}

void broadcast_copy(Elem t, const void* x, void* y, const BroadcastPlan& p, double scale, cudaStream_t stream) {
  if (p.total == 0) return;
  const unsigned grid = blocks_for(p.total);
  if (scale == 1.0) {
    by_size(t, [&](auto z) {
      using U = decltype(z);
      bcast_kernel<U><<<grid, kThreads, 0, stream>>>(static_cast<const U*>(x), static_cast<U*>(y), p);
    });
  } else if (t == Elem::f32) {
    bcast_scale_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(y), p,
                                                             static_cast<float>(scale));
  } else if (t == Elem::f64) {
    bcast_scale_kernel<double><<<grid, kThreads, 0, stream>>>(static_cast<const double*>(x), static_cast<double*>(y), p,
                                                              scale);
  } else {
    throw TypeError("broadcast_copy: a scaled copy needs float32 or float64");
  }
  CG_CUDA_CHECK_LAUNCH();
}

}  // namespace convgraph::gpu::launch
