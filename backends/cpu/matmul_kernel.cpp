// CPU kernel of matmul (ops/dot.cpp, KernelRegistry key "matmul"), batched over the
// broadcast batch axes: float32 through the packed, ISA-dispatched sgemm (backends/cpu/
// sgemm.hpp), other dtypes through Eigen's GEMM on row-major maps (Eigen stays inside this
// file). Eigen here is compiled for the baseline level and, split into row blocks, ran a
// dense layer's 64x800x500 product as 64 matrix-vector products at ~2 GFLOP/s.
#include <Eigen/Core>

#include <algorithm>

#include "backends/cpu/kernels_cpu.hpp"
#include "backends/cpu/sgemm.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/kernel_util.hpp"
#include "ops/matmul_shape.hpp"

namespace convgraph {

namespace {

using detail::MatmulShape;

/// Offsets (in matrices) of each operand's matrix for every broadcast batch index.
void batch_offsets(const MatmulShape& s, std::vector<std::int64_t>& oa, std::vector<std::int64_t>& ob) {
  const std::int64_t nb = numel(s.batch);
  oa.assign(static_cast<std::size_t>(nb), 0);
  ob.assign(static_cast<std::size_t>(nb), 0);
  const Shape sa = contiguous_strides(s.a_batch), sb = contiguous_strides(s.b_batch);
  for (std::int64_t i = 0; i < nb; ++i) {
    std::int64_t rem = i;
    for (std::size_t d = s.batch.size(); d-- > 0;) {
      const std::int64_t idx = rem % s.batch[d];
      rem /= s.batch[d];
      if (s.a_batch[d] != 1) oa[static_cast<std::size_t>(i)] += idx * sa[d];
      if (s.b_batch[d] != 1) ob[static_cast<std::size_t>(i)] += idx * sb[d];
    }
  }
}

template <class T>
void gemm_batched(const MatmulShape& s, const T* a, const T* b, T* c, const ExecContext& ctx) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<std::int64_t> oa, ob;
  batch_offsets(s, oa, ob);
  const std::int64_t nb = numel(s.batch), m = s.m, k = s.k, n = s.n;
  if (m * n == 0) return;
  if (k == 0) {
    std::fill(c, c + nb * m * n, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    auto one = [&](std::int64_t bi, ThreadPool* pool) {
      cpu::sgemm(false, false, m, n, k, 1.0f, a + oa[static_cast<std::size_t>(bi)] * m * k, k,
                 b + ob[static_cast<std::size_t>(bi)] * k * n, n, 0.0f, c + bi * m * n, n, pool);
    };
    if (nb == 1) return one(0, ctx.pool);  // sgemm splits one product over the pool itself
    detail::parallel_range(ctx, nb, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t bi = begin; bi < end; ++bi) one(bi, nullptr);
    });
    return;
  }
  // Tasks are (batch, block of rows) of about 0.25M multiply-adds each: tiny products stay
  // on one thread, and a single large GEMM is still split across the pool.
  const std::int64_t row_cost = std::max<std::int64_t>(1, k * n);
  const std::int64_t rows_per_task = std::clamp<std::int64_t>((1 << 18) / row_cost, 1, m);
  const std::int64_t blocks = (m + rows_per_task - 1) / rows_per_task;
  detail::parallel_range(ctx, nb * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bi = t / blocks, r0 = (t % blocks) * rows_per_task;
      const std::int64_t rows = std::min(rows_per_task, m - r0);
      Eigen::Map<const Mat> A(a + oa[static_cast<std::size_t>(bi)] * m * k + r0 * k, rows, k);
      Eigen::Map<const Mat> B(b + ob[static_cast<std::size_t>(bi)] * k * n, k, n);
      Eigen::Map<Mat> C(c + bi * m * n + r0 * n, rows, n);
      C.noalias() = A * B;
    }
  });
}

void run_matmul(const Op&, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const MatmulShape s = detail::matmul_shape({in[0].dtype(), in[0].shape()}, {in[1].dtype(), in[1].shape()});
  detail::dispatch_dtype(in[0].dtype(), "matmul", [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, bool>) {
      throw TypeError("matmul: bool operands; cast them first");
    } else {
      gemm_batched<T>(s, in[0].data<T>(), in[1].data<T>(), out.data<T>(), ctx);
    }
    return 0;
  });
}

}  // namespace

void register_cpu_matmul_kernel(KernelRegistry& r) { r.add("matmul", DeviceKind::cpu, {nullptr, run_matmul}); }

}  // namespace convgraph
