#pragma once
/// Index plans for the CUDA DSL kernels (elementwise with numpy broadcasting, strided
/// reductions). Computed on the host, GPU-free and unit-tested anywhere; the plans are
/// plain structs passed by value to the kernels. C++17 and no CUDA header, so nvcc
/// (C++17), the C++20 library and the tests all include it.
#include <cstdint>
#include <vector>

namespace convgraph::gpu {

inline constexpr int kMaxDims = 6;       ///< dimensions a plan can index after collapsing
inline constexpr int kMaxOperands = 3;   ///< where(cond, a, b) has three

/// Walks a contiguous output of `shape` (row-major) and, for each operand, the element
/// offset it reads: offset_k(i) = sum_d index_d(i) * strides[k][d]. Broadcast axes have
/// stride 0. Unused trailing axes are never read (rank says how many are valid).
struct BroadcastPlan {
  int rank = 0;
  int operands = 0;
  std::int64_t shape[kMaxDims] = {1, 1, 1, 1, 1, 1};
  std::int64_t strides[kMaxOperands][kMaxDims] = {};
  std::int64_t total = 1;  ///< elements in the output
};

/// Plans `out_shape` = broadcast of the contiguous operand shapes `ins` (numpy rules:
/// right-aligned, size-1 axes repeat). Size-1 output axes are dropped and neighbouring
/// axes merged when every operand is contiguous across them, so e.g. [N, C, H, W] + [C, 1, 1]
/// becomes 3 axes. Throws ShapeError when an operand does not broadcast to out_shape,
/// ValueError with more than kMaxOperands operands or more than kMaxDims axes left.
BroadcastPlan plan_broadcast(const std::vector<std::vector<std::int64_t>>& ins,
                             const std::vector<std::int64_t>& out_shape);

/// The output element offsets of each operand (host emulation of the kernels' index
/// arithmetic, for tests): result[k][i] is operand k's offset for output element i.
std::vector<std::vector<std::int64_t>> broadcast_offsets(const BroadcastPlan& p);

/// A reduction of a contiguous input over some axes: output element o starts at
/// sum_d index_d(o over kept) * kept_strides[d], and its inputs sit at that base plus
/// sum_d index_d(j over red) * red_strides[d] for j < red_count. Kept and reduced axes
/// are each collapsed where contiguous.
struct ReducePlan {
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_shape[kMaxDims] = {1, 1, 1, 1, 1, 1};
  std::int64_t kept_strides[kMaxDims] = {};
  std::int64_t red_shape[kMaxDims] = {1, 1, 1, 1, 1, 1};
  std::int64_t red_strides[kMaxDims] = {};
  std::int64_t out_count = 1, red_count = 1;
};

/// Throws ValueError for an axis out of range or more than kMaxDims axes after collapsing.
ReducePlan plan_reduce(const std::vector<std::int64_t>& shape, const std::vector<int>& axes);

/// The axes sum_to reduces to bring `from` down to `to` (leading axes, and axes where
/// `to` has 1 and `from` does not); throws ShapeError when `to` is not reachable.
std::vector<int> sum_to_axes(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to);

/// `v` as the 32-bit int that cuBLAS (and the legacy cuDNN API) take for sizes, leading
/// dimensions and batch counts; ValueError "<who>: <what> = v exceeds ..." when it does
/// not fit.
int checked_int(std::int64_t v, const char* who, const char* what);

// ---- index arithmetic shared by kernels and host emulation --------------------------

#if defined(__CUDACC__)
#define CG_PLAN_HD __host__ __device__ __forceinline__
#else
#define CG_PLAN_HD inline
#endif

/// Offset of operand k for output element i.
CG_PLAN_HD std::int64_t plan_offset(const BroadcastPlan& p, int k, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const std::int64_t n = p.shape[d];
    off += (i % n) * p.strides[k][d];
    i /= n;
  }
  return off;
}

/// Offset from `strides` of the row-major position i within `shape` (rank axes).
CG_PLAN_HD std::int64_t strided_offset(const std::int64_t* shape, const std::int64_t* strides, int rank,
                                       std::int64_t i) {
  std::int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

}  // namespace convgraph::gpu
